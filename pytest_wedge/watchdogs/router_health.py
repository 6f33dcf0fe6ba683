"""The router's own health checks and circuit breakers as watchdogs: when does the router take a
wedged worker out of rotation? Read from what every router kind exposes (its ``/workers`` list,
its breaker gauge); the removal is the router's action, verified by new requests that avoid the
worker. The flags are read from the router's own command line, so they are written once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from pytest_wedge.errors import ConfigError
from pytest_wedge.evidence.read_public import router_worker_names
from pytest_wedge.metrics_text import samples
from pytest_wedge.spec.component import typed
from pytest_wedge.topology.what_ran import router_metric_names
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
BREAKER_DEFAULTS = {"--cb-failure-threshold": 10.0, "--cb-timeout-duration-secs": 60.0}
VERIFY_PROBES = 3
VERIFY_TIMEOUT_S = 2.0


def _router_flags(scene: Scene, defaults: dict[str, float]) -> dict[str, float]:
    args = list(scene.topology.spec.router_args)
    flags = dict(defaults)
    for flag in defaults:
        if flag in args[:-1]:
            flags[flag] = float(args[args.index(flag) + 1])
    return flags


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
    """A router's health check or breaker: ``flags`` are read from its command line when armed,
    and ``least_s(flags)`` is the least time from a wedge's onset before it can fire."""

    defaults: dict[str, float] = field(default_factory=dict)
    least: Any = None  # Callable[[dict[str, float]], float]
    flags: dict[str, float] = field(default_factory=dict, init=False)

    def arm(self, scene: Scene) -> None:
        self.flags = _router_flags(scene, self.defaults)
        self.after_s = float(self.least(self.flags))
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
        if marked:
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

    def least(flags: dict[str, float]) -> float:
        # The first failed probe takes its timeout; each further one comes an interval later.
        return (
            flags["--health-check-timeout-secs"]
            + (flags["--health-failure-threshold"] - 1) * flags["--health-check-interval-secs"]
        )

    return RouterRemovalWatchdog(
        check,
        interval_s,
        label=f"router health check of {target}",
        action=RouterRoutesAround(target),
        watches=f"the router's /workers entry of {target} (is_healthy)",
        defaults=HEALTH_DEFAULTS,
        least=least,
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
        if opened or gauge is None:
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
        defaults=BREAKER_DEFAULTS,
        least=lambda flags: 0.0,  # as soon as the threshold's failures are in
    )
