"""Router kinds: the pinned routers from their isolated venvs, what each does differently, and
a user's own router by command template or by URL, located and cleared like the built-in."""

from __future__ import annotations

import pytest

from pytest_wedge.faults import ErrorStatus
from pytest_wedge.routers.adapters import SGLANG_ROUTER, VLLM_ROUTER
from pytest_wedge.routers.envs import ready_env
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def _ok_harness(wedge, n: int = 5) -> None:
    harness = wedge.harness(agents=n, rounds=1, max_tokens=4, client_timeout_s=20)
    assert harness.wait(30)
    states = wedge.ledger.by_origin("harness").states()
    assert states.get("ok") == n, states


@pytest.mark.wedge(router="sglang-router")
def test_sglang_router_runs_from_its_isolated_venv_and_origin_survives_by_header(wedge):
    env = ready_env(SGLANG_ROUTER.package, SGLANG_ROUTER.version)
    assert env is not None
    assert wedge.topology.components["router"].argv[0] == env.script("sglang-router")
    _ok_harness(wedge)
    # sglang-router drops `user` from chat bodies (routers.md A2): the origin the workers
    # record can only have come from the x-request-id-origin header.
    decode = wedge.worker_ledgers()["decode-0"]["entries"]
    harness = [e for e in decode if e["origin"] == "harness"]
    assert len(harness) == 5, [e["origin"] for e in decode]


def _run_catalog_scenario(wedge_factory, name: str, **router_kwargs):
    """Run the catalog's ``name`` on a topology of the same shape, with ``router_kwargs``."""
    from pytest_wedge.scenarios import catalog
    from pytest_wedge.scenarios.runner import run_scenario

    scenario = next(s for s in catalog() if s.name == name)
    spec = scenario.spec
    wedge = wedge_factory(
        prefill=spec.prefill,
        decode=spec.decode,
        stub=spec.stub,
        router_args=list(spec.router_args),
        **router_kwargs,
    )
    result = run_scenario(wedge, scenario)
    assert result.diagnosis is not None and result.check is not None
    return wedge, result


SMG_TEMPLATE = (
    "{smg} launch --host {{host}} --port {{port}} --pd-disaggregation "
    "--prefill {{prefill_url[0]}} {{bootstrap_port[0]}} --decode {{decode_url[0]}} "
    "--prometheus-host {{host}} --prometheus-port {{metrics_port}}"
)


def test_command_router_from_a_user_template_is_located_and_cleared_like_the_built_in(
    wedge_factory,
):
    from pytest_wedge.runtime.binaries import smg_path

    smg = smg_path()
    assert smg is not None
    template = SMG_TEMPLATE.format(smg=smg)
    wedge, result = _run_catalog_scenario(
        wedge_factory, "half-open-decode-stream", router={"kind": "command", "command": template}
    )
    argv = wedge.topology.components["router"].argv
    # The user's template, not the adapter's launch line: rendered with the links' ports.
    assert argv[:2] == (smg, "launch") and "{" not in " ".join(argv)
    assert (
        argv[argv.index("--decode") + 1]
        == f"http://{wedge.topology.links['router->decode-0'].listen}"
    )
    assert result.diagnosis.location == "decode-0"
    assert result.check.time_to_clear_s is not None and result.check.time_to_clear_s <= 3.5


def test_url_router_started_by_the_test_is_located_and_cleared_like_the_built_in(
    wedge_factory, tmp_path
):
    """The test runs its own smg; the plugin only puts proxies around it and its workers."""
    import subprocess

    from pytest_wedge.runtime.binaries import smg_path
    from pytest_wedge.topology.ports import PortAllocator

    smg = smg_path()
    assert smg is not None
    allocator = PortAllocator()
    port, metrics, prefill_link, decode_link, bootstrap = allocator.take(5)
    flags = [
        "--request-timeout-secs",
        "2",
        "--stream-body-stall-timeout-secs",
        "1",
        # Its workers come up after it: without this smg re-checks them only every 30 s.
        "--worker-startup-check-interval",
        "1",
    ]
    argv = [
        smg,
        "launch",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--pd-disaggregation",
        "--prefill",
        f"http://127.0.0.1:{prefill_link}",
        str(bootstrap),
        "--decode",
        f"http://127.0.0.1:{decode_link}",
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(metrics),
        *flags,
    ]
    with open(tmp_path / "router.log", "wb") as log:
        router = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wedge, result = _run_catalog_scenario(
            wedge_factory,
            "half-open-decode-stream",
            router={
                "kind": "url",
                "url": f"http://127.0.0.1:{port}",
                "metrics_url": f"http://127.0.0.1:{metrics}/metrics",
                "prefill_listen": [prefill_link],
                "decode_listen": [decode_link],
                "bootstrap_ports": [bootstrap],
            },
        )
        # Not ours: no router component to start, stop or restart...
        assert "router" not in wedge.topology.components
        # ...but its traffic crosses the links: client->router in front, the workers behind.
        assert wedge.topology.links["router->decode-0"].listen_port == decode_link
        assert result.diagnosis.location == "decode-0"
        assert result.check.time_to_clear_s is not None and result.check.time_to_clear_s <= 3.5
        assert router.poll() is None  # the plugin left it alone
    finally:
        router.terminate()
        router.wait(10)
        allocator.close()


def _stream_past_the_cap(wedge) -> tuple[list[str], str | None]:
    """One 40-token stream at 75 ms a token (3 s) under a 2 s request timeout: its lines, and
    the error that ended it (None: it ended cleanly)."""
    import httpx

    body = {
        "model": "stub-model",
        "stream": True,
        "max_tokens": 40,
        "messages": [{"role": "user", "content": "a long one"}],
    }
    lines: list[str] = []
    try:
        with httpx.stream(
            "POST",
            wedge.url + "/v1/chat/completions",
            json=body,
            timeout=15,
            headers={"x-request-id-origin": "probe"},
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():  # one by one: keep what came before a cut
                if line:
                    lines.append(line)
    except httpx.RemoteProtocolError as exc:
        return lines, type(exc).__name__
    return lines, None


@pytest.mark.wedge(
    router="sglang-router", router_args=["--request-timeout-secs", "2"], stub={"itl_ms": 75.0}
)
def test_sglang_router_cuts_a_stream_at_the_timeout_without_an_error_frame_or_a_counter(wedge):
    """Cited by fixtures/*.toml [routers.sglang-router]: the cut is a truncated chunked body
    (no error frame, no [DONE]) and no timeout is counted, so RequestTimeout's firing is not
    observable through the router's metrics (routers.md A4, A5)."""
    lines, error = _stream_past_the_cap(wedge)
    assert error == "RemoteProtocolError", lines[-3:]  # the chunked body never ended
    assert 0 < len(lines) < 40 and "data: [DONE]" not in lines
    assert not any('"error"' in line for line in lines), lines[-2:]
    metrics = wedge.topology.router_metrics()
    assert 'error_type="timeout"' not in metrics
    assert "smg_worker_retries_exhausted_total{" not in metrics


@pytest.mark.wedge(router_args=["--request-timeout-secs", "2"], stub={"itl_ms": 75.0})
def test_smg_ends_a_stream_at_the_timeout_with_an_error_frame_and_a_timeout_counter(wedge):
    """The contrast: smg 1.13 sends an error frame and [DONE], and counts the timeout."""
    lines, error = _stream_past_the_cap(wedge)
    assert error is None and lines[-1] == "data: [DONE]"
    assert "stream_error" in lines[-2]
    assert 'error_type="timeout"' in wedge.topology.router_metrics()


def test_sglang_router_has_no_stream_body_stall_flag() -> None:
    """Cited by half-open-decode-stream: smg's --stream-body-stall-timeout-secs does not exist
    in sglang-router 0.3.2, so neither the flag nor its watchdog can be armed there."""
    import subprocess

    from pytest_wedge.routers.envs import ensure_env

    env = ensure_env(SGLANG_ROUTER.package, SGLANG_ROUTER.version)
    shown = subprocess.run(
        [env.script("sglang-router"), "launch", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "--request-timeout-secs" in shown
    assert "--stream-body-stall-timeout-secs" not in shown


@pytest.mark.wedge(router="vllm-router", worker_protocol="sglang")
def test_vllm_router_waits_for_its_workers_then_serves_sglang_stubs_with_origin_in_the_body(wedge):
    """vllm-router 0.1.17 opens its port only once every worker is healthy (the topology
    starts it after them); with SGLang-protocol stubs, chosen explicitly over its own vLLM
    protocol, it serves traffic, the origin surviving only in the body `user` (routers.md B2,
    B7)."""
    argv = wedge.topology.components["router"].argv
    assert "--vllm-pd-disaggregation" in argv and argv[0].endswith("/bin/vllm-router")
    _ok_harness(wedge)
    decode = wedge.worker_ledgers()["decode-0"]["entries"]
    assert [e["origin"] for e in decode if e["origin"] == "harness"] == ["harness"] * 5
    # No bootstrap room: the decode takes no preallocation slot and fetches no KV (cited by
    # liveness-on-health-generate-kills-a-healthy-decode).
    assert [e["room"] for e in decode if e["origin"] == "harness"] == [None] * 5


def test_vllm_router_has_no_stream_body_stall_flag_and_exits_2_on_it() -> None:
    """Cited by half-open-decode-stream: vllm-router 0.1.17 has no
    --stream-body-stall-timeout-secs; started with it, it exits at once with code 2 (a usage
    error), so neither the flag nor its watchdog can be armed there."""
    import subprocess

    from pytest_wedge.routers.envs import ensure_env

    script = ensure_env(VLLM_ROUTER.package, VLLM_ROUTER.version).script("vllm-router")
    shown = subprocess.run(
        [script, "--help"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert "--request-timeout-secs" in shown
    assert "--stream-body-stall-timeout-secs" not in shown
    refused = subprocess.run(
        [script, "--stream-body-stall-timeout-secs", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr[-500:]


@pytest.mark.wedge(
    router="vllm-router", router_args=["--request-timeout-secs", "2"], stub={"itl_ms": 75.0}
)
def test_vllm_router_cuts_a_stream_at_the_timeout_without_an_error_frame_or_a_counter(wedge):
    """Cited by fixtures/*.toml [routers.vllm-router]: with its own vLLM-protocol workers, the
    cut is a truncated chunked body (no error frame, no [DONE]), and none of the counters
    RequestTimeout reads exists, so its firing is not observable (routers.md B4, B5)."""
    assert wedge.topology.spec.worker_protocol == "vllm"
    lines, error = _stream_past_the_cap(wedge)
    assert error == "RemoteProtocolError", lines[-3:]  # the chunked body never ended
    assert 0 < len(lines) < 40 and "data: [DONE]" not in lines
    assert not any('"error"' in line for line in lines), lines[-2:]
    metrics = wedge.topology.router_metrics()
    assert "vllm_router_" in metrics and "smg_worker_errors_total" not in metrics
    assert "smg_worker_retries_exhausted_total" not in metrics


@pytest.mark.wedge(
    router="sglang-router", worker_protocol="vllm", stub={"bootstrap_timeout_s": 1.0}
)
def test_sglang_router_sends_vllm_workers_no_kv_handle_so_every_prefills_kv_expires(wedge):
    """Cited by decode-rejection-strands-prefill-kv: sglang-router 0.3.2 detects no engine
    kind (routers.md A1) and sends vLLM-protocol workers SGLang's concurrent dispatch, so no
    decode gets a kv_transfer_params handle: it computes the request itself and the prefill's
    KV waits for a pull that never comes, until it expires."""
    _ok_harness(wedge, n=3)
    ledgers = wedge.worker_ledgers()
    decode = [e for e in ledgers["decode-0"]["entries"] if e["origin"] == "harness"]
    assert [e["room"] for e in decode] == [None] * 3

    def prefill_states() -> list[tuple[str, str | None]]:
        entries = wedge.worker_ledgers()["prefill-0"]["entries"]
        return [(e["state"], e["error"]) for e in entries if e["origin"] == "harness"]

    wait_for(
        lambda: all(state == "error" for state, _ in prefill_states()),
        timeout_s=5,
        what="the prefill's KV of every harness request to expire",
        describe=lambda: str(prefill_states()),
    )
    assert all("bootstrap timeout" in str(error) for _, error in prefill_states())


@pytest.mark.wedge(router="vllm-router")
def test_vllm_router_passes_a_prefill_error_to_the_client_without_a_retry(wedge):
    """Cited by replayed-prefill-error-executes-twice: vllm-router 0.1.17 never retries in PD
    mode and calls the decode only after the prefill answered, so a prefill 500 reaches the
    client as a 500 naming the prefill, each request runs once, and the decode never sees
    it (routers.md B3)."""
    agents = 4
    wedge.apply(
        ErrorStatus(
            "prefill-0", origin="harness", first_n=agents, after_kv_taken=True, delay_ms=100
        )
    )
    harness = wedge.harness(agents=agents, rounds=1, max_tokens=8, client_timeout_s=20)
    assert harness.wait(30)
    records = wedge.ledger.by_origin("harness").records
    assert [r.state for r in records] == ["error"] * agents
    for record in records:
        assert "HTTP 500" in str(record.error) and "Prefill server" in str(record.error)
        assert "returned 500" in str(record.error)
    executions = wedge.assert_executed_once("harness")
    assert executions and all(e.retries == 0 and e.executed <= 1 for e in executions)
    decode = wedge.worker_ledgers()["decode-0"]["entries"]
    assert not [e for e in decode if e["origin"] == "harness"]
    # The evidence reads vllm-router's own names in smg's keys: health, failures per worker.
    from pytest_wedge.evidence.parse import parse_router_metrics
    from pytest_wedge.evidence.read_public import router_worker_names

    seen = parse_router_metrics(
        wedge.topology.router_metrics(), router_worker_names(wedge.topology)
    )
    assert seen["health"] == {"prefill-0": 1.0, "decode-0": 1.0}
    assert seen["cb_failed"].get("prefill-0") == agents and not seen["cb_failed"].get("decode-0")
    # The locator reads the 500's text as the prefill's answer, not an unreachable link.
    assert wedge.diagnose().location == "prefill-0"


@pytest.mark.parametrize("kind", ["smg", "sglang-router", "vllm-router"])
def test_a_router_request_timeout_is_named_as_what_cleared_the_wedge_on_every_kind(
    wedge_factory, kind
):
    """smg counts the cut; sglang-router and vllm-router count nothing, so the firing is read
    from the client's answers: requests that ended without success at the timeout."""
    from pytest_wedge.faults import StallAfterTokens
    from pytest_wedge.watchdogs import RequestTimeout

    wedge = wedge_factory(router=kind, router_args=["--request-timeout-secs", "2"])
    with wedge.expect_cleared(
        within_s=4.0, watchdogs=[RequestTimeout(2)], require_recovery=False
    ) as check:
        wedge.apply(StallAfterTokens("decode-0", tokens=3))
        wedge.harness(agents=5, rounds=1, client_timeout_s=30)
    [row] = check.watchdog_rows
    assert row["fired"] and row["case"] == "cleared", row
    how = "counted by the router" if kind == "smg" else "seen by the client: 5 requests"
    assert row["detail"].startswith(how), row


HEALTH_FLAGS = [
    "--health-check-interval-secs",
    "1",
    "--health-check-timeout-secs",
    "1",
    "--health-failure-threshold",
    "2",
]


@pytest.mark.parametrize("kind", ["smg", "sglang-router", "vllm-router"])
def test_a_router_health_check_takes_a_paused_decode_out_of_rotation_on_every_kind(
    wedge_factory, kind
):
    """Each router lists a paused decode unhealthy within its flags' time (read from its
    /workers), new requests then avoid it, and the requests already on it stay hung. They are
    located at the stopped decode: certain with a per-worker in-flight count (smg's, and
    vllm-router's PD-stage gauges), likely behind sglang-router, which keeps none (that it
    holds them is then inferred)."""
    from pytest_wedge.faults import Pause
    from pytest_wedge.watchdogs import NotClearedError, RouterHealthCheck

    wedge = wedge_factory(router=kind, decode=2, router_args=HEALTH_FLAGS)
    with (
        pytest.raises(NotClearedError),
        wedge.expect_cleared(
            within_s=8.0, watchdogs=[RouterHealthCheck("decode-0")], require_recovery=False
        ) as check,
    ):
        wedge.apply(Pause("decode-0"))
        wedge.harness(agents=12, rounds=1, max_tokens=4)
    [row] = check.watchdog_rows
    assert row["fired"] and row["case"] == "acted, wedge stayed", row
    assert row["fires_after_s"] == 2.0  # 1 s timeout + (2 - 1) x 1 s interval
    assert 2.0 <= row["first_at"] - check.onset <= 8.0, row
    assert row["outcome"].startswith("done: verified: 3 new requests answered (200"), row
    stuck = wedge.ledger.by_origin("harness").pending()
    assert stuck and all(r.sent is not None for r in stuck)
    diagnosis = wedge.diagnose()
    assert diagnosis.location == "decode-0", diagnosis.render()
    counted = kind in ("smg", "vllm-router")
    assert diagnosis.confidence == ("certain" if counted else "likely"), diagnosis.render()


@pytest.mark.parametrize("kind", ["smg", "vllm-router"])
def test_a_worker_the_router_still_lists_unhealthy_does_not_leak_into_the_next_test(
    wedge_factory, kind
):
    """A test that paused decode-0 under a fast health check ends with the router listing it
    unhealthy. Resuming it is not enough: the router takes two good probes to list it again,
    and the next test on the same topology would find its requests kept off decode-0."""
    from pytest_wedge.faults import Pause

    wedge = wedge_factory(router=kind, decode=2, router_args=HEALTH_FLAGS)
    wedge.apply(Pause("decode-0"))
    wait_for(
        lambda: not all(_listed_healthy(wedge).values()),
        timeout_s=20,
        what="the router to list the paused decode-0 unhealthy",
    )
    following = wedge_factory(router=kind, decode=2, router_args=HEALTH_FLAGS)
    assert following.topology is wedge.topology
    listed = _listed_healthy(following)
    assert listed and all(listed.values()), listed


def _listed_healthy(wedge) -> dict[str, bool]:
    import httpx

    workers = httpx.get(wedge.topology.router_url + "/workers", timeout=5).json()["workers"]
    return {w["url"]: w["is_healthy"] for w in workers}


@pytest.mark.parametrize("kind", ["smg", "sglang-router", "vllm-router"])
def test_a_router_circuit_breaker_opens_on_a_failing_decode_except_on_vllm_router(
    wedge_factory, kind
):
    """smg and sglang-router open decode-0's breaker after 3 failed requests (and the
    prefill's: both legs are charged) and refuse new ones at once; vllm-router has no breaker
    in PD mode, so the watchdog never fires there (routers.md A3, B3)."""
    from pytest_wedge.waiting import wait_for
    from pytest_wedge.watchdogs import RouterCircuitBreaker

    args = ["--disable-retries", "--cb-failure-threshold", "3", "--cb-timeout-duration-secs", "30"]
    wedge = wedge_factory(router=kind, router_args=args)
    dog = RouterCircuitBreaker("decode-0")
    dog.arm(wedge)
    try:
        wedge.apply(ErrorStatus("decode-0", status=500))
        wedge.harness(agents=4, rounds=1, max_tokens=4, client_timeout_s=10).wait(15)
        if kind != "vllm-router":
            wait_for(
                lambda: any(f.action_ended for f in dog.firings(wedge)),
                timeout_s=10,
                what="the breaker to open and its removal to be verified",
            )
    finally:
        dog.disarm(wedge)
    fired = dog.firings(wedge)
    if kind == "vllm-router":
        assert not fired
        return
    assert fired[0].detail == "the router's smg_worker_cb_state of decode-0 reads open", fired
    assert fired[0].outcome.startswith("done: verified: 3 new requests answered (503"), fired


def test_sglang_and_vllm_routers_have_no_pool_idle_timeout_flag() -> None:
    """Cited by stale-pooled-keepalive-connection: smg 1.13 has smg pull request #2162's
    --upstream-pool-idle-timeout-secs; sglang-router 0.3.2 and vllm-router 0.1.17 have no
    flag for their upstream pool's idle time."""
    import subprocess

    from pytest_wedge.routers.envs import ensure_env
    from pytest_wedge.runtime.binaries import smg_path

    def shown(argv: list[str]) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout

    smg = smg_path()
    assert smg is not None
    assert "--upstream-pool-idle-timeout-secs" in shown([smg, "launch", "--help"])
    sglang = ensure_env(SGLANG_ROUTER.package, SGLANG_ROUTER.version)
    vllm = ensure_env(VLLM_ROUTER.package, VLLM_ROUTER.version)
    for text in (
        shown([sglang.script("sglang-router"), "launch", "--help"]),
        shown([vllm.script("vllm-router"), "--help"]),
    ):
        assert "--retry-max-retries" in text  # the help was read
        assert "pool-idle" not in text and "keep-alive" not in text


@pytest.mark.wedge(router="vllm-router", stub={"keepalive_timeout_s": 2.0})
def test_vllm_router_sends_nothing_on_a_connection_idle_past_the_engine_keepalive(wedge):
    """Cited by stale-pooled-keepalive-connection: after a burst of 16 requests and a 3 s
    idle gap, past the stubs' 2 s keep-alive, every request of vllm-router 0.1.17 is ok,
    though it never retries in PD mode: it sent none on a connection the stub had closed."""
    burst = wedge.harness(agents=16, rounds=1, max_tokens=4, origin="burst")
    assert burst.wait(30)
    harness = wedge.harness(agents=4, rounds=2, think_time_s=3.0, max_tokens=4)
    assert harness.wait(30)
    assert wedge.ledger.by_origin("harness").states()["ok"] == 8


@pytest.mark.wedge(router="vllm-router", stub={"bootstrap_timeout_s": 3.0})
def test_vllm_router_fails_a_reset_decode_leg_at_once_and_the_prefill_keeps_its_kv_until_expiry(
    wedge,
):
    """Cited by decode-transport-error-orphans-prefill: vllm-router 0.1.17 calls the decode
    after the prefill answered, so a reset on router->decode-0 fails each request at once
    (500), while the prefill holds the KV it answered with until its expiry deadline."""
    from pytest_wedge.faults import ResetPeer
    from pytest_wedge.waiting import wait_for

    wedge.apply(ResetPeer("router->decode-0", stream="upstream"))
    harness = wedge.harness(agents=2, rounds=1, max_tokens=4, client_timeout_s=20)
    assert harness.wait(5)
    records = wedge.ledger.by_origin("harness").records
    assert [(r.state, r.status) for r in records] == [("error", 500)] * 2
    assert all(r.finished is not None and r.finished - r.sent < 2.0 for r in records)
    assert wedge.stub("prefill-0").state()["active"] == 2
    wait_for(lambda: wedge.stub("prefill-0").state()["active"] == 0, timeout_s=6, what="expiry")


@pytest.mark.wedge(router="vllm-router")
def test_vllm_router_calls_the_decode_only_after_the_prefill_answered(wedge):
    """Cited by kv-load-deadline-charged-prefill-queue-time: under vllm-router 0.1.17 each
    request reaches the decode only after its prefill leg had its KV ready and answered, so a
    decode's KV-load deadline never runs through the prefill's queue (routers.md B2)."""
    harness = wedge.harness(agents=4, rounds=1, max_tokens=4)
    assert harness.wait(30)
    ledgers = wedge.worker_ledgers()
    prefill = {e["request_id"]: e["t"] for e in ledgers["prefill-0"]["entries"]}
    decode = [e for e in ledgers["decode-0"]["entries"] if e["request_id"] in prefill]
    assert len(decode) >= 4
    assert all(e["t"]["arrived"] >= prefill[e["request_id"]]["kv_ready"] for e in decode)


@pytest.mark.wedge(
    router="sglang-router", router_args=["--disable-retries"], stub={"keepalive_timeout_s": 2.0}
)
def test_sglang_router_fails_requests_sent_after_an_idle_gap_past_the_engine_keepalive(wedge):
    """Cited by stale-pooled-keepalive-connection: after a burst of 16 requests and a 3 s idle
    gap, past the stubs' 2 s keep-alive, sglang-router 0.3.2 sends the next requests on the
    closed connections it pooled. Each leg that met one failed: the request is answered 502, or
    hangs on a decode waiting for KV its failed prefill leg never produced. Retries are off: a
    retry may go out on a fresh connection, and whether one does depends on how many
    connections the burst happened to open."""
    burst = wedge.harness(agents=16, rounds=1, max_tokens=4, origin="burst")
    assert burst.wait(30)
    harness = wedge.harness(agents=4, rounds=2, think_time_s=3.0, max_tokens=4, client_timeout_s=3)
    assert harness.wait(30)
    second = [r for r in wedge.ledger.by_origin("harness").records if r.round == 1]
    assert len(second) == 4 and [r.state for r in second] != ["ok"] * 4
    failed = [r for r in second if r.state != "ok"]
    assert all(r.state == "timeout" or r.status == 502 for r in failed), failed


@pytest.mark.parametrize("kind", ["smg", "vllm-router"])
def test_a_router_health_check_with_a_request_timeout_clears_a_paused_decode(wedge_factory, kind):
    """The advice of the health check's "acted, wedge stayed" row, followed: a request timeout
    ends the requests held by the paused decode (smg retries them onto decode-1, vllm-router
    answers 500), and the health check keeps new requests off it: its row reads "cleared"."""
    from pytest_wedge.faults import Pause
    from pytest_wedge.watchdogs import RouterHealthCheck

    # smg charges each request cut at 3 s to the prefill's breaker too. Its default
    # cache_aware policy can send 11 of the 12 to decode-0, and 10 failures open the only
    # prefill's breaker: every request is then refused for a minute, the breaker's doing and
    # not what this test measures (the breaker's own tests are above).
    args = [*HEALTH_FLAGS, "--request-timeout-secs", "3", "--disable-circuit-breaker"]
    wedge = wedge_factory(router=kind, decode=2, router_args=args)
    with wedge.expect_cleared(within_s=8.0, watchdogs=[RouterHealthCheck("decode-0")]) as check:
        wedge.apply(Pause("decode-0"))
        wedge.harness(agents=12, rounds=1, max_tokens=4, client_timeout_s=30)
    (health,) = check.watchdog_rows
    assert health["case"] == "cleared", health
    states = wedge.ledger.by_origin("harness").states()
    if kind == "smg":  # every request cut at 3 s was retried onto decode-1
        assert states["ok"] == 12, states
    else:  # no retries: those on decode-0 end 500 at 3 s
        assert states["ok"] + states["error"] == 12 and states["error"] > 0, states
