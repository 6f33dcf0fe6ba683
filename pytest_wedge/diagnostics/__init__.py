"""Diagnostics: two locators (blind and oracle), the diagnosis, and the artifacts.

``diagnose(scene)`` hands a snapshot's observed part to the blind locator (what an operator
sees); the oracle walks the ground truth and, when the two disagree, its answer rides along."""

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
    """Snapshot ``scene`` (with a ``topology``, a client ``ledger`` and maybe a ``probe``) and
    locate ``origin``'s wedge since ``since`` (the current fault window's start);
    ``oracle=False`` skips the ground truth, else the oracle's answer rides along on a
    disagreement."""
    if snapshot is None:
        snapshot = _snapshot(scene, overdue_after_s, probe, since, locator == "oracle" or oracle)
    if locator == "oracle" or snapshot.observed is None:
        return locate(snapshot, origin, overdue_after_s, window_s, since=since)
    blind = locate_blind(snapshot.observed, origin, overdue_after_s, window_s=window_s, since=since)
    if snapshot.ledgerless:
        # Said in the report, so nobody reads a location from public endpoints as ledger-backed.
        public = "located from public endpoints only, and the oracle did not score it"
        none = f"{', '.join(snapshot.ledgerless)} run ledger-less (no ledger, no control API)"
        blind.evidence.insert(0, f"no worker ledgers: {none}; {public}")
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
    """Active faults and component states (read first), the snapshot and the diagnosis of
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
