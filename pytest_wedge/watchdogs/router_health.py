"""The router's own health checks and circuit breakers as watchdogs: when does the router take a
wedged worker out of rotation? Read from what every router kind exposes (its ``/workers`` list,
its breaker gauge); the removal is the router's action, verified by new requests that avoid the
worker. The flags are read from the router's own command line, so they are written once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from pytest_wedge.errors import ConfigError
from pytest_wedge.evidence.read_public import router_worker_names
from pytest_wedge.metrics_text import samples
from pytest_wedge.routers.adapters import ADAPTERS
from pytest_wedge.spec.component import typed
from pytest_wedge.topology.what_ran import router_metric_names
from pytest_wedge.waiting import poll
from pytest_wedge.watchdogs.actions import WatchdogAction
from pytest_wedge.watchdogs.watchdog import CallableWatchdog

if TYPE_CHECKING:
    from pytest_wedge.views import Scene

# The routers' defaults (each one's --help: smg 1.13, sglang-router 0.3.2, vllm-router 0.1.17
# print the same): a paused worker is unnoticed for minutes unless they are lowered.
HEALTH_DEFAULTS = {
    "--health-check-interval-secs": 60.0,
    "--health-check-timeout-secs": 5.0,
    "--health-failure-threshold": 3.0,
}
VERIFY_PROBES = 3
VERIFY_TIMEOUT_S = 2.0


def _flag(scene: Scene, flag: str) -> float:
    """``flag``'s value in ``router_args``, else the routers' default."""
    args = list(scene.topology.spec.router_args)
    return float(args[args.index(flag) + 1]) if flag in args[:-1] else HEALTH_DEFAULTS[flag]


def _url_of(scene: Scene, target: str) -> str:
    """The address the router knows ``target`` by: the listen side of its router link."""
    for url, name in router_worker_names(scene.topology).items():
        if name == target:
            return url
    raise ConfigError(
        f"The router has no worker {target}",
        facts={"router workers": ", ".join(router_worker_names(scene.topology).values())},
        fix="name a prefill or decode of this topology as the watchdog's target",
    )


@dataclass(frozen=True)
class RouterRoutesAround(WatchdogAction):
    """The router's own act when it removes ``target``: new requests avoid it. Nothing is done
    to the topology; ``act`` verifies the removal with a few new requests, which must each be
    answered within 2 s (200 from another worker, or an immediate refusal when none is left)
    rather than hang on the wedged worker."""

    target: str

    def describe(self) -> str:
        return f"the router takes {self.target} out of rotation"

    def act(self, scene: Scene) -> str:
        body = {
            "model": scene.topology.spec.stub.model,
            "max_tokens": 2,
            "user": "router-removal-check",
            "messages": [{"role": "user", "content": "routed around?"}],
        }
        answers = []
        for _ in range(VERIFY_PROBES):
            started = time.monotonic()
            try:
                status = scene.topology.http.post(
                    scene.topology.url + "/v1/chat/completions",
                    json=body,
                    headers={"x-request-id-origin": "router-removal-check"},
                    timeout=VERIFY_TIMEOUT_S,
                ).status_code
            except httpx.TimeoutException:
                raise RuntimeError(
                    f"a new request hung {VERIFY_TIMEOUT_S:g} s after the removal: the router "
                    f"still routes to {self.target}"
                ) from None
            answers.append(f"{status} in {time.monotonic() - started:.2f} s")
        return f"verified: {VERIFY_PROBES} new requests answered ({', '.join(answers)})"


@dataclass
class RouterRemovalWatchdog(CallableWatchdog):
    """A router's health check or breaker. Its check fires once per arming (``latch`` holds
    the worker it saw removed); ``least(scene)``, from the router's flags, is the least time
    from a wedge's onset before it can fire."""

    least: Callable[[Any], float] | None = None
    latch: list[str] = field(default_factory=list)

    def arm(self, scene: Scene) -> None:
        self.latch.clear()
        if self.least is not None:
            self.after_s = self.least(scene)
        super().arm(scene)


@typed
def RouterHealthCheck(target: str = "decode-0", interval_s: float = 0.1) -> CallableWatchdog:
    """The router's periodic health check (``--health-check-interval-secs``,
    ``--health-check-timeout-secs``, ``--health-failure-threshold`` in ``router_args``; the
    same flags on smg, sglang-router and vllm-router). Fires when the router's ``/workers``
    first lists ``target`` as unhealthy; its action is the router's: new requests avoid the
    worker (verified). Requests already on the worker are not cancelled by any of the three
    routers (router-protocol.md §3, routers.md A4, B4): pair it with a request timeout."""
    marked: list[str] = []

    def check(scene: Scene) -> str | None:
        if marked:  # the watchdog's latch: one firing per arming
            return None
        url = _url_of(scene, target)
        try:
            listed = scene.topology.http.get(scene.topology.router_url + "/workers", timeout=1.0)
            workers = listed.json().get("workers", [])
        except (httpx.HTTPError, ValueError):
            return None  # a router that does not answer has decided nothing yet
        for worker in workers:
            if worker.get("url") == url and worker.get("is_healthy") is False:
                marked.append(url)
                status = worker.get("status", "")
                return f"the router's /workers lists {target} unhealthy" + (
                    f" ({status})" if status else ""
                )
        return None

    def least(scene: Scene) -> float:
        # The first failed probe takes its timeout; each further one comes an interval later.
        interval = _flag(scene, "--health-check-interval-secs")
        failures = _flag(scene, "--health-failure-threshold")
        return _flag(scene, "--health-check-timeout-secs") + (failures - 1) * interval

    return RouterRemovalWatchdog(
        check,
        interval_s,
        label=f"router health check of {target}",
        action=RouterRoutesAround(target),
        watches=f"the router's /workers entry of {target} (is_healthy)",
        least=least,
        latch=marked,
    )


@typed
def RouterCircuitBreaker(target: str = "decode-0", interval_s: float = 0.1) -> CallableWatchdog:
    """The router's circuit breaker (``--cb-failure-threshold``, ``--cb-timeout-duration-secs``
    in ``router_args``). Fires when the router's breaker gauge for ``target`` first reads open;
    its action is the router's: new requests avoid the worker (verified). smg and
    sglang-router charge one failed PD request to *both* workers' breakers; vllm-router 0.1.17
    has no breaker in PD mode (routers.md B3), so there it never fires."""
    opened: list[str] = []

    def check(scene: Scene) -> str | None:
        gauge = router_metric_names(scene.topology.spec.router).breaker
        if opened or gauge is None:  # the latch, or a router without a breaker
            return None
        url = _url_of(scene, target)
        try:
            text = scene.topology.router_metrics(timeout_s=1.0)
        except httpx.HTTPError:
            return None
        for labels, value in samples(text, gauge):
            if labels.get("worker") == url and value == 1:
                opened.append(url)
                return f"the router's {gauge} of {target} reads open"
        return None

    return RouterRemovalWatchdog(
        check,
        interval_s,
        label=f"router circuit breaker of {target}",
        action=RouterRoutesAround(target),
        watches=f"the router's breaker gauge of {target} (none on vllm-router)",
        latch=opened,
    )


# -- telling the router: a readiness failure taken out of rotation, and put back -------------


class RouterNotTold(Exception):
    """The router cannot be told (a user's own router), or refused; the reason, in words."""


# Measured: vllm-router 0.1.17 in PD mode removes a worker (DELETE /workers/<url>) but refuses
# to add one back over HTTP (400 "PD router requires specific add_prefill_server or
# add_decode_server methods"), so a readiness blip would take the worker away for good.
CANNOT_PUT_BACK = {
    "vllm-router": "vllm-router 0.1.17 in PD mode cannot add a worker back over HTTP (POST "
    "/workers and /add_worker answer 400), so taking one out would be for good",
}


def _worker_path(scene: Scene, target: str) -> str:
    """``/workers/<id>``: smg and sglang-router name a worker by the UUID in ``/workers``."""
    kind = scene.topology.spec.router.kind
    if kind in CANNOT_PUT_BACK:
        raise RouterNotTold(CANNOT_PUT_BACK[kind])
    if kind not in ADAPTERS:
        raise RouterNotTold(
            f"a {kind} router: pytest-wedge knows the worker API of smg and sglang-router only"
        )
    url = _url_of(scene, target)
    listed = scene.topology.http.get(scene.topology.router_url + "/workers", timeout=2.0)
    for worker in listed.json().get("workers", []):
        if worker.get("url") == url and worker.get("id"):
            return f"/workers/{worker['id']}"
    raise RouterNotTold(f"the router's /workers does not list {target} ({url})")


def take_out_of_rotation(scene: Scene, target: str) -> str:
    """Tell the router to stop routing to ``target``, as an endpoints controller does for a
    pod that is not ready; what was done, in words. Requests already on it go on (smg drains
    it for 5 s, then forgets it)."""
    path = _worker_path(scene, target)
    answer = scene.topology.http.delete(scene.topology.router_url + path, timeout=2.0)
    if answer.status_code >= 300:
        raise RouterNotTold(f"DELETE {path} answered {answer.status_code}: {answer.text[:200]}")
    return f"took it out of the router's rotation (DELETE {path}: {answer.status_code})"


def put_back_in_rotation(scene: Scene, target: str, within_s: float = 10.0) -> str:
    """Register ``target`` with the router again once it is ready (``POST /workers``); a
    router still draining it answers 409 until it has let it go, so this retries."""
    topology = scene.topology
    body: dict[str, Any] = {
        "url": _url_of(scene, target),
        "worker_type": "prefill" if target.startswith("prefill-") else "decode",
    }
    bootstrap = topology.plan.bootstrap if topology.plan is not None else {}
    if target in bootstrap:
        body["bootstrap_port"] = bootstrap[target]
    last: list[str] = []

    def settled() -> bool:
        answer = topology.http.post(topology.router_url + "/workers", json=body, timeout=2.0)
        last[:] = [f"{answer.status_code}: {answer.text[:200]}"]
        return answer.status_code != 409  # 409: still draining the old registration

    if not poll(settled, timeout_s=within_s, interval_s=0.25).met or int(last[0][:3]) >= 300:
        raise RouterNotTold(f"POST /workers answered {last[0] if last else 'nothing'}")
    return f"put it back in the router's rotation (POST /workers: {last[0][:3]})"
