"""A scenario's ``[expect] executed_once``: true, no harness request id ran twice; false, the
scenario shows a non-idempotent replay, so at least one must have.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_wedge.errors import WedgeError
from pytest_wedge.load.executions import (
    DuplicateExecutionError,
    assert_executed_once,
    duplicates,
    retry_table,
)

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge
    from pytest_wedge.scenarios.catalog import Scenario

ORIGIN = "harness"


def check_executions(wedge: Wedge, scenario: Scenario, failure: Callable[..., WedgeError]) -> None:
    """Check ``scenario.expect.executed_once`` on ``wedge``; raise ``failure(headline, facts=,
    fix=)`` (the runner's ScenarioFailed) when it does not hold."""
    expected = scenario.expect.executed_once
    if expected is None:
        return
    executions = wedge.executions(ORIGIN)
    prefix = f"Scenario {scenario.name}: "
    if expected:
        try:
            assert_executed_once(executions, ORIGIN)
        except DuplicateExecutionError as exc:
            raise failure(prefix + exc.headline, facts=exc.facts, fix=exc.fix) from exc
        return
    if not duplicates(executions):
        raise failure(
            prefix + f"expected a {ORIGIN} request executed more than once (executed_once = "
            "false); every request id was executed by at most one attempt",
            facts={"request ids": len(executions), "retries": "\n" + retry_table(executions)},
            fix=f"read the worker ledgers; the scenario is {scenario.path}",
        )
