"""``expect_quiet``: a watchdog must also leave healthy work alone.

A timeout tightened to clear a wedge can cut long healthy work: smg's
``--request-timeout-secs`` caps every upstream call (router-protocol.md §4). The check runs
healthy load at the budget's edge and fails if a watchdog fires or a request is cut or retried.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_wedge.errors import WedgeError
from pytest_wedge.load.client_ledger import RequestRecord
from pytest_wedge.metrics_text import metric_value
from pytest_wedge.views import Scene
from pytest_wedge.waiting import poll
from pytest_wedge.watchdogs.watchdog import Watchdog, armed, watchdog_report

# smg counts a retried upstream call here; a healthy request must never be retried.
ROUTER_RETRIES = "smg_worker_retries_total"


class FalsePositiveError(WedgeError, AssertionError):
    """A watchdog fired on healthy work, or healthy requests were cut, errored or retried."""


@dataclass
class QuietCheck:
    origin: str
    within_s: float
    watchdogs: Sequence[Watchdog]
    started: float = 0.0
    finished: bool = False
    watchdog_rows: list[dict[str, Any]] = field(default_factory=list)
    harmed: list[RequestRecord] = field(default_factory=list)
    healthy: int = 0
    router_retries: float = 0.0

    @property
    def fired(self) -> list[str]:
        return [str(row["watchdog"]) for row in self.watchdog_rows if row.get("fired")]

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "budget_s": self.within_s,
            "fired": self.fired,
            "harmed": [r.request_id for r in self.harmed],
            "healthy": self.healthy,
            "router_retries": self.router_retries,
            "watchdogs": self.watchdog_rows,
        }


def _router_retries(scene: Scene) -> float:
    import httpx

    try:
        return metric_value(scene.topology.router_metrics(timeout_s=2.0), ROUTER_RETRIES)
    except httpx.HTTPError:
        return 0.0


def _describe(record: RequestRecord) -> str:
    end = record.finished or time.time()
    took = end - (record.sent or record.created)
    why = f": {record.error[:80]}" if record.error else ""
    return f"{record.request_id} {record.state} after {took:.2f} s ({record.tokens} tokens){why}"


def _verdict(check: QuietCheck, watchdogs: Sequence[Watchdog]) -> FalsePositiveError:
    harms = [dog.harms for dog in watchdogs if dog.describe() in check.fired and dog.harms]
    culprits = ", ".join(check.fired) or "no armed watchdog"
    headline = f"false positive: {culprits} " + (
        "; ".join(harms)
        if harms
        else (
            f"hit healthy {check.origin} work"
            if check.fired
            else f"fired, yet healthy {check.origin} requests were cut, errored or retried"
        )
    )
    facts: dict[str, object] = {
        "healthy requests": f"{check.healthy} {check.origin} requests started in the check",
        "cut or errored": f"{len(check.harmed)}"
        + "".join(f"\n    {_describe(r)}" for r in check.harmed[:8]),
        "router retries": f"{check.router_retries:g} ({ROUTER_RETRIES})",
        "watchdogs": "; ".join(
            f"{row['watchdog']}: {'fired' if row.get('fired') else 'quiet'}"
            for row in check.watchdog_rows
        )
        or "none armed",
    }
    if not check.finished:
        facts["unfinished"] = f"the healthy load did not finish within {check.within_s:g} s"
    return FalsePositiveError(
        headline,
        facts=facts,
        fix="the watchdog measures the wrong thing for this work: bound time without progress "
        "(an idle or no-progress timeout) rather than total time, or raise its limit above "
        "the longest healthy request",
    )


@contextlib.contextmanager
def expect_quiet(
    scene: Scene,
    *,
    within_s: float,
    watchdogs: Sequence[Watchdog] = (),
    origin: str = "harness",
    poll_s: float = 0.05,
) -> Iterator[QuietCheck]:
    """Arm ``watchdogs``, run the block (which starts *healthy* load of ``origin``), then wait
    at most ``within_s`` for that load to finish; raise :class:`FalsePositiveError` when a
    watchdog fired, or a request of the origin sent in the block ended other than ``ok``, or
    the router retried any call."""
    check = QuietCheck(origin, within_s, watchdogs)
    with armed(scene, watchdogs):
        retries_before = _router_retries(scene)
        check.started = time.time()
        yield check

        def mine() -> list[RequestRecord]:
            return [r for r in scene.ledger.by_origin(origin) if r.created >= check.started]

        check.finished = poll(
            lambda: bool(mine()) and all(r.final for r in mine()),
            timeout_s=check.started + within_s - time.time(),
            interval_s=poll_s,
        ).met
        records = mine()
        check.healthy = len(records)
        check.harmed = [r for r in records if r.final and r.state != "ok"]
        check.router_retries = max(0.0, _router_retries(scene) - retries_before)
        check.watchdog_rows = watchdog_report(scene, watchdogs)
        if check.fired or check.harmed or check.router_retries or not check.finished:
            raise _verdict(check, watchdogs)
