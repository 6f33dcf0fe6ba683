"""Reference watchdog policies: ``CallableWatchdog`` checks built from public pieces
(``diagnose``, faults, the topology), as a user would write their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import httpx

from pytest_wedge.diagnostics import diagnose
from pytest_wedge.diagnostics.blind.clientside import wedged
from pytest_wedge.errors import ConfigError
from pytest_wedge.evidence.observed import ClientRecord
from pytest_wedge.evidence.parse import parse_engine_metrics
from pytest_wedge.faults import CoRestart
from pytest_wedge.metrics_text import metric_value
from pytest_wedge.spec.component import typed
from pytest_wedge.watchdogs.actions import Action
from pytest_wedge.watchdogs.watchdog import CallableWatchdog

if TYPE_CHECKING:
    from pytest_wedge.views import ActiveScene

# The diagnosis's default span for failures that still count as wedged.
WINDOW_S = 10.0


def _wedged_now(scene: ActiveScene, origin: str, overdue_after_s: float) -> bool:
    """Whether the blind locator's own rule finds an ``origin`` request wedged, from the
    client ledger alone: without one it answers ``none``, so a check skips the servers."""
    records = [cast(ClientRecord, r.to_dict()) for r in scene.ledger.by_origin(origin)]
    return bool(wedged(records, time.time(), overdue_after_s, WINDOW_S, None).wedged)


def co_restart_on_transfer_wedge(
    origin: str = "harness", overdue_after_s: float = 1.0
) -> Callable[[ActiveScene], str | None]:
    """The reference user watchdog: co-restart the PD pair whose decode->prefill transfer the
    diagnosis says is wedged (incident 2). It polls, so it reads the servers only once the
    client ledger shows a wedge, and locates without the oracle: a slow check fires late.
    """

    def check(scene: ActiveScene) -> str | None:
        if not _wedged_now(scene, origin, overdue_after_s):
            return None
        diagnosis = diagnose(
            scene, origin=origin, overdue_after_s=overdue_after_s, window_s=WINDOW_S, oracle=False
        )
        if "->prefill-" not in diagnosis.location or diagnosis.location.startswith("router"):
            return None
        decode = diagnosis.location.split("->")[0]
        scene.faults.apply(CoRestart(decode))
        return f"co-restarted {decode} and its prefills (diagnosis: {diagnosis.location})"

    return check


@typed
def CoRestartWatchdog(
    origin: str = "harness", overdue_after_s: float = 1.0, interval_s: float = 0.2
) -> CallableWatchdog:
    """The reference user watchdog: co-restart the PD pair whose decode->prefill transfer the
    diagnosis says is wedged (incident 2), checked every ``interval_s``."""
    check = co_restart_on_transfer_wedge(origin, overdue_after_s)
    label = "co-restart PD pair on transfer wedge"
    watches = f"a diagnosis of {origin}'s wedge at a decode->prefill link"
    return CallableWatchdog(check, interval_s, label=label, watches=watches)


def aggregate_throughput_check(
    target: str = "decode-0", idle_s: float = 1.0
) -> Callable[[ActiveScene], str | None]:
    """A *misleading* watchdog (incident 9): restart the router once ``target``'s aggregate
    tokens/s has been 0 for ``idle_s``. Any other origin's traffic keeps the figure above zero,
    so it never fires on a wedge that only the harness suffers."""
    idle_since: list[float | None] = [None]
    last_tokens: list[float | None] = [None]

    def check(scene: ActiveScene) -> str | None:
        # The engine's generated-tokens counter, in whichever vocabulary it speaks (SGLang's
        # sglang:generation_tokens_total, vLLM's vllm:generation_tokens_total): aggregate
        # throughput is above zero while it grows between two checks.
        tokens = parse_engine_metrics(scene.topology.stub(target).metrics()).get(
            "generation_tokens", 0.0
        )
        before, last_tokens[0] = last_tokens[0], tokens
        if before is None or tokens > before:
            idle_since[0] = None
            return None
        now = time.monotonic()
        started = idle_since[0] = idle_since[0] or now
        if now - started < idle_s:
            return None
        idle_since[0] = None
        scene.topology.restart("router")
        return f"restarted the router after {target} showed 0 tok/s for {idle_s:g} s"

    return check


@typed
def AggregateThroughputWatchdog(
    target: str = "decode-0", idle_s: float = 1.0, interval_s: float = 0.2
) -> CallableWatchdog:
    """A misleading watchdog (incident 9): restart the router once ``target``'s aggregate
    tokens/s has been 0 for ``idle_s``; any other origin's traffic keeps it from firing."""
    label = f"restart router when {target} tok/s == 0"
    watches = f"{target}'s generated tokens (all origins together)"
    check = aggregate_throughput_check(target, idle_s)
    return CallableWatchdog(check, interval_s, label=label, watches=watches, after_s=idle_s)


def no_progress_check(
    origin: str = "harness",
    idle_s: float = 2.0,
) -> Callable[[ActiveScene], str | None]:
    """A no-progress watchdog, as a harness or a gateway keeps one: it fires when a request of
    ``origin`` that left the client has received nothing new (no head, no data; SSE keep-alive
    comments prove a live socket, not progress) for ``idle_s``. Unlike a total-time cap, a
    long stream that keeps producing tokens never trips it."""

    def check(scene: ActiveScene) -> str | None:
        now = time.time()
        idle = [
            r
            for r in scene.ledger.by_origin(origin).pending()
            if r.sent is not None
            and now - max(r.sent, r.first_byte or 0.0, r.last_byte or 0.0) >= idle_s
        ]
        if not idle:
            return None
        return (
            f"{len(idle)} {origin} requests without progress for {idle_s:g} s "
            f"(e.g. {idle[0].request_id})"
        )

    return check


@typed
def NoProgressWatchdog(
    origin: str = "harness",
    idle_s: float = 2.0,
    interval_s: float = 0.2,
    action: Action | None = None,
) -> CallableWatchdog:
    """Fires when a sent request of ``origin`` has received nothing new (no head, no data)
    for ``idle_s``; a long stream that keeps producing tokens never trips it. Without an
    ``action`` it only observes."""
    return CallableWatchdog(
        no_progress_check(origin, idle_s),
        interval_s,
        label=f"no progress for {idle_s:g} s ({origin})",
        action=action,
        observes=True,
        watches=f"bytes arriving on {origin}'s requests",
        after_s=idle_s,
    )


def oldest_request_check(
    origin: str = "harness", max_age_s: float = 5.0
) -> Callable[[ActiveScene], str | None]:
    """Fires when the oldest sent, unfinished request of ``origin`` is older than
    ``max_age_s``, whatever it has received: a total-time cap, as a gateway keeps one."""

    def check(scene: ActiveScene) -> str | None:
        now = time.time()
        sent = [r for r in scene.ledger.by_origin(origin).pending() if r.sent is not None]
        oldest = min(sent, key=lambda r: r.sent or now, default=None)
        if oldest is None or now - (oldest.sent or now) < max_age_s:
            return None
        return f"{oldest.request_id} in flight for {now - (oldest.sent or now):.1f} s"

    return check


@typed
def OldestRequestWatchdog(
    origin: str = "harness",
    max_age_s: float = 5.0,
    interval_s: float = 0.2,
    action: Action | None = None,
) -> CallableWatchdog:
    """Fires when ``origin``'s oldest request in flight is older than ``max_age_s``."""
    return CallableWatchdog(
        oldest_request_check(origin, max_age_s),
        interval_s,
        label=f"{origin} request older than {max_age_s:g} s",
        action=action,
        observes=True,
        watches=f"the age of {origin}'s oldest request in flight",
        after_s=max_age_s,
    )


def _component_metrics(scene: ActiveScene, target: str) -> str:
    topology = scene.topology
    url = (
        topology.router_metrics_url
        if target == "router"
        else f"{topology.worker_url(target)}/metrics"
    )
    return topology.http.get(url, timeout=1.0).text


def engine_gauge_check(
    target: str, metric: str, above: float | None, below: float | None, for_s: float
) -> Callable[[ActiveScene], str | None]:
    """Fires once ``target``'s ``metric`` (summed over its series) has stayed above ``above``
    or below ``below`` for ``for_s``; an unanswered scrape counts as neither."""
    held_since: list[float | None] = [None]

    def check(scene: ActiveScene) -> str | None:
        try:
            value = metric_value(_component_metrics(scene, target), metric)
        except httpx.HTTPError:
            held_since[0] = None
            return None
        if not ((above is not None and value > above) or (below is not None and value < below)):
            held_since[0] = None
            return None
        now = time.time()
        since = held_since[0] = held_since[0] or now
        if now - since < for_s:
            return None
        return f"{target} {metric} = {value:g} for {now - since:.1f} s"

    return check


@typed
def EngineGaugeWatchdog(
    target: str,
    metric: str,
    above: float | None = 0.0,
    below: float | None = None,
    for_s: float = 3.0,
    interval_s: float = 0.5,
    action: Action | None = None,
) -> CallableWatchdog:
    """Fires when a gauge of ``target``'s ``/metrics`` stays past a bound for ``for_s``
    (by default above 0, e.g. ``vllm:num_requests_waiting``; ``above=None, below=1`` for a
    gauge that must not drop)."""
    if above is None and below is None:
        raise ConfigError(
            f"EngineGaugeWatchdog on {target} {metric} has no bound",
            fix="give above= or below= (or both)",
        )
    bound = " and ".join(
        f"{word} {value:g}"
        for word, value in (("above", above), ("below", below))
        if value is not None
    )
    return CallableWatchdog(
        engine_gauge_check(target, metric, above, below, for_s),
        interval_s,
        label=f"{target} {metric} {bound} for {for_s:g} s",
        action=action,
        observes=True,
        watches=f"{target}'s {metric}",
        after_s=for_s,
    )


def probe_check(
    target: str, path: str, timeout_s: float, failure_threshold: int
) -> Callable[[ActiveScene], str | None]:
    """The kubelet's HTTP probe: a GET of ``path`` on ``target`` that does not answer 2xx/3xx
    within ``timeout_s`` is a failure; ``failure_threshold`` in a row fire it (and restart
    the count, as the kubelet does after acting)."""
    failures: list[int] = [0]

    def check(scene: ActiveScene) -> str | None:
        topology = scene.topology
        url = topology.router_url if target == "router" else topology.worker_url(target)
        try:
            status: int | str = topology.http.get(url + path, timeout=timeout_s).status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        if isinstance(status, int) and 200 <= status < 400:
            failures[0] = 0
            return None
        failures[0] += 1
        if failures[0] < failure_threshold:
            return None
        failures[0] = 0
        return f"{target} {path} failed {failure_threshold} times in a row (last: {status})"

    return check


@typed
def ProbeWatchdog(
    target: str,
    path: str = "/health",
    period_s: float = 1.0,
    timeout_s: float = 1.0,
    failure_threshold: int = 3,
    action: Action | None = None,
) -> CallableWatchdog:
    """An HTTP probe on ``target``, with the kubelet's period, timeout and failure threshold."""
    return CallableWatchdog(
        probe_check(target, path, timeout_s, failure_threshold),
        period_s,
        label=f"probe {target} {path} every {period_s:g} s, {failure_threshold} failures",
        action=action,
        observes=True,
        watches=f"{target} {path} answering 2xx/3xx within {timeout_s:g} s",
        after_s=period_s * failure_threshold,
    )
