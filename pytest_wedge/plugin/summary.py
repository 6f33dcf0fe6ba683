"""The closing table of ``pytest --wedge-scenarios``: one row per scenario (located at, cleared
by, time to clear, time to recover, success before/during/after, lost), in the terminal, in
``summary.json`` under the run's artifacts, and as JUnit properties of each scenario.

Each scenario item writes its row into its report's ``user_properties`` (so the rows reach the
controller under pytest-xdist); the controller gathers them and prints them at the end."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge
    from pytest_wedge.scenarios.runner import ScenarioResult

ROW_PROPERTY = "wedge_summary"
COLUMNS = (
    ("scenario", "scenario"),
    ("located_at", "located at"),
    ("cleared_by", "cleared by"),
    ("time_to_clear_s", "clear s"),
    ("time_to_recover_s", "recover s"),
    ("success_before_pct", "ok% before"),
    ("success_during_pct", "during"),
    ("success_after_pct", "after"),
    ("lost", "lost"),
)


def _pct(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def scenario_row(name: str, wedge: Wedge, result: ScenarioResult, origin: str) -> dict[str, Any]:
    """The row of one scenario. The window is its first fault's, up to the fault's revert or,
    when a watchdog cleared the wedge first, the clearing; ``before`` includes the warm-up,
    which precedes every fault on the same path."""
    check = result.check
    windows = list(wedge.faults.windows)
    cleared_by = check.cleared_by() if check else []
    # Every row has every column (null where the scenario measured nothing: one that applies
    # no fault has no window to split before/during/after), so summary.json reads as a table.
    row: dict[str, Any] = {key: None for key, _ in COLUMNS} | {
        "scenario": name,
        "located_at": result.diagnosis.location if result.diagnosis else None,
        "cleared_by": "; ".join(cleared_by) or None,
        "time_to_clear_s": check.time_to_clear_s if check else None,
        "throughput_back_s": None,
        "latency": {phase: [None, None] for phase in ("before", "during", "after")},
    }
    from pytest_wedge.diagnostics.recovery import recovery  # only when a scenario ran

    records = [*wedge.ledger.by_origin("warmup"), *wedge.ledger.by_origin(origin)]
    if windows:
        first = windows[0]
        ended = first.ended or (check.cleared_at if check else None)
        figures = recovery(records, first.started, ended, time.time())
        row |= {
            "time_to_recover_s": figures.first_success_s,
            "throughput_back_s": figures.throughput_back_s,
            "success_before_pct": _pct(figures.before.success_pct),
            "success_during_pct": _pct(figures.during.success_pct),
            "success_after_pct": _pct(figures.after.success_pct),
            "latency": {
                "before": [figures.before.p50_s, figures.before.p99_s],
                "during": [figures.during.p50_s, figures.during.p99_s],
                "after": [figures.after.p50_s, figures.after.p99_s],
            },
        }
    row["lost"] = len(wedge.ledger.by_origin(origin).lost())
    return row


class SummaryRows:
    """A pytest plugin of one run: each scenario's row, gathered from whichever xdist worker
    ran it (the row travels in the report's ``user_properties``)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == ROW_PROPERTY:
                self.rows.append(json.loads(str(value)))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}" if value < 100 else f"{value:.0f}"
    return str(value)


def render(rows: list[dict[str, Any]]) -> list[str]:
    """The table, one line per scenario, columns aligned."""
    cells = [[head for _, head in COLUMNS]]
    cells += [[_cell(row.get(key)) for key, _ in COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in cells]


def write(rows: list[dict[str, Any]], run_dir: Path) -> Path:
    path = run_dir / "summary.json"
    path.write_text(json.dumps({"scenarios": rows}, indent=1, default=str))
    return path
