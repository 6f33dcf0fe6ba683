"""Running one scenario on a topology handle: load, faults, location, clearing, accounting.

Before it locates, a run waits (under ``wedge_shows_within_s``, on the sent clock) for the wedge
to show or the harness to finish. The diagnosis then runs on its own thread while the clearing
check watches the same wedge: started after a diagnosis, it could miss a wedge already bounded.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_wedge.diagnostics import Diagnosis
from pytest_wedge.errors import WedgeError
from pytest_wedge.handle import Wedge
from pytest_wedge.load import FAILED_STATES, Aborter, Harness, RequestRecord
from pytest_wedge.scenarios.catalog import Scenario
from pytest_wedge.scenarios.executions_check import check_executions
from pytest_wedge.scenarios.healthy_edge import run_healthy_edge
from pytest_wedge.waiting import poll, wait_for
from pytest_wedge.watchdogs.clearing import ClearCheck, NotClearedError

ORIGIN = "harness"
POLL_S = 0.02
DIAGNOSE_WITHIN_S = 60.0
WARMUP_TOKENS = 16


class ScenarioFailed(WedgeError, AssertionError):
    """The scenario's expectation did not hold; the wedge report says what was seen instead.
    ``diagnosis`` is the one it is about: the report shows that one, not a later one."""

    diagnosis: Diagnosis | None = None


@dataclass(frozen=True)
class Showing:
    """The harness's requests on the sent clock, as the wait before locating sees them."""

    agents: int
    issued: int  # first-round requests the agents have created so far
    not_sent_yet: int  # pending, not handed to the network, not held by an exhausted pool
    in_flight: int  # sent, pending, not overdue yet
    held: int  # overdue since sent, held by the client's exhausted pool, or failed
    quiet_s: float  # since the last first-round request was sent (0 until all are)
    overdue_after_s: float
    finished: bool  # the harness has ended: nothing more can change

    @property
    def all_sent(self) -> bool:
        return self.issued >= self.agents and self.not_sent_yet == 0

    @property
    def wedge_shows(self) -> bool:
        """Every first-round request left the client (or its exhausted pool holds it), and
        most of the unfinished ones are held: the hop holding them is what a diagnosis sees."""
        return self.all_sent and self.held > 0 and 2 * self.held > self.held + self.in_flight

    def decided(self, expect_wedge: bool) -> bool:
        if self.finished or self.wedge_shows:
            return True
        # No wedge expected: every first-round request had the time a wedge takes to show.
        return not expect_wedge and (
            self.held > 0 or (self.all_sent and self.quiet_s >= self.overdue_after_s)
        )

    def describe(self) -> str:
        return (
            f"{self.issued} of {self.agents} first-round {ORIGIN} requests issued; "
            f"{self.not_sent_yet} not sent yet, {self.in_flight} in flight, {self.held} held "
            f"(overdue > {self.overdue_after_s:g} s since sent, held by the client's exhausted "
            f"pool, or failed); harness {'finished' if self.finished else 'running'}"
        )


def showing(
    records: Iterable[RequestRecord],
    *,
    agents: int,
    overdue_after_s: float,
    finished: bool,
    now: float | None = None,
) -> Showing:
    """Count ``records`` (one harness's) on the sent clock at ``now``."""
    now = now or time.time()
    records = list(records)
    first = [r for r in records if r.round == 0 and r.attempt == 0]
    phases = [r.phase(overdue_after_s, now) for r in records]
    failed = sum(1 for r in records if r.state in FAILED_STATES and not r.cut_by_stop)
    sent = [r.sent for r in first if r.sent is not None]
    quiet = now - max(sent) if first and len(sent) == len(first) >= agents else 0.0
    return Showing(
        agents=agents,
        issued=len(first),
        not_sent_yet=phases.count("not_sent_yet"),
        in_flight=phases.count("in_flight"),
        held=phases.count("overdue") + phases.count("held_by_client") + failed,
        quiet_s=quiet,
        overdue_after_s=overdue_after_s,
        finished=finished,
    )


@dataclass
class ScenarioResult:
    diagnosis: Diagnosis | None = None
    check: ClearCheck | None = None
    not_cleared: str | None = None
    notes: list[str] = field(default_factory=list)
    showing: Showing | None = None  # what the wait before locating saw when it ended


def _fail(
    scenario: Scenario, headline: str, diagnosis: Diagnosis | None, **facts: Any
) -> ScenarioFailed:
    if diagnosis is not None:
        facts["diagnosis"] = "\n" + diagnosis.render(max_requests=5)
    failed = ScenarioFailed(
        f"Scenario {scenario.name}: {headline}",
        facts=facts,
        fix=f"read the wedge report below; the scenario is {scenario.path}",
    )
    failed.diagnosis = diagnosis
    return failed


def _warm_up(wedge: Wedge, scenario: Scenario) -> None:
    if scenario.warmup_requests <= 0:
        return
    # No larger than the scenario's own requests: on a real CPU engine 16 tokens took 2-8 s.
    tokens = min(int(scenario.harness.get("max_tokens", WARMUP_TOKENS)), WARMUP_TOKENS)
    warm = wedge.harness(
        agents=scenario.warmup_requests, rounds=1, origin="warmup", max_tokens=tokens
    )
    states = (warm.wait(15), wedge.ledger.by_origin("warmup").states())
    if not states[0] or states[1]["ok"] != scenario.warmup_requests:
        raise _fail(
            scenario, "the topology was not healthy before any fault", None, warmup=states[1]
        )


def _await_showing(scenario: Scenario, harness: Harness, result: ScenarioResult) -> None:
    """Wait until locating means something; fail plainly, naming what, if it never does."""
    expect = scenario.expect
    expect_wedge = expect.located_at != "none"

    def look() -> Showing:
        return showing(
            list(harness.records),
            agents=harness.agents,
            overdue_after_s=expect.overdue_after_s,
            finished=not harness.running,
        )

    seen = look()

    def decided() -> bool:
        nonlocal seen
        seen = look()
        return seen.decided(expect_wedge)

    polled = poll(decided, timeout_s=expect.wedge_shows_within_s, interval_s=POLL_S)
    result.showing = seen
    if polled.met:
        return
    if expect_wedge:
        what = (
            f"the wedge to show: all {harness.agents} first-round {ORIGIN} requests sent (or "
            f"held by an exhausted client pool) and most unfinished ones overdue "
            f"(> {expect.overdue_after_s:g} s since sent) or failed, or the harness to finish"
        )
    else:
        what = (
            f"the harness to finish, or all {harness.agents} first-round {ORIGIN} requests to "
            f"be sent and {expect.overdue_after_s:g} s to pass after the last one"
        )
    raise _fail(
        scenario,
        f"waited {expect.wedge_shows_within_s:g} s for {what}; it did not happen",
        None,
        last_seen=seen.describe(),
    )


class _Diagnosing:
    """``wedge.diagnose`` on its own thread, started the moment the wedge shows."""

    def __init__(self, wedge: Wedge, overdue_after_s: float) -> None:
        self._diagnosis: Diagnosis | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._main, args=(wedge, overdue_after_s), name="wedge-diagnose", daemon=True
        )
        self._thread.start()

    def _main(self, wedge: Wedge, overdue_after_s: float) -> None:
        try:
            self._diagnosis = wedge.diagnose(origin=ORIGIN, overdue_after_s=overdue_after_s)
        except BaseException as exc:  # re-raised on the test's thread by result()
            self._error = exc

    def result(self, scenario: Scenario) -> Diagnosis:
        self._thread.join(DIAGNOSE_WITHIN_S)
        if self._thread.is_alive():
            raise _fail(
                scenario, f"the diagnosis did not finish within {DIAGNOSE_WITHIN_S:g} s", None
            )
        if self._error is not None:
            raise self._error
        assert self._diagnosis is not None
        return self._diagnosis


def _check_location(scenario: Scenario, result: ScenarioResult, diagnosis: Diagnosis) -> None:
    expect = scenario.expect
    result.diagnosis = diagnosis
    if diagnosis.location not in expect.located_at.split("|"):
        raise _fail(
            scenario,
            f"expected the wedge at {expect.located_at}, the diagnosis says {diagnosis.location}",
            diagnosis,
        )
    if expect.red_herring and not any(expect.red_herring in h for h in diagnosis.red_herrings):
        raise _fail(
            scenario,
            f"expected {expect.red_herring}'s activity named as a red herring",
            diagnosis,
            red_herrings=diagnosis.red_herrings or "none",
        )


def run_scenario(wedge: Wedge, scenario: Scenario) -> ScenarioResult:
    """Run ``scenario`` on ``wedge``; raise ScenarioFailed when an expectation does not hold."""
    expect, result = scenario.expect, ScenarioResult()
    _warm_up(wedge, scenario)
    for options in scenario.strays:
        options = dict(options)
        wedge.stray(options.pop("target", "decode-0"), **options)
    if expect.quiet is not None:
        edge = run_healthy_edge(wedge, scenario)
        result.notes += edge.notes
        if edge.problem is not None:
            facts = {"verdict": edge.verdict} if edge.verdict else {}
            raise _fail(scenario, edge.problem, None, **facts)
        _finish(wedge, scenario, None)
        return result
    clearing: contextlib.AbstractContextManager[ClearCheck | None] = contextlib.nullcontext()
    if expect.cleared_within_s is not None:
        clearing = wedge.expect_cleared(
            within_s=expect.cleared_within_s,
            origin=ORIGIN,
            watchdogs=[w.watchdog for w in scenario.watchdogs],
            require_recovery=expect.require_recovery,
            overdue_after_s=expect.overdue_after_s,
        )
    harness: Harness | None = None
    diagnosing: _Diagnosing | None = None
    not_cleared: NotClearedError | None = None
    try:
        with clearing as check:
            result.check = check
            for scheduled in scenario.faults:
                if scheduled.at_s == 0 and scheduled.for_s is None:
                    wedge.apply(scheduled.fault)
                else:
                    wedge.faults.schedule(
                        scheduled.fault, at_s=scheduled.at_s, for_s=scheduled.for_s
                    )
            for options in scenario.aborters:
                aborter = Aborter(wedge.url, ledger=wedge.ledger, **options)
                wedge.track(aborter).start()
                aborter.wait(10)
            harness = wedge.harness(**scenario.harness)
            _await_showing(scenario, harness, result)
            diagnosing = _Diagnosing(wedge, expect.overdue_after_s)
        # Leaving the block starts the clearing check, which watches while the diagnosis runs.
    except NotClearedError as exc:
        not_cleared = exc
    if diagnosing is not None:
        _check_location(scenario, result, diagnosing.result(scenario))
    if not_cleared is not None:
        if expect.clears:
            raise _fail(
                scenario,
                "the wedge was not cleared within its budget",
                result.diagnosis,
                watchdog_check=not_cleared.render(),
            ) from not_cleared
        result.not_cleared = not_cleared.render()
        result.notes.append("not cleared within budget, as this scenario expects")
    elif expect.cleared_within_s is not None and not expect.clears:
        raise _fail(
            scenario,
            "expected the watchdog NOT to clear the wedge, but it did",
            result.diagnosis,
        )
    if result.check is not None:
        for armed, row in zip(scenario.watchdogs, result.check.watchdog_rows, strict=True):
            if bool(row.get("fired")) != armed.expect_fire:
                verb = "to fire" if armed.expect_fire else "not to fire"
                raise _fail(
                    scenario,
                    f"expected {row['watchdog']} {verb}",
                    result.diagnosis,
                    watchdogs=result.check.watchdog_rows,
                )
            if armed.expect_case is not None and row.get("case") != armed.expect_case:
                raise _fail(
                    scenario,
                    f"expected {row['watchdog']}'s case to be {armed.expect_case!r}, "
                    f"it is {row.get('case')!r}",
                    result.diagnosis,
                    advice=row.get("advice", ""),
                    watchdogs=result.check.watchdog_rows,
                )
    _finish(wedge, scenario, harness)
    return result


def _finish(wedge: Wedge, scenario: Scenario, harness: Harness | None) -> None:
    """Lift the faults, let the harness finish, and account for every request.

    A settle check runs with the faults still applied: reverting a fault releases whatever it
    held, and a leak must be seen before that.
    """
    expect = scenario.expect
    if expect.settle_within_s is None:
        wedge.faults.revert_all()
    if harness is not None and not harness.wait(expect.finish_within_s):
        harness.stop()
    wedge.stop_loads()
    if expect.settle_within_s is not None:
        wait_for(
            lambda: not _in_flight(wedge),
            timeout_s=expect.settle_within_s,
            what="every in-flight counter to return to 0",
            describe=lambda: ", ".join(_in_flight(wedge)),
        )
        wedge.faults.revert_all()
    if expect.nothing_lost:
        wedge.assert_nothing_lost(ORIGIN)
    if expect.every_request_ok is not None:
        _check_every_request_ok(scenario, wedge.ledger.by_origin(ORIGIN).records)
    check_executions(wedge, scenario, ScenarioFailed)


def _check_every_request_ok(scenario: Scenario, records: Iterable[RequestRecord]) -> None:
    records = list(records)
    cut = [r for r in records if r.state != "ok"]
    if scenario.expect.every_request_ok and cut:
        raise _fail(
            scenario,
            f"expected every {ORIGIN} request to end ok; {len(cut)} of {len(records)} did not",
            None,
            e_g="; ".join(f"{r.request_id}: {r.state} {r.error or ''}".strip() for r in cut[:3]),
        )
    if scenario.expect.every_request_ok is False and not cut:
        raise _fail(
            scenario,
            f"expected some {ORIGIN} requests to end without success; all {len(records)} ended ok",
            None,
        )


def _in_flight(wedge: Wedge) -> list[str]:
    """Counters that still hold requests after all load stopped: a leak if they stay."""
    leaks = []
    router = wedge.metric("router", "smg_worker_requests_active")
    if router:
        leaks.append(f"router smg_worker_requests_active={router:g}")
    for name in wedge.topology.stubs:
        active = wedge.stub(name).state()["active"]
        if active:
            leaks.append(f"{name} active={active}")
    return leaks
