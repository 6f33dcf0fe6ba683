"""Kubernetes probes as watchdogs on a live topology: a liveness probe on /health never sees a
stalled engine, one on /health_generate restarts a decode that was fine, and the kubelet's
restart, readiness and startup semantics act on the real components."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_wedge.evidence.read_public import router_worker_names
from pytest_wedge.faults import Pause
from pytest_wedge.scenarios.catalog import catalog
from pytest_wedge.scenarios.runner import run_scenario
from pytest_wedge.waiting import wait_for
from pytest_wedge.watchdogs import FalsePositiveError, KubernetesProbes

pytestmark = pytest.mark.timeout(120)
CATALOG = {s.name: s for s in catalog()}
NEVER_FIRES = CATALOG["liveness-on-health-never-fires-while-decode-is-wedged"]
SIGTERM_DRAINS = CATALOG["sigterm-drains-in-flight-streams-where-kill-cuts-them"]
KILLS_HEALTHY = CATALOG["liveness-on-health-generate-kills-a-healthy-decode"]


def liveness(path: str, **fields: int) -> dict[str, Any]:
    probe = {"httpGet": {"path": path, "port": "http"}, "periodSeconds": 1, **fields}
    return {"name": "decode", "livenessProbe": probe}


def test_liveness_on_health_never_fires_and_the_report_says_it_would_never_restart(
    wedge_factory: Any,
) -> None:
    wedge = wedge_factory(stub=NEVER_FIRES.spec.stub)
    result = run_scenario(wedge, NEVER_FIRES)  # located at decode-0, not cleared, never fired
    assert result.check is not None
    (row,) = result.check.watchdog_rows
    assert row["fired"] is False and row["case"] == "never saw the signal", row
    assert result.not_cleared is not None
    assert "never fired: it watches decode-0's liveness probe GET /health" in result.not_cleared
    assert "the kubelet never restarts decode-0" in result.not_cleared
    # Not vacuous: /health answered all along while every harness stream was stalled.
    assert httpx.get(wedge.topology.worker_url("decode-0") + "/health").status_code == 200


def test_liveness_on_health_generate_restarts_a_healthy_decode_and_names_the_cut_requests(
    wedge_factory: Any,
) -> None:
    wedge = wedge_factory(stub=KILLS_HEALTHY.spec.stub)
    before = wedge.topology.runtime.pid("decode-0")
    stray = wedge.stray("decode-0", rate_per_s=20, max_requests=2, extra_body=_GONE_PREFILL)
    wait_for(
        lambda: wedge.stub("decode-0").state()["prealloc_slots"]["orphaned"] == 2,
        timeout_s=10,
        what="the two transfers whose prefill is gone to hold their decode slots",
    )
    assert stray.wait(5)
    dog = KubernetesProbes("decode-0", liveness("/health_generate", failureThreshold=2))
    with pytest.raises(FalsePositiveError) as failure:  # noqa: SIM117 - the block starts the load
        with wedge.expect_quiet(within_s=20, watchdogs=[dog]):
            wedge.harness(agents=2, rounds=1, max_tokens=60)
    text = failure.value.render()
    assert failure.value.headline.startswith("false positive: kubelet probes of decode-0")
    assert "restarts decode-0 on a failed probe, cutting every request it was serving" in text
    cut = [r for r in wedge.ledger.by_origin("harness") if r.state != "ok"]
    assert len(cut) == 2 and all(r.tokens > 0 for r in cut), cut  # they were streaming
    for record in cut:
        assert record.request_id in text, text
    (firing,) = dog.firings(wedge)
    assert "/health_generate on decode-0 failed 2 times in a row" in firing.detail
    assert firing.outcome.startswith("done: restarted decode-0 after a liveness failure")
    assert wedge.topology.runtime.pid("decode-0") != before


_GONE_PREFILL = {"bootstrap_host": "127.0.0.1", "bootstrap_port": 1, "bootstrap_room": 7}


def test_liveness_restarts_a_paused_decode_through_a_graceful_stop(wedge: Any) -> None:
    """The kubelet's act, not whether it heals: a decode restarted alone strands the KV
    transfers of the requests the router retries onto it (incident 2), as it would in a pod."""
    before = wedge.topology.runtime.pid("decode-0")
    dog = KubernetesProbes("decode-0", liveness("/health", failureThreshold=2))
    dog.arm(wedge)
    try:
        wedge.apply(Pause("decode-0"))
        paused_at = wedge.faults.windows[-1].started
        wedge.harness(agents=4, rounds=1)
        wait_for(
            lambda: any(f.action_ended for f in dog.firings(wedge)),
            timeout_s=15,
            what="the liveness restart",
        )
    finally:
        dog.disarm(wedge)
    firing = dog.firings(wedge)[0]
    assert firing.action_started is not None and firing.action_started >= firing.at
    assert 2.0 <= firing.at - paused_at <= 6.0, firing
    assert "(SIGTERM; it exited " in firing.outcome, firing  # well within the 30 s grace
    assert wedge.topology.runtime.pid("decode-0") not in (None, before)


@pytest.mark.parametrize(("grace_s", "ok"), [(1, 0), (10, 4)])
@pytest.mark.wedge(stub={"itl_ms": 75.0, "sigterm_drain_s": 5.0})
def test_the_kubelet_kills_after_termination_grace_period_seconds(
    wedge: Any, grace_s: int, ok: int
) -> None:
    """SIGTERM, then SIGKILL once the pod's grace is over: a decode draining 3 s streams is
    killed mid-stream after a 1 s grace, and lets them finish within a 10 s one."""
    _kubelet_grace(wedge, grace_s, ok)


def _kubelet_grace(wedge: Any, grace_s: int, ok: int) -> None:
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: decode}\nspec:\n"
        f"  terminationGracePeriodSeconds: {grace_s}\n  containers:\n"
        "  - name: decode\n    image: engine\n"
        '    livenessProbe: {exec: {command: ["false"]}, failureThreshold: 1}\n'
    )
    harness = wedge.harness(agents=4, rounds=1, max_tokens=40, client_timeout_s=20, origin="grace")
    records = wedge.ledger.by_origin
    wait_for(
        lambda: sum(r.first_token is not None for r in records("grace")) == 4,
        timeout_s=10,
        what="4 streams under way",
    )
    dog = KubernetesProbes("decode-0", pod)
    dog.arm(wedge)
    try:
        wait_for(
            lambda: any(f.action_ended for f in dog.firings(wedge)),
            timeout_s=30,
            what="the liveness restart",
        )
    finally:
        dog.disarm(wedge)
    firing = dog.firings(wedge)[0]
    assert harness.wait(20)
    if grace_s == 1:
        assert f"(SIGTERM; SIGKILL after the {grace_s} s terminationGracePeriodSeconds)" in (
            firing.outcome
        ), firing
    else:
        assert "(SIGTERM; it exited " in firing.outcome, firing
    assert records("grace").states().get("ok", 0) == ok, records("grace").states()


def test_readiness_marks_not_ready_without_a_restart_once_startup_passed(
    wedge: Any, tmp_path: Path
) -> None:
    spec = tmp_path / "pod.yaml"
    spec.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: decode}\nspec:\n  containers:\n"
        "  - name: decode\n    image: engine\n"
        "    startupProbe: {tcpSocket: {port: 8000}, periodSeconds: 1}\n"
        "    readinessProbe:\n      periodSeconds: 1\n      failureThreshold: 2\n"
        '      exec: {command: [sh, -c, "test -z \\"$WEDGE_DECODE_0_URL\\" "]}\n'
    )
    before = wedge.topology.runtime.pid("decode-0")
    dog = KubernetesProbes("decode-0", spec)
    dog.arm(wedge)
    try:
        wait_for(lambda: dog.firings(wedge), timeout_s=10, what="the readiness probe to fail")
    finally:
        dog.disarm(wedge)
    (firing,) = dog.firings(wedge)
    assert "readiness probe exec sh -c" in firing.detail
    assert "the kubelet marks it not ready" in firing.detail
    assert wedge.topology.runtime.pid("decode-0") == before


@pytest.mark.parametrize("kind", ["smg", "sglang-router", "vllm-router"])
def test_readiness_takes_a_decode_out_of_the_routers_rotation_and_puts_it_back(
    wedge_factory: Any, tmp_path: Path, kind: str
) -> None:
    """A readiness failure reaches the router as an endpoints controller's would: the router
    is told through its worker API, stops listing the decode, and lists it again once the
    probe passes."""
    flag = tmp_path / "not-ready"
    wedge = wedge_factory(router=kind, decode=2)
    probe = {"exec": {"command": ["test", "!", "-e", str(flag)]}, "periodSeconds": 1}
    dog = KubernetesProbes("decode-0", {"name": "decode", "readinessProbe": probe})
    kubelet = dog.check
    http, router = wedge.topology.http, wedge.topology.router_url
    decode_0 = next(u for u, n in router_worker_names(wedge.topology).items() if n == "decode-0")

    def listed() -> bool:
        workers = http.get(router + "/workers").json()["workers"]
        return any(w["url"] == decode_0 and w.get("status") != "draining" for w in workers)

    dog.arm(wedge)
    try:
        flag.touch()
        wait_for(
            lambda: any(f.action_ended for f in dog.firings(wedge)),
            timeout_s=10,
            what="the readiness probe to fail and the kubelet to act",
        )
        if kind == "vllm-router":  # it could not take the decode back: it is not told
            assert listed() and "reported only: the router was not told (vllm-router 0.1.17" in (
                dog.firings(wedge)[0].outcome
            )
            return
        wait_for(lambda: not listed(), timeout_s=10, what=f"{kind} to let decode-0 go")
        assert all(chat_ok(wedge) for _ in range(3))  # decode-1 serves what comes in
        flag.unlink()
        wait_for(listed, timeout_s=20, what=f"{kind} to list decode-0 again")
    finally:
        dog.disarm(wedge)
    (firing,) = dog.firings(wedge)
    assert "marked decode-0 not ready and took it out of the router's rotation" in (
        firing.outcome
    ), firing
    assert "put it back in the router's rotation" in kubelet.router_told[-1], kubelet.router_told


def chat_ok(wedge: Any) -> bool:
    body = {"model": "stub-model", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    return (
        wedge.topology.http.post(wedge.url + "/v1/chat/completions", json=body).status_code == 200
    )


@pytest.mark.timeout(420)
@pytest.mark.usefixtures("docker_up")
def test_both_probe_scenarios_hold_on_docker_where_the_restart_is_the_containers(
    wedge_factory: Any,
) -> None:
    wedge = wedge_factory(stub=KILLS_HEALTHY.spec.stub, runtime="docker")
    before = wedge.topology.runtime.pid("decode-0")
    run_scenario(wedge, KILLS_HEALTHY)  # the kubelet fired, cut the harness: a false positive
    (armed,) = KILLS_HEALTHY.watchdogs
    (firing,) = armed.watchdog.firings(wedge)
    assert firing.outcome.startswith("done: restarted decode-0 after a liveness failure"), firing
    assert wedge.topology.runtime.pid("decode-0") != before  # a new container's process
    wedge = wedge_factory(stub=NEVER_FIRES.spec.stub, runtime="docker")
    result = run_scenario(wedge, NEVER_FIRES)
    assert result.check is not None and result.check.watchdog_rows[0]["fired"] is False


@pytest.mark.timeout(420)
@pytest.mark.usefixtures("docker_up")
def test_sigterm_drains_and_the_pods_grace_holds_on_docker(wedge_factory: Any) -> None:
    """docker stop is SIGTERM then SIGKILL after the grace: a draining decode's streams end
    ok through a Terminate, and a 1 s terminationGracePeriodSeconds cuts them."""
    wedge = wedge_factory(stub=SIGTERM_DRAINS.spec.stub, runtime="docker")
    run_scenario(wedge, SIGTERM_DRAINS)
    wedge.topology.reset()
    _kubelet_grace(wedge, 1, 0)
