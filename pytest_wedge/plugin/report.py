"""The wedge report of a failed, timed-out or interrupted test: the evidence at the moment of
failure (taken as the exception left a fault block, else the failure's own ``diagnose()``, else
now, before teardown), the blind locator's diagnosis, and the oracle's when they disagree. Best
effort: a part that cannot be had is named, never turned into an internal error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_wedge.diagnostics import Moment, capture_moment, dump_stacks, locate, write_artifacts
from pytest_wedge.diagnostics.moment import active_fault_labels, current_window_start
from pytest_wedge.diagnostics.oracle import scene_faults
from pytest_wedge.evidence.stacks import render_stacks
from pytest_wedge.handle import Wedge
from pytest_wedge.topology.what_ran import describe_components, not_proxied
from pytest_wedge.watchdogs.watchdog import watchdog_report

ARTIFACT_FILES = "diagnosis.json, ledgers/, logs/, stacks.txt, timeline.html"


def moment_of_failure(wedge: Wedge, error: BaseException | None) -> Moment:
    """The moment the report shows (see the module's docstring for the order)."""
    taken = wedge.failure_moment
    if taken is not None and error is not None and taken.caused(error):
        return taken
    last = wedge.last_diagnosis
    carried = getattr(error, "diagnosis", None)
    if last is not None and carried is not None and carried is last.diagnosis:
        return last
    if isinstance(error, KeyboardInterrupt):
        label = "at Ctrl-C"
    else:
        label = "at failure" if error is not None else "at the report"
    return capture_moment(wedge, label, test_started=wedge.started)


def _last_diagnose_line(wedge: Wedge, shown: Moment) -> list[str]:
    last = wedge.last_diagnosis
    if last is None or last is shown:
        return []
    differs = last.diagnosis.location != shown.diagnosis.location
    flag = f" (differs: {shown.label} it is {shown.diagnosis.location})" if differs else ""
    when = f"{last.active()}, +{last.taken_at - last.test_started:.1f} s into the test"
    return [f"the test's last diagnose() ({when}): {last.diagnosis.headline()}{flag}"]


def _watchdog_lines(wedge: Wedge, rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for check in wedge.clear_checks:
        cleared = f"{check.time_to_clear_s:.2f} s" if check.cleared_at else "not cleared"
        lines.append(f"watchdog check: budget {check.within_s:g} s, time to clear {cleared}")
    if rows:
        lines.append("watchdogs armed:")
        lines += [f"  - {r['watchdog']}: {_watchdog_state(r)}" for r in rows]
    return lines


def _watchdog_state(row: dict[str, Any]) -> str:
    """``fired at 12:00:03.120 (no progress ...), then Restart on decode-0: done``."""
    if row.get("error"):
        return f"could not be read ({row['error']})"
    if not row.get("fired"):
        return "did not fire" + ("" if row.get("acts") else " (observes only)")
    at = time.strftime("%H:%M:%S", time.localtime(row["first_at"]))
    state = f"fired at {at}.{int(row['first_at'] % 1 * 1000):03d} ({row['detail']})"
    if row.get("action"):
        return state + f", then {row['action']}: {row['outcome']}"
    return state + ("" if row.get("acts") else ", observes only: nothing acted")


def _fault_lines(wedge: Wedge, moment: Moment) -> list[str]:
    """Active faults at the moment shown, and now when that differs; scheduled faults that
    failed in the background are listed here rather than raised (the report must be made)."""
    lines = [f"active faults {moment.label}: " + (", ".join(moment.faults) or "none")]
    now = active_fault_labels(wedge.faults)
    if now != moment.faults:
        lines.append("active faults now, at the report: " + (", ".join(now) or "none"))
    lines += [
        f"  {w.fault.describe()}: verified +{w.verified_at - w.started:.2f} s after it was "
        f"applied ({w.verified})"
        for w in wedge.faults.windows
        if w.verified_at is not None and w.verified
    ]
    lines += [f"scheduled fault error: {e}" for e in wedge.faults.scheduled_errors]
    return lines


def _component_lines(wedge: Wedge) -> tuple[list[str], dict[str, Any]]:
    """What ran, for the section and ``diagnosis.json`` (``topology/what_ran.py``)."""
    try:
        described = describe_components(wedge.topology)
        bypass = not_proxied(wedge.topology.spec)
    except Exception as exc:  # best effort: never hide the test's own failure
        return [f"components: could not be described ({type(exc).__name__}: {exc})"], {}
    lines = ["what ran (name: kind version (binary; how it started)):"]
    lines += [f"  {d.line()}" for d in described]
    lines += [f"  not through Toxiproxy: {line}" for line in bypass]
    return lines, {"components": [d.to_json() for d in described], "not_proxied": bypass}


def build_report(
    wedge: Wedge,
    *,
    error: BaseException | None = None,
    context: dict[str, Any] | None = None,
    extra_evidence: Callable[[Wedge, str], Sequence[str]] = lambda w, o: (),
    with_stacks: bool = True,
) -> tuple[str, dict[str, Any]]:
    """(section text, report data) for ``error``; ``context`` goes into ``diagnosis.json``."""
    moment = moment_of_failure(wedge, error)
    found = moment.diagnosis
    # A copy: the extra evidence must not change the Diagnosis object the test holds.
    diagnosis = dataclasses.replace(
        found, evidence=[*found.evidence, *extra_evidence(wedge, found.origin)]
    )
    lines = [f"moment: {moment.describe()}", diagnosis.render()]
    lines += _last_diagnose_line(wedge, moment)
    data: dict[str, Any] = {
        "origin": diagnosis.origin,
        "diagnosis": diagnosis,
        "moment": moment.to_json(),
    }
    since = current_window_start(wedge.faults)
    faults = scene_faults(wedge)
    data["oracle"] = locate(moment.snapshot, origin=diagnosis.origin, faults=faults, since=since)
    rows = watchdog_report(wedge, wedge.watchdogs)
    lines += _watchdog_lines(wedge, rows)
    components = ", ".join(f"{n}={s}" for n, s in moment.states.items())
    lines.append(f"components {moment.label}: {components}")
    lines += _fault_lines(wedge, moment)
    described = _component_lines(wedge)
    lines += described[0]
    data["components"] = described[1]
    stacks = None
    if with_stacks:
        with contextlib.suppress(Exception):
            stacks = dump_stacks(wedge.topology, timeout_s=3.0)
    if wedge.artifacts_dir is not None:
        samples = wedge.probe.samples() if wedge.probe else []
        summary = {"test": context or {}, "moment": moment.to_json(), **described[1]}
        if wedge.last_diagnosis is not None and wedge.last_diagnosis is not moment:
            summary["last_diagnose"] = wedge.last_diagnosis.to_json()
        path = write_artifacts(
            Path(wedge.artifacts_dir).absolute(),
            diagnosis,
            moment.snapshot,
            samples,
            wedge.faults.windows,
            [*rows, *[c.to_json() for c in wedge.clear_checks]],
            stacks=stacks,
            log_offsets=wedge.log_offsets,
            context=summary,
            link_rates=wedge.link_meter.rates() if wedge.link_meter else None,
            **_timeline_heading(wedge, moment, context),
        )
        data["artifacts"] = str(path)
        earlier = moment in (wedge.failure_moment, wedge.last_diagnosis)
        when = "; stacks.txt was taken at the report" if stacks and earlier else ""
        lines.append(f"artifacts: {path} ({ARTIFACT_FILES}{when})")
    elif stacks:
        lines.append(render_stacks(stacks))
    return "\n".join(lines), data


def _timeline_heading(
    wedge: Wedge, moment: Moment, context: dict[str, Any] | None
) -> dict[str, Any]:
    """The timeline's heading (the test and its failure) and its marks: the moment shown, the
    test's own last diagnose(), and the failure."""
    marks = [(moment.taken_at, f"diagnosis {moment.label}")]
    last = wedge.last_diagnosis
    if last is not None and last is not moment:
        marks.append((last.taken_at, "diagnose() in the test"))
    failure = (context or {}).get("failure")
    if failure:
        at = wedge.failure_moment.taken_at if wedge.failure_moment is not None else time.time()
        marks.append((at, "failure"))
    heading = {"title": (context or {}).get("nodeid"), "failure": failure, "marks": marks}
    return heading | {"started": wedge.started}  # the timeline's time 0


def keep_artifacts(wedge: Wedge, context: dict[str, Any] | None = None) -> Path | None:
    """For passing tests under --wedge-keep: the ledgers and timeline without stacks."""
    if wedge.artifacts_dir is None:
        return None
    _, data = build_report(wedge, with_stacks=False, context=context)
    return Path(data["artifacts"]) if "artifacts" in data else None


def failure_headline(error: BaseException | None) -> str:
    """The first line of the failure, as pytest shows it (``AssertionError: assert ...``)."""
    if error is None:
        return ""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first}"[:300] if first else type(error).__name__
