"""Reference watchdog policies: ``CallableWatchdog`` checks built from public pieces
(``diagnose``, faults, the topology), as a user would write their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from pytest_wedge.diagnostics import diagnose
from pytest_wedge.diagnostics.blind.clientside import wedged
from pytest_wedge.evidence.observed import ClientRecord
from pytest_wedge.evidence.parse import parse_engine_metrics
from pytest_wedge.faults import CoRestart
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


def CoRestartWatchdog(
    origin: str = "harness", overdue_after_s: float = 1.0, interval_s: float = 0.2
) -> CallableWatchdog:
    check = co_restart_on_transfer_wedge(origin, overdue_after_s)
    return CallableWatchdog(check, interval_s, label="co-restart PD pair on transfer wedge")


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


def AggregateThroughputWatchdog(
    target: str = "decode-0", idle_s: float = 1.0, interval_s: float = 0.2
) -> CallableWatchdog:
    label = f"restart router when {target} tok/s == 0"
    return CallableWatchdog(aggregate_throughput_check(target, idle_s), interval_s, label=label)


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


def NoProgressWatchdog(
    origin: str = "harness", idle_s: float = 2.0, interval_s: float = 0.2
) -> CallableWatchdog:
    label = f"no progress for {idle_s:g} s ({origin})"
    return CallableWatchdog(no_progress_check(origin, idle_s), interval_s, label=label)
