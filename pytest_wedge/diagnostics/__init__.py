"""Diagnostics: evidence, the locator, the probe, stacks and the report/timeline artifacts.

``diagnose(wedge)`` answers "where is the wedge" for one origin: it collects a snapshot of
everything observable and hands it to the pure locator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_wedge.diagnostics.diagnosis import Diagnosis, RequestDetail
from pytest_wedge.diagnostics.evidence import Snapshot, collect
from pytest_wedge.diagnostics.locator import locate
from pytest_wedge.diagnostics.probe import Probe
from pytest_wedge.diagnostics.report import write_artifacts
from pytest_wedge.diagnostics.stacks import dump_stacks
from pytest_wedge.diagnostics.timeline import render_timeline

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge


def diagnose(
    wedge: Wedge,
    origin: str = "harness",
    overdue_after_s: float = 1.0,
    *,
    window_s: float = 10.0,
    probe: Probe | None = None,
) -> Diagnosis:
    """Collect a snapshot of ``wedge``'s topology and locate ``origin``'s wedge.

    With a running ``probe`` its latest sample is the earlier point of the per-origin token
    rates, which saves a second read of the stubs.
    """
    before = probe.latest(min_age_s=0.2) if probe is not None else None
    return locate(collect(wedge, before=before), origin=origin,
                  overdue_after_s=overdue_after_s, window_s=window_s)  # fmt: skip


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
