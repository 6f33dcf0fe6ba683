"""``expect_cleared``: does a watchdog end a wedge within its budget, with nothing lost?

The clock runs from the onset (the later of the first fault in the block and the first request
of the origin sent in it) until every overdue request is final and, with recovery required, a
new request succeeds. A loaded client's delay before sending is no part of the budget.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from pytest_wedge.diagnostics import diagnose
from pytest_wedge.errors import WedgeError
from pytest_wedge.views import Scene
from pytest_wedge.waiting import poll
from pytest_wedge.watchdogs.watchdog import Watchdog, armed, watchdog_report

if TYPE_CHECKING:
    from pytest_wedge.faults.fault import FaultSet


class ClearScene(Scene, Protocol):
    """What ``expect_cleared`` needs: a scene, its fault windows, and where the check and the
    armed watchdogs are recorded for the report."""

    @property
    def faults(self) -> FaultSet: ...

    @property
    def watchdogs(self) -> list[Watchdog]: ...

    @property
    def clear_checks(self) -> list[ClearCheck]: ...


class NotClearedError(WedgeError, AssertionError):
    """The wedge outlived its budget. An AssertionError, so the test fails rather than errors."""


@dataclass
class ClearCheck:
    origin: str
    within_s: float
    watchdogs: Sequence[Watchdog]
    onset: float = 0.0
    cleared_at: float | None = None
    ever_stuck: int = 0
    watchdog_rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def time_to_clear_s(self) -> float | None:
        return None if self.cleared_at is None else self.cleared_at - self.onset

    def cleared_by(self) -> list[str]:
        """The watchdogs whose case is ``cleared``: fired in time, acted, and the wedge ended."""
        return [r["watchdog"] for r in self.watchdog_rows if r.get("case") == "cleared"]

    def firings(self) -> list[str]:
        """Each fired watchdog, when its detector decided (from the onset), and its case."""
        return [
            f"{r['watchdog']} fired at +{r['first_at'] - self.onset:.2f} s ({r.get('case', '?')})"
            for r in self.watchdog_rows
            if r.get("fired")
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "budget_s": self.within_s,
            "onset": self.onset,
            "cleared_at": self.cleared_at,
            "time_to_clear_s": self.time_to_clear_s,
            "watchdogs": self.watchdog_rows,
        }


def _probe_succeeds(wedge: Scene, origin: str, timeout_s: float) -> bool:
    body = {
        "model": wedge.topology.spec.stub.model,
        "max_tokens": 2,
        "user": f"{origin}-probe",
        "messages": [{"role": "user", "content": "are you back?"}],
    }
    headers = {"x-request-id-origin": f"{origin}-probe"}
    try:
        response = wedge.topology.http.post(
            wedge.topology.url + "/v1/chat/completions",
            json=body,
            headers=headers,
            timeout=max(0.2, timeout_s),
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _stuck(wedge: Scene, origin: str, overdue_after_s: float) -> list[Any]:
    now = time.time()
    return [r for r in wedge.ledger.by_origin(origin).pending() if r.age(now) >= overdue_after_s]


def _first_sent(wedge: Scene, origin: str, since: float) -> float | None:
    sent = [r.sent for r in wedge.ledger.by_origin(origin) if r.sent is not None]
    return min((t for t in sent if t >= since), default=None)


def _onset(wedge: ClearScene, origin: str, entered: float, within_s: float, poll_s: float) -> float:
    """The later of the first fault applied inside the block (else its start) and the first
    ``origin`` request sent inside it; waited for no longer than the budget from the fault."""
    started = [w.started for w in wedge.faults.windows if w.started >= entered]
    fault_at = min(started, default=entered)
    sent = poll(
        lambda: _first_sent(wedge, origin, entered),
        timeout_s=fault_at + within_s - time.time(),
        interval_s=poll_s,
    )
    return fault_at if sent.value is None else max(fault_at, sent.value)


def _watchdog_lines(rows: list[dict[str, Any]], onset: float) -> str:
    lines = []
    for row in rows:
        if row.get("error"):
            state = f"could not be read ({row['error']})"
        elif row["fired"]:
            state = f"armed, fired at +{row['first_at'] - onset:.2f} s ({row['count']}x)"
            if row.get("action"):
                state += f", then {row['action']}: {row['outcome']}"
        else:
            state = "armed, did not fire"
        lines.append(f"{row['watchdog']}: {state}")
    return "; ".join(lines) or "none armed"


# The cases a watchdog's row names, in the order watchdog_case decides them.
WATCHDOG_CASES = (
    "cleared",
    "observes only",
    "acted, wedge stayed",
    "slower than the budget",
    "never saw the signal",
)


def watchdog_case(row: dict[str, Any], onset: float, within_s: float, cleared: bool) -> str:
    """Which of the five cases a watchdog's row is: ``cleared``, ``observes only``,
    ``acted, wedge stayed``, ``slower than the budget`` or ``never saw the signal``."""
    after = row.get("fires_after_s")
    if not row.get("fired"):
        return (
            "slower than the budget"
            if after is not None and after > within_s
            else ("never saw the signal")
        )
    if row["first_at"] - onset > within_s:
        return "slower than the budget"
    if not row.get("acts"):
        return "observes only"
    return "cleared" if cleared else "acted, wedge stayed"


def watchdog_advice(
    row: dict[str, Any], case: str, onset: float, within_s: float, changed: str
) -> str:
    """What to do about a watchdog in ``case``; ``changed``: what the wedge changed instead."""
    name = row["watchdog"]
    at = f"+{row['first_at'] - onset:.2f} s" if row.get("fired") else ""
    after = row.get("fires_after_s")
    if case == "cleared":
        action = row.get("action") or "its own action"
        return f"{name} fired at {at} and {action} cleared the wedge"
    if case == "observes only":
        return (
            f"{name} fired at {at}, within the {within_s:g} s budget, but it only observes: "
            'nothing acted on it. Give it an action (action=Restart("decode-0"), '
            'AbortOldest(), CoRestart(...); in a scenario file action = { kind = "Restart", '
            'target = "decode-0" })'
        )
    if case == "acted, wedge stayed":
        did = f"{row['action']} ({row['outcome']})" if row.get("action") else "acted"
        return (
            f"{name} fired at {at} and {did}, but the wedge stayed: its action does not cure "
            f"this wedge ({changed})"
        )
    if case == "slower than the budget":
        if not row.get("fired") and after is not None:
            return (
                f"{name} waits {after:g} s before it can fire, longer than the {within_s:g} s "
                f"budget: lower it below {within_s:g} s, or raise the budget if it is the wrong one"
            )
        return (
            f"{name} fired at {at}, after the {within_s:g} s budget: lower its timeout"
            + (f" ({after:g} s)" if after is not None else "")
            + ", or raise the budget if it is the wrong one"
        )
    if case == "could not be read":
        return f"{name} could not be read ({row['error']}): fix the watchdog first"
    signal = row.get("signal") or "its own signal"
    return f"{name} never fired: it watches {signal}, and this wedge changed something else ({changed})"


@contextlib.contextmanager
def expect_cleared(
    wedge: ClearScene,
    *,
    within_s: float,
    origin: str = "harness",
    watchdogs: Sequence[Watchdog] = (),
    require_recovery: bool = True,
    overdue_after_s: float = 0.5,
    poll_s: float = 0.02,
) -> Iterator[ClearCheck]:
    """Arm ``watchdogs``, run the block (which starts the wedge), then wait at most
    ``within_s`` from the onset for it to clear; raise NotClearedError otherwise.
    ``require_recovery=False`` accepts a watchdog that only *bounds* stuck requests.
    """
    check = ClearCheck(origin, within_s, watchdogs)
    with armed(wedge, watchdogs):
        wedge.watchdogs.extend(watchdogs)
        entered = time.time()
        yield check
        check.onset = _onset(wedge, origin, entered, within_s, poll_s)
        deadline = check.onset + within_s
        # A wedge must show before it can clear: requests held overdue are remembered until
        # each has a final state, so a check never passes before the wedge even began. That
        # includes requests sent inside the block that a watchdog already ended before the
        # first look: on a loaded machine the block itself can outlast the watchdog.
        ever_stuck: set[str] = {
            r.request_id
            for r in wedge.ledger.by_origin(origin)
            if r.sent is not None and r.sent >= entered and r.age() >= overdue_after_s
        }

        def cleared() -> bool:
            now = time.time()
            overdue = _stuck(wedge, origin, overdue_after_s)
            ever_stuck.update(r.request_id for r in overdue)
            unfinished = {r.request_id for r in wedge.ledger.by_origin(origin).pending()}
            return bool(
                ever_stuck
                and not overdue
                and not ever_stuck & unfinished
                and (not require_recovery or _probe_succeeds(wedge, origin, deadline - now))
            )

        if poll(cleared, timeout_s=deadline - time.time(), interval_s=poll_s).met:
            check.cleared_at = time.time()
        check.ever_stuck = len(ever_stuck)
        check.watchdog_rows = watchdog_report(wedge, watchdogs)
        elapsed = check.time_to_clear_s
        cleared_in_time = elapsed is not None and elapsed <= within_s
        for row in check.watchdog_rows:
            row["case"] = watchdog_case(row, check.onset, within_s, cleared_in_time)
        wedge.clear_checks.append(check)
        if not cleared_in_time:
            raise _not_cleared(wedge, check, overdue_after_s)
        for row in check.watchdog_rows:
            row["advice"] = watchdog_advice(row, row["case"], check.onset, within_s, "")


def _not_cleared(wedge: ClearScene, check: ClearCheck, overdue_after_s: float) -> NotClearedError:
    stuck = _stuck(wedge, check.origin, overdue_after_s)
    facts: dict[str, object] = {
        "budget": f"{check.within_s:g} s from the onset",
        "time to clear": f"{check.time_to_clear_s:.2f} s" if check.cleared_at else "not cleared",
        "overdue during the check": f"{check.ever_stuck} {check.origin} requests"
        + ("" if check.ever_stuck else " (the wedge never showed)"),
        "still stuck": f"{len(stuck)} {check.origin} requests"
        + (f" (e.g. {', '.join(r.request_id for r in stuck[:3])})" if stuck else ""),
        "watchdogs": _watchdog_lines(check.watchdog_rows, check.onset),
    }
    changed = "the diagnosis failed"
    try:
        diagnosis = diagnose(wedge, origin=check.origin, overdue_after_s=overdue_after_s)
        facts["located at"] = diagnosis.location
        facts["evidence"] = "; ".join(diagnosis.evidence[:4])
        changed = f"{check.origin} requests held at {diagnosis.location}"
        if diagnosis.red_herrings:
            changed += f"; {diagnosis.red_herrings[0]}"
    except Exception as exc:  # the failure must still be reported without a diagnosis
        facts["located at"] = f"(diagnosis failed: {exc})"
    advice = []
    for row in check.watchdog_rows:
        if "case" in row:
            row["advice"] = watchdog_advice(row, row["case"], check.onset, check.within_s, changed)
            advice.append(row["advice"])
    return NotClearedError(
        f"The {check.origin} wedge was not cleared within {check.within_s:g} s",
        facts=facts,
        fix="; ".join(advice)
        or "arm a watchdog that watches the signal this wedge changes, with an action",
    )
