"""A healthy-edge scenario: healthy load at the edge of the armed watchdogs' budgets, checked
with ``expect_quiet``: the watchdogs leave it alone, or (``quiet = false``) they do not, and
the verdict says how."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_wedge.watchdogs.quiet import FalsePositiveError

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge
    from pytest_wedge.scenarios.catalog import Scenario

ORIGIN = "harness"


@dataclass
class EdgeOutcome:
    problem: str | None = None  # the scenario's failure headline, or None when it held
    verdict: str | None = None  # the false-positive verdict, rendered, if there was one
    notes: list[str] = field(default_factory=list)


def run_healthy_edge(wedge: Wedge, scenario: Scenario) -> EdgeOutcome:
    expect = scenario.expect
    outcome = EdgeOutcome()
    error: FalsePositiveError | None = None
    try:
        with wedge.expect_quiet(
            within_s=expect.quiet_within_s,
            watchdogs=[armed.watchdog for armed in scenario.watchdogs],
            origin=ORIGIN,
        ) as check:
            wedge.harness(**scenario.harness)
        outcome.notes.append(f"{check.healthy} healthy {ORIGIN} requests left alone")
    except FalsePositiveError as exc:
        error = exc
        outcome.verdict = exc.render()
    if expect.quiet and error is not None:
        outcome.problem = "the watchdogs did not leave healthy work alone"
    elif expect.quiet is False and error is None:
        outcome.problem = "expected a false positive on healthy work; the watchdogs left it alone"
    elif expect.quiet is False and error is not None:
        assert expect.false_positive is not None
        if expect.false_positive in error.render():
            outcome.notes.append(f"false positive, as this scenario shows: {error.headline}")
        else:
            outcome.problem = f"expected the verdict to say {expect.false_positive!r}"
    return outcome
