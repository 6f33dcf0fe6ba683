"""Running one scenario on a topology handle: load, faults, location, clearing, accounting."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from pytest_wedge.diagnostics import Diagnosis
from pytest_wedge.errors import WedgeError
from pytest_wedge.handle import Wedge
from pytest_wedge.load import Aborter, Harness
from pytest_wedge.scenarios.catalog import Scenario
from pytest_wedge.waiting import wait_for
from pytest_wedge.watchdogs.clearing import ClearCheck, NotClearedError

ORIGIN = "harness"


class ScenarioFailed(WedgeError, AssertionError):
    """The scenario's expectation did not hold; the wedge report says what was seen instead."""


@dataclass
class ScenarioResult:
    diagnosis: Diagnosis | None = None
    check: ClearCheck | None = None
    not_cleared: str | None = None
    notes: list[str] = field(default_factory=list)


def _wedge_showed(wedge: Wedge, overdue_after_s: float) -> bool:
    now = time.time()
    return any(
        (r.state == "pending" and r.age(now) >= overdue_after_s) or r.state in ("error", "timeout")
        for r in wedge.ledger.by_origin(ORIGIN)
    )


def _fail(
    scenario: Scenario, headline: str, diagnosis: Diagnosis | None, **facts: Any
) -> ScenarioFailed:
    if diagnosis is not None:
        facts["diagnosis"] = "\n" + diagnosis.render(max_requests=5)
    return ScenarioFailed(
        f"Scenario {scenario.name}: {headline}",
        facts=facts,
        fix=f"read the wedge report below; the scenario is {scenario.path}",
    )


def _warm_up(wedge: Wedge, scenario: Scenario) -> None:
    if scenario.warmup_requests <= 0:
        return
    warm = wedge.harness(agents=scenario.warmup_requests, rounds=1, origin="warmup")
    states = (warm.wait(15), wedge.ledger.by_origin("warmup").states())
    if not states[0] or states[1]["ok"] != scenario.warmup_requests:
        raise _fail(
            scenario, "the topology was not healthy before any fault", None, warmup=states[1]
        )


def _locate(wedge: Wedge, scenario: Scenario, result: ScenarioResult) -> None:
    expect = scenario.expect
    if expect.located_at == "none":
        # Nothing should wedge: give it the time a wedge would take to show, then look.
        time.sleep(expect.overdue_after_s * 1.5)
    else:
        with contextlib.suppress(WedgeError):
            wait_for(
                lambda: _wedge_showed(wedge, expect.overdue_after_s),
                timeout_s=expect.wedge_shows_within_s,
                what="the wedge to show",
            )
    diagnosis = wedge.diagnose(origin=ORIGIN, overdue_after_s=expect.overdue_after_s)
    result.diagnosis = diagnosis
    if diagnosis.location != expect.located_at:
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
            _locate(wedge, scenario, result)
    except NotClearedError as exc:
        if expect.clears:
            raise _fail(
                scenario,
                "the wedge was not cleared within its budget",
                result.diagnosis,
                watchdog_check=exc.render(),
            ) from exc
        result.not_cleared = exc.render()
        result.notes.append("not cleared within budget, as this scenario expects")
    else:
        if expect.cleared_within_s is not None and not expect.clears:
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
        wait_for(lambda: not _in_flight(wedge), timeout_s=expect.settle_within_s,
                 what="every in-flight counter to return to 0",
                 describe=lambda: ", ".join(_in_flight(wedge)))  # fmt: skip
        wedge.faults.revert_all()
    if expect.nothing_lost:
        wedge.assert_nothing_lost(ORIGIN)


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
