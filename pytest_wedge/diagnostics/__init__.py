"""Diagnostics: the locator (pure), the diagnosis, and the artifacts (JSON, timeline).

``diagnose(scene)`` answers "where is the wedge" for one origin: it collects a snapshot of
everything observable (``pytest_wedge.evidence``) and hands it to the pure locator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_wedge.diagnostics.artifacts import write_artifacts
from pytest_wedge.diagnostics.diagnosis import Diagnosis, RequestDetail
from pytest_wedge.diagnostics.locator import locate
from pytest_wedge.diagnostics.timeline import render_timeline
from pytest_wedge.evidence.probe import Probe
from pytest_wedge.evidence.snapshot import Snapshot, collect
from pytest_wedge.evidence.stacks import dump_stacks

if TYPE_CHECKING:
    from pytest_wedge.scene import Scene


def diagnose(
    scene: Scene,
    origin: str = "harness",
    overdue_after_s: float = 1.0,
    *,
    window_s: float = 10.0,
    probe: Probe | None = None,
) -> Diagnosis:
    """Collect a snapshot of ``scene``'s topology and locate ``origin``'s wedge.

    ``scene`` is anything with a ``topology`` and a client ``ledger`` (the ``wedge`` handle
    is one). With a running ``probe`` its latest sample is the earlier point of the
    per-origin token rates, which saves a second read of the stubs.
    """
    before = probe.latest(min_age_s=0.2) if probe is not None else None
    snapshot = collect(scene.topology, scene.ledger, before=before)
    return locate(snapshot, origin=origin, overdue_after_s=overdue_after_s, window_s=window_s)


__all__ = [
    "Diagnosis",
    "Probe",
    "RequestDetail",
    "Snapshot",
    "collect",
    "diagnose",
    "dump_stacks",
    "locate",
    "render_timeline",
    "write_artifacts",
]
