"""Every row of ``summary.json`` has every column, also for a scenario that applied no fault
(nothing to split into before, during and after): its cells are null, not missing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pytest_wedge.plugin.summary import COLUMNS, render, scenario_row
from pytest_wedge.scenarios.runner import ScenarioResult


class _Records(list[Any]):
    def lost(self) -> list[Any]:
        return []


def test_a_scenario_without_a_fault_window_has_every_column_null() -> None:
    wedge: Any = SimpleNamespace(
        faults=SimpleNamespace(windows=[]),
        ledger=SimpleNamespace(by_origin=lambda origin: _Records()),
    )
    row = scenario_row("quiet-one", wedge, ScenarioResult(), "harness")
    assert {key for key, _ in COLUMNS} | {"throughput_back_s", "latency"} <= set(row)
    assert row["scenario"] == "quiet-one" and row["lost"] == 0
    assert row["success_during_pct"] is None and row["latency"]["during"] == [None, None]
    assert render([row])[1].split() == ["quiet-one", "-", "-", "-", "-", "-", "-", "-", "0"]
