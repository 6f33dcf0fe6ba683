"""The incident shapes, end to end: faults + harness + stray requester, every request accounted."""

from __future__ import annotations

import time

import httpx
import pytest

from pytest_wedge.faults import (
    BlockingBootstrapCall,
    CoRestart,
    DecodeOnlyRestart,
    ErrorStatus,
    Pause,
    PinOnAbort,
    Serialize,
    StallAfterTokens,
    StallKvTransfer,
    Timeout,
    TimeoutSkipsTransferring,
)
from pytest_wedge.load import Aborter, LostRequestsError
from pytest_wedge.waiting import observe, wait_for

pytestmark = pytest.mark.timeout(90)


def tokens_by_origin(wedge, component):
    return dict(wedge.stub(component).state()["tokens_by_origin"])


def probe_ok(wedge) -> bool:
    body = {
        "model": "stub-model",
        "messages": [{"role": "user", "content": "probe"}],
        "max_tokens": 1,
    }
    return httpx.post(wedge.url + "/v1/chat/completions", json=body, timeout=5).status_code == 200


def harness_tokens(wedge):
    return sum(r.tokens for r in wedge.ledger.by_origin("harness"))


def stopped_changing(sample, *, quiet_s):
    """A wait_for condition: true once ``sample()`` has kept one value for ``quiet_s``."""
    last = {"value": sample(), "since": time.monotonic()}

    def check() -> bool:
        value, now = sample(), time.monotonic()
        if value != last["value"]:
            last.update(value=value, since=now)
        return now - last["since"] >= quiet_s

    return check


@pytest.fixture(params=["process", "docker"])
def any_runtime_wedge(request, wedge_factory):
    """The default topology on each runtime: SIGSTOP for processes, `docker pause` for containers."""
    if request.param == "docker":
        request.getfixturevalue("docker_up")
    return wedge_factory(runtime=request.param)


def test_router_pause_with_stray_load_masks_the_wedge(any_runtime_wedge):
    wedge = any_runtime_wedge
    wedge.stray("decode-0", rate_per_s=10, max_tokens=64)
    harness = wedge.harness(agents=30, rounds=3, max_tokens=8, client_timeout_s=60)
    wait_for(lambda: harness.progress() >= 10, timeout_s=20, what="harness progress")

    with wedge.fault(Pause("router")):
        # Let what the router had already relayed drain, then watch a window.
        wait_for(
            stopped_changing(lambda: (harness.progress(), harness_tokens(wedge)), quiet_s=0.3),
            timeout_s=10,
            what="the harness to stop receiving what the router relayed before its pause",
            describe=lambda: f"progress={harness.progress()}, tokens={harness_tokens(wedge)}",
        )
        before_progress, before_tokens = harness.progress(), harness_tokens(wedge)
        before = tokens_by_origin(wedge, "decode-0")
        throughput = observe(
            lambda: wedge.metric("decode-0", "sglang:gen_throughput"), for_s=1.5, interval_s=0.1
        )
        after = tokens_by_origin(wedge, "decode-0")
        assert harness.progress() == before_progress, "harness progressed through a paused router"
        assert harness_tokens(wedge) == before_tokens
        assert min(throughput) > 0, throughput
        window = {o: after.get(o, 0) - before.get(o, 0) for o in after}
        assert window.get("stray-1", 0) > 0
        assert sum(window.values()) == window["stray-1"], window  # 100 % stray-1

    assert harness.wait(60)
    states = wedge.ledger.by_origin("harness").states()
    assert states["ok"] == 90, states
    wedge.assert_nothing_lost("harness")


def test_a_co_restart_has_the_whole_pair_down_before_either_comes_back(wedge, monkeypatch):
    # A prefill started while its old decode still ran took that decode's retried KV fetches
    # and paired with it: the new decode's fetches were then held, and the wedge stayed. And a
    # decode ready before its prefill took requests whose prefill half was refused, and waited
    # for their KV for ever: the prefill comes back, and answers, before the decode starts.
    runtime = wedge.topology.runtime
    calls: list[tuple[str, str, int | None]] = []
    prefill_answered: list[bool] = []

    def answers(url: str) -> bool:
        try:
            return httpx.get(url + "/health", timeout=1.0).is_success
        except httpx.HTTPError:
            return False

    def recorded(action: str):
        real = getattr(runtime, action)

        def record(name: str) -> None:
            calls.append((action, name, runtime.pid("decode-0")))
            if (action, name) == ("restart", "decode-0"):
                prefill_answered.append(answers(wedge.worker_url("prefill-0")))
            real(name)

        return record

    for action in ("kill", "restart"):
        monkeypatch.setattr(runtime, action, recorded(action))
    old_decode = runtime.pid("decode-0")
    wedge.apply(CoRestart("decode-0"))
    first_start = next(i for i, (action, _, _) in enumerate(calls) if action == "restart")
    assert {name for action, name, _ in calls[:first_start]} == {"prefill-0", "decode-0"}
    assert calls[first_start][2] is None, "the old decode is dead when the first comes back"
    assert [name for action, name, _ in calls[first_start:] if action == "restart"] == [
        "prefill-0",
        "decode-0",
    ]
    assert prefill_answered == [True], "the new prefill answers before the decode starts"
    assert runtime.pid("decode-0") not in (None, old_decode)


@pytest.mark.wedge(router_args=["--cb-timeout-duration-secs", "1"])
def test_decode_only_restart_wedges_transfer_until_co_restart(wedge):
    assert wedge.harness(agents=1, rounds=1).wait(10)  # the prefill pairs with this decode
    wedge.apply(DecodeOnlyRestart("decode-0"))
    stuck = wedge.harness(agents=3, rounds=1, client_timeout_s=30, origin="after-restart")
    wait_for(
        lambda: wedge.metric("decode-0", "sglang:num_decode_transfer_queue_reqs") >= 3,
        timeout_s=10,
        what="3 requests in decode's transfer queue",
    )
    # The decode queues a request as it arrives, while its prefill half may still be computing:
    # wait for the prefill to finish all three, which is what holds their KV.
    prefill = wait_for(
        lambda: (
            (entries := wedge.stub("prefill-0").ledger(origin="after-restart")["entries"])
            and len(entries) == 3
            and all(e["state"] not in ("queued", "prefilling") for e in entries)
            and entries
        ),
        timeout_s=10,
        what="the prefill to finish the 3 requests",
    )
    assert [e["state"] for e in prefill] == ["inflight"] * 3  # prefill finished, KV held
    assert "kv_ready" in prefill[0]["t"]
    assert tokens_by_origin(wedge, "decode-0").get("after-restart", 0) == 0

    wedge.apply(CoRestart("decode-0"))
    assert stuck.wait(10)  # the restart ended the stuck requests
    assert all(r.final for r in wedge.ledger.by_origin("after-restart"))
    # Each stuck request failed 5 times (smg retries), and one PD failure counts against both
    # workers' circuit breakers: they are open now, and the router refuses everything until
    # they half-open (cb-timeout, 60 s by default, 1 s here).
    wait_for(
        lambda: wedge.metric("router", "smg_worker_cb_state") == 0 or probe_ok(wedge),
        timeout_s=10,
        what="the router's circuit breakers to close",
    )
    healed = wedge.harness(agents=5, rounds=2, origin="healed")
    assert healed.wait(20)
    assert wedge.ledger.by_origin("healed").states()["ok"] == 10


@pytest.mark.wedge(stub={"prefill_ms_per_token": 20.0})
def test_prefill_inflight_pin_after_abort(wedge):
    wedge.apply(PinOnAbort())
    aborter = wedge.track(
        Aborter(
            wedge.url,
            count=1,
            abort_after_s=0.2,
            ledger=wedge.ledger,
            extra_body={"messages": [{"role": "user", "content": "x" * 400}]},
        )
    )
    aborter.start()
    assert aborter.wait(10)
    assert wedge.ledger.by_origin("aborter").states()["aborted"] == 1

    def pinned() -> bool:
        inflight = wedge.metric("prefill-0", "sglang:num_prefill_inflight_queue_reqs")
        return inflight >= 1 and wedge.metric("prefill-0", "sglang:num_running_reqs") == 0

    wait_for(pinned, timeout_s=10, what="the pin to show")
    assert all(observe(pinned, for_s=1.0, interval_s=0.1)), "the pin released itself"

    wedge.stub("prefill-0").set_watchdogs(inflight_pin_s=0.5)
    wait_for(
        lambda: wedge.metric("prefill-0", "sglang:num_prefill_inflight_queue_reqs") == 0,
        timeout_s=5,
        what="the in-flight pin watchdog to release the slot",
    )
    firings = wedge.stub("prefill-0").state()["firings"]
    assert firings and firings[0]["watchdog"] == "inflight_pin"


@pytest.mark.wedge(stub={"itl_ms": 5.0})
def test_decode_serialization_under_30_agents(wedge):
    wedge.apply(Serialize())
    harness = wedge.harness(agents=30, rounds=1, max_tokens=8, client_timeout_s=60)
    samples = observe(
        lambda: (
            wedge.metric("decode-0", "sglang:num_running_reqs"),
            wedge.metric("decode-0", "sglang:num_queue_reqs"),
        ),
        for_s=1.0,
    )
    assert max(running for running, _ in samples) == 1
    assert max(queued for _, queued in samples) >= 10
    assert harness.wait(60)
    wedge.assert_nothing_lost("harness")


def test_client_pool_exhaustion_keeps_requests_inside_the_client(wedge):
    harness = wedge.harness(agents=10, rounds=1, max_connections=4, leak_streams=True)
    wait_for(
        lambda: (
            len(wedge.ledger.by_origin("harness")) == 10
            and sum(r.sent is not None for r in wedge.ledger.by_origin("harness")) == 4
        ),
        timeout_s=10,
        what="4 requests sent, 6 queued for a connection",
    )
    held = [r for r in wedge.ledger.by_origin("harness") if r.sent is None]
    assert len(held) == 6 and all(r.state == "pending" for r in held)
    seen = {
        e["request_id"] for ledger in wedge.worker_ledgers().values() for e in ledger["entries"]
    }
    assert not seen & {r.request_id for r in held}
    harness.stop()
    assert {r.request_id for r in wedge.ledger.by_origin("harness").never_sent()} == {
        r.request_id for r in held
    }


@pytest.mark.wedge(router_args=["--request-timeout-secs", "2"])
def test_half_open_stream_ends_with_router_error_frame_at_request_timeout(wedge):
    wedge.apply(StallAfterTokens("decode-0", tokens=3))
    harness = wedge.harness(agents=5, rounds=1, max_tokens=16, client_timeout_s=20)
    wait_for(
        lambda: (
            len(wedge.ledger.by_origin("harness")) == 5
            and all(r.tokens == 3 for r in wedge.ledger.by_origin("harness"))
        ),
        timeout_s=5,
        what="3 tokens on every stream",
    )
    assert all(r.state == "pending" for r in wedge.ledger.by_origin("harness"))  # held open
    assert harness.wait(10)
    for record in wedge.ledger.by_origin("harness"):
        assert record.state == "error" and record.tokens == 3
        assert record.status == 200  # smg keeps the 200 and sends an error frame
        assert "timed out" in (record.error or "")
        assert 1.8 <= record.finished - record.sent <= 3.5
    wedge.assert_nothing_lost("harness")


def test_lost_requests_are_named_in_the_failure(wedge):
    wedge.apply(Pause("router"))
    harness = wedge.harness(agents=3, rounds=1, client_timeout_s=None)
    wait_for(lambda: len(wedge.ledger.by_origin("harness")) == 3, timeout_s=5, what="3 requests")
    harness.stop()
    with pytest.raises(LostRequestsError) as failure:
        wedge.assert_nothing_lost("harness")
    message = str(failure.value)
    assert "3 harness requests" in message
    for record in wedge.ledger.by_origin("harness"):
        assert record.request_id in message
    assert "To fix this" in message


@pytest.mark.wedge(
    prefill=2,
    router_args=["--policy", "round_robin", "--disable-circuit-breaker"],
    stub={"itl_ms": 20.0},
)
def test_a_blocking_bootstrap_call_to_a_black_hole_freezes_an_unrelated_stream(wedge):
    """sglang pull request #34865: the parallel-info fetch on the decode's scheduler loop. A
    stream with no prefill at all stops while the call to a black-holed prefill runs, then
    goes on; the black-holed prefill's requests fail once their tries are spent."""
    stray = wedge.stray("decode-0", rate_per_s=1, max_requests=1, max_tokens=400)
    wait_for(
        lambda: tokens_by_origin(wedge, "decode-0").get("stray-1", 0) > 5,
        timeout_s=10,
        what="the unrelated stream to start",
    )
    wedge.apply(Timeout("decode-0->prefill-1", timeout_ms=0))
    wedge.apply(BlockingBootstrapCall("decode-0", timeout_ms=400, retries=2))
    harness = wedge.harness(agents=2, rounds=1, max_tokens=4, client_timeout_s=20)
    stray_tokens = lambda: tokens_by_origin(wedge, "decode-0").get("stray-1", 0)  # noqa: E731
    # 20 ms a token, yet none for 0.3 s: each try holds the loop for its 0.4 s timeout (the
    # loop steps once between two tries, as SGLang's scheduler does between two cycles).
    wait_for(stopped_changing(stray_tokens, quiet_s=0.3), timeout_s=5, what="the freeze")
    frozen_at = stray_tokens()
    wait_for(lambda: stray_tokens() > frozen_at, timeout_s=5, what="the stream to go on")
    assert harness.wait(20)
    assert wedge.stub("decode-0").state()["counters"]["bootstrap_failed"] >= 1
    stray.stop()
    wedge.faults.revert_all()
    wedge.assert_nothing_lost("harness")


def test_a_transfer_stalled_midway_escapes_a_timeout_checked_only_while_waiting(wedge):
    """sglang pull request #31800: once the KV has started to arrive, a receiver that checks
    its timeout only while waiting for input never fails the request; the fix (the fault
    reverted) fails it at the next check."""
    wedge.stub("decode-0").set_watchdogs(transfer_timeout_s=0.3)
    wedge.apply(StallKvTransfer("prefill-0", origin="harness", midway=True))
    harness = wedge.harness(agents=2, rounds=1, max_tokens=4, client_timeout_s=20)
    with wedge.fault(TimeoutSkipsTransferring("decode-0", origin="harness")):
        wait_for(
            lambda: wedge.stub("decode-0").state()["transfer"] == 2,
            timeout_s=10,
            what="both transfers to start",
        )
        held = observe(lambda: wedge.stub("decode-0").state()["firings"], for_s=1.0)
        assert all(not firings for firings in held), held
    wait_for(
        lambda: wedge.stub("decode-0").state()["firings"],
        timeout_s=5,
        what="the transfer timeout to fire once it is armed in Transferring",
    )
    wedge.faults.revert_all()
    assert harness.wait(20)
    wedge.assert_nothing_lost("harness")


@pytest.mark.wedge(worker_protocol="vllm", stub={"kv_slots": 1})
def test_a_decode_rejection_strands_the_prefills_kv_until_it_expires(wedge):
    """vLLM pull request #41269: the decode's 4xx before admission leaves the prefill's blocks
    held; with room for one request's KV the next waits at the prefill, with KV usage at 1 and
    nothing running, until the KV expires (VLLM_NIXL_ABORT_REQUEST_TIMEOUT)."""
    wedge.apply(ErrorStatus("decode-0", origin="harness", status=400, first_n=1))
    harness = wedge.harness(agents=2, rounds=1, max_tokens=4, client_timeout_s=20)
    wait_for(
        lambda: wedge.stub("prefill-0").state()["queued"] == 1,
        timeout_s=10,
        what="the second request to wait for KV blocks at prefill-0",
    )
    assert wedge.metric("prefill-0", "vllm:kv_cache_usage_perc") == 1.0
    assert wedge.metric("prefill-0", "vllm:num_requests_running") == 0.0
    wedge.stub("prefill-0").set_watchdogs(bootstrap_timeout_s=0.5)
    assert harness.wait(20)
    states = wedge.ledger.by_origin("harness").states()
    assert states.get("error") == 1 and states.get("ok") == 1, states
