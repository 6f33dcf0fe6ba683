"""Diagnostics: two locators (blind and oracle), the diagnosis, and the artifacts.

``diagnose(scene)`` hands a snapshot's observed part to the blind locator (what an operator
sees); the oracle walks the ground truth and, when the two disagree, its answer rides along.
No fault window reaches the blind path: the counters are compared from the probe's ordinary
sample taken before the wedge's onset, which the client's own ledger shows."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from pytest_wedge.diagnostics.artifacts import write_artifacts
from pytest_wedge.diagnostics.blind import locate_blind
from pytest_wedge.diagnostics.blind.clientside import onset
from pytest_wedge.diagnostics.diagnosis import Diagnosis, OracleAnswer
from pytest_wedge.diagnostics.moment import (
    Moment,
    active_fault_labels,
    current_window_start,
    main_origin,
)
from pytest_wedge.diagnostics.oracle import locate, scene_faults
from pytest_wedge.diagnostics.timeline import render_timeline
from pytest_wedge.evidence.probe import Probe
from pytest_wedge.evidence.read_public import client_records
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
    "observe",
    "render_timeline",
    "write_artifacts",
]
Locator = Literal["blind", "oracle"]
# Without a wedge (no onset), link traffic and router counters are compared over this span.
TRAFFIC_WINDOW_S = 3.0
# A probe sample this much closer to its predecessor than the probe's interval was taken out of
# turn (as a fault window opened): the blind path reads only the ordinary, evenly spaced ones.
OUT_OF_TURN = 0.75


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
    locate ``origin``'s wedge. ``since`` (the current fault window's start) is the oracle's
    alone: the blind locator infers the onset. ``oracle=False`` skips the ground truth, else
    the oracle's answer rides along on a disagreement."""
    if snapshot is None:
        truth = locator == "oracle" or oracle
        snapshot = _snapshot(scene, origin, overdue_after_s, window_s, probe, truth)
    if locator == "oracle" or snapshot.observed is None:
        return locate(
            snapshot, origin, overdue_after_s, window_s, faults=scene_faults(scene), since=since
        )
    blind = locate_blind(snapshot.observed, origin, overdue_after_s, window_s=window_s)
    if snapshot.ledgerless:
        # Said in the report, so nobody reads a location from public endpoints as ledger-backed.
        public = "located from public endpoints only, and the oracle did not score it"
        none = f"{', '.join(snapshot.ledgerless)} run ledger-less (no ledger, no control API)"
        blind.evidence.insert(0, f"no worker ledgers: {none}; {public}")
    elif oracle and snapshot.components:  # the ground truth was read
        faults = scene_faults(scene)
        reference = locate(snapshot, origin, overdue_after_s, window_s, faults=faults, since=since)
        blind.watchdogs = reference.watchdogs  # the stubs' firings: for the report, not the locator
        if reference.location != blind.location:
            blind.oracle = OracleAnswer(
                location=reference.location,
                headline=reference.headline(),
                stuck=reference.stuck,
                evidence=reference.evidence[:6],
            )
    return blind


def observe(
    scene: Scene, origin: str = "harness", overdue_after_s: float = 1.0, window_s: float = 10.0
) -> Snapshot:
    """What an operator sees of ``scene`` now, with no ground truth read: the snapshot that
    ``diagnose(..., oracle=False)`` hands the blind locator."""
    return _snapshot(scene, origin, overdue_after_s, window_s, None, truth=False)


def ordinary_samples(probe: Probe) -> list[Snapshot]:
    """The probe's samples on its once-a-second beat, without the ones taken out of turn."""
    kept: list[Snapshot] = []
    for sample in probe.samples():
        if not kept or sample.taken_at - kept[-1].taken_at >= OUT_OF_TURN * probe.interval_s:
            kept.append(sample)
    return kept


def _snapshot(
    scene: Scene,
    origin: str,
    overdue_after_s: float,
    window_s: float,
    probe: Probe | None,
    truth: bool,
) -> Snapshot:
    """The probe's ordinary samples give the earlier points: the newest one for rates and
    gauges that hold, and the newest one from before the wedge's onset (as the client's ledger
    shows it) for the counters compared over the wedge."""
    probe = probe if probe is not None else getattr(scene, "probe", None)
    now = time.time()
    records = client_records(scene.ledger, now)
    began = onset(records, now, overdue_after_s, window_s, origin)
    start = began if began is not None else now - max(TRAFFIC_WINDOW_S, 3 * overdue_after_s)
    samples = ordinary_samples(probe) if probe is not None else []
    before = next((s for s in reversed(samples) if s.taken_at <= now - 0.2), None)
    window = next((s for s in reversed(samples) if s.taken_at <= start), None)
    if window is None and samples:
        window = samples[0]
    return collect(
        scene.topology,
        scene.ledger,
        before=before,
        window=window,
        truth=truth,
        client=(now, records),
        held_from=None if began is None else began + overdue_after_s,
    )


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
    ``origin`` (default: the origin under test). The fault window's start goes to the oracle
    only; the blind diagnosis infers the onset."""
    faults = active_fault_labels(scene.faults)
    states = component_states(scene.topology)
    since = current_window_start(scene.faults)
    origin = origin or main_origin(scene.ledger)
    snapshot = _snapshot(scene, origin, overdue_after_s, 10.0, None, True)
    diagnosis = diagnose(scene, origin, overdue_after_s, since=since, snapshot=snapshot)
    return Moment(
        label, snapshot.taken_at, test_started, faults, states, snapshot, diagnosis, error
    )
