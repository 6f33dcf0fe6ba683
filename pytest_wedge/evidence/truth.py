"""What only the test knows: the ground truth that scores the blind locator. Pure data.

A real deployment has none of this: engines keep no per-request ledger, a wedge announces no
toxic, and nobody hands the operator a list of what was paused. The oracle (the ledger walk of
:mod:`pytest_wedge.diagnostics.hops`) reads it; the blind locator never can (its package may
import :mod:`pytest_wedge.evidence.observed` only, which a unit test checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class GroundTruth:
    """Stub ledgers and states, toxic configurations, the runtime's view, the fault windows."""

    ledgers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stub_states: dict[str, dict[str, Any]] = field(default_factory=dict)
    # link -> {"enabled": bool, "toxics": [...]} as Toxiproxy's API describes its configuration
    toxics: dict[str, dict[str, Any]] = field(default_factory=dict)
    # component -> the runtime's own word: running, paused, exited, absent
    runtime_states: dict[str, str] = field(default_factory=dict)
    # {"description", "target", "started", "ended"} per fault window
    faults: list[dict[str, Any]] = field(default_factory=list)

    def injected_at(self, at: float) -> list[str]:
        """The targets of the faults active at ``at``."""
        return [
            str(f["target"])
            for f in self.faults
            if f["started"] <= at and (f.get("ended") is None or f["ended"] >= at)
        ]


def window_dict(window: Any) -> dict[str, Any]:
    """A fault window (``FaultWindow`` or its dict) as plain data."""
    if isinstance(window, dict):
        return dict(window)
    fault = window.fault
    return {
        "description": fault.describe(),
        "target": str(fault.target),
        "started": window.started,
        "ended": window.ended,
    }
