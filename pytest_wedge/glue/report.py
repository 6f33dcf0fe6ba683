"""The wedge report of a failed (or timed-out) test: diagnosis, watchdogs and artifacts.

The diagnosis is the blind locator's (what an operator would see), with its confidence, the
lines that decided it and the hypotheses it ruled out. The oracle (the ledger walk over the
ground truth) runs on the same snapshot; when the two disagree the report and
``diagnosis.json`` show both.

Everything here is best effort: a report must never turn a test failure into an internal
error, so each part that cannot be had is named in the report instead.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_wedge.diagnostics import (
    TRAFFIC_WINDOW_S,
    collect,
    dump_stacks,
    judge,
    locate,
    write_artifacts,
)
from pytest_wedge.evidence.stacks import render_stacks
from pytest_wedge.handle import Wedge
from pytest_wedge.watchdogs.kinds import watchdog_report


def main_origin(wedge: Wedge) -> str:
    """The origin under test: ``harness`` when present, else the first origin that sent."""
    origins = wedge.ledger.origins()
    return "harness" if "harness" in origins or not origins else origins[0]


def build_report(
    wedge: Wedge,
    *,
    extra_evidence: Callable[[Wedge, str], Sequence[str]] = lambda w, o: (),
    with_stacks: bool = True,
) -> tuple[str, dict[str, Any]]:
    """Diagnose ``wedge``, write its artifacts, and return (section text, report data)."""
    origin = main_origin(wedge)
    lines: list[str] = []
    data: dict[str, Any] = {"origin": origin}
    windows = list(wedge.faults.windows)
    since = max((w.started for w in windows), default=None)
    start = since if since is not None else time.time() - TRAFFIC_WINDOW_S
    probe = wedge.probe
    before = probe.latest_slow(0.2) if probe else None
    window = probe.slow_before(start) if probe else None
    snapshot = collect(wedge.topology, wedge.ledger, before=before, window=window)
    diagnosis = judge(snapshot, origin, since=since)
    diagnosis.evidence += list(extra_evidence(wedge, origin))
    lines.append(diagnosis.render())
    data["diagnosis"] = diagnosis
    data["oracle"] = locate(snapshot, origin=origin, since=since)
    rows = watchdog_report(wedge, wedge.watchdogs)
    for check in wedge.clear_checks:
        cleared = f"{check.time_to_clear_s:.2f} s" if check.cleared_at else "not cleared"
        lines.append(f"watchdog check: budget {check.within_s:g} s, time to clear {cleared}")
    if rows:
        lines.append("watchdogs armed:")
        lines += [f"  - {r['watchdog']}: " + ("fired" if r.get("fired") else "did not fire")
                  for r in rows]  # fmt: skip
    states = {n: wedge.topology.runtime.state(n) for n in wedge.topology.components}
    lines.append("components: " + ", ".join(f"{n}={s}" for n, s in states.items()))
    faults = [f.describe() for f in wedge.faults.active_faults()]
    lines.append("active faults: " + (", ".join(faults) or "none"))
    stacks = None
    if with_stacks:
        with contextlib.suppress(Exception):
            stacks = dump_stacks(wedge.topology, timeout_s=3.0)
    if wedge.artifacts_dir is not None:
        samples = wedge.probe.samples() if wedge.probe else []
        path = write_artifacts(
            wedge.artifacts_dir, diagnosis, snapshot, samples, wedge.faults.windows,
            [*rows, *[c.to_json() for c in wedge.clear_checks]], stacks=stacks,
            link_rates=wedge.link_meter.rates() if wedge.link_meter else None,
        )  # fmt: skip
        data["artifacts"] = str(path)
        lines.append(
            f"artifacts: {path} (diagnosis.json, ledgers/, logs/, stacks.txt, timeline.html)"
        )
    elif stacks:
        lines.append(render_stacks(stacks))
    return "\n".join(lines), data


def keep_artifacts(wedge: Wedge) -> Path | None:
    """For passing tests under --wedge-keep: the ledgers and timeline without stacks."""
    if wedge.artifacts_dir is None:
        return None
    _, data = build_report(wedge, with_stacks=False)
    return Path(data["artifacts"]) if "artifacts" in data else None
