"""Diagnostics: two locators (blind and oracle), the diagnosis, and the artifacts.

``diagnose(scene)`` collects a snapshot (``pytest_wedge.evidence``) and hands its observed part
to the blind locator, which sees only what an operator of a real deployment sees. The oracle
walks the ground truth (stub ledgers, toxics, the runtime's view) and scores it: when the two
disagree, the diagnosis carries the oracle's answer too.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from pytest_wedge.diagnostics.artifacts import write_artifacts
from pytest_wedge.diagnostics.blind import locate_blind
from pytest_wedge.diagnostics.diagnosis import Diagnosis, OracleAnswer
from pytest_wedge.diagnostics.moment import (
    Moment,
    active_fault_labels,
    current_window_start,
    main_origin,
)
from pytest_wedge.diagnostics.oracle import locate
from pytest_wedge.diagnostics.timeline import render_timeline
from pytest_wedge.evidence.probe import Probe
from pytest_wedge.evidence.snapshot import Snapshot, collect, component_states
from pytest_wedge.evidence.stacks import dump_stacks

if TYPE_CHECKING:
    from pytest_wedge.views import ActiveScene, Scene

__all__ = [
    "Diagnosis",
    "Moment",
    "Probe",
    "Snapshot",
    "capture_moment",
    "collect",
    "diagnose",
    "dump_stacks",
    "locate",
    "locate_blind",
    "render_timeline",
    "write_artifacts",
]
Locator = Literal["blind", "oracle"]
# Without a fault-window start, link traffic and router counters are compared over this span.
TRAFFIC_WINDOW_S = 3.0


def diagnose(
    scene: Scene,
    origin: str = "harness",
    overdue_after_s: float = 1.0,
    *,
    window_s: float = 10.0,
    probe: Probe | None = None,
    since: float | None = None,
    locator: Locator = "blind",
    oracle: bool = True,
    snapshot: Snapshot | None = None,
) -> Diagnosis:
    """Collect a snapshot of ``scene`` (anything with a ``topology`` and a client ``ledger``,
    such as the ``wedge`` handle, whose ``probe`` gives the earlier samples) and locate
    ``origin``'s wedge. ``since`` is the current fault window's start: failures that ended
    before it do not outvote requests stuck now. ``oracle=False`` skips the ground truth
    (faster); otherwise the oracle's answer is attached when it disagrees."""
    if snapshot is None:
        snapshot = _snapshot(scene, overdue_after_s, probe, since, locator == "oracle" or oracle)
    if locator == "oracle" or snapshot.observed is None:
        return locate(snapshot, origin, overdue_after_s, window_s, since=since)
    blind = locate_blind(snapshot.observed, origin, overdue_after_s, window_s=window_s, since=since)
    if snapshot.ledgerless:
        # Said in the report, so nobody reads a location from public endpoints as ledger-backed.
        blind.evidence.insert(
            0,
            f"no worker ledgers: {', '.join(snapshot.ledgerless)} run "
            "ledger-less (no ledger, no control API); located from public "
            "endpoints only, and the oracle did not score it",
        )
    elif oracle and snapshot.components:  # the ground truth was read
        truth = locate(snapshot, origin, overdue_after_s, window_s, since=since)
        blind.watchdogs = truth.watchdogs  # the stubs' own firings: for the report, not the locator
        if truth.location != blind.location:
            blind.oracle = OracleAnswer(
                location=truth.location,
                headline=truth.headline(),
                stuck=truth.stuck,
                evidence=truth.evidence[:6],
            )
    return blind


def _snapshot(
    scene: Scene, overdue_after_s: float, probe: Probe | None, since: float | None, truth: bool
) -> Snapshot:
    """The probe's samples give the earlier points of counters and link traffic."""
    probe = probe if probe is not None else getattr(scene, "probe", None)
    start = since if since is not None else time.time() - max(TRAFFIC_WINDOW_S, 3 * overdue_after_s)
    before = probe.latest_slow(min_age_s=0.2) if probe is not None else None
    window = probe.slow_before(start) if probe is not None else None
    return collect(scene.topology, scene.ledger, before=before, window=window, truth=truth)


def capture_moment(
    scene: ActiveScene,
    label: str,
    *,
    test_started: float,
    origin: str | None = None,
    overdue_after_s: float = 1.0,
    error: BaseException | None = None,
) -> Moment:
    """Everything a report needs about *now*: active faults and component states (read
    first, before the collection lets anything change), the snapshot, and the diagnosis of
    ``origin`` (default: the origin under test) since the current fault."""
    faults = active_fault_labels(scene.faults)
    states = component_states(scene.topology)
    since = current_window_start(scene.faults)
    snapshot = _snapshot(scene, overdue_after_s, None, since, True)
    origin = origin or main_origin(scene.ledger)
    diagnosis = diagnose(scene, origin, overdue_after_s, since=since, snapshot=snapshot)
    return Moment(
        label, snapshot.taken_at, test_started, faults, states, snapshot, diagnosis, error
    )
