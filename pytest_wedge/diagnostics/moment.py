"""The evidence at one moment of a test: which faults were active, what state each component
was in, the snapshot and the diagnosis made on it.

A failure report must describe the moment the test failed, not the moment the report is
written: by then a ``with wedge.fault(...)`` block has reverted its fault, and a watchdog may
have cleared the wedge. So the handle takes a :class:`Moment` when an exception leaves a fault
block, and keeps the test's last ``diagnose()`` as one; the report says which one it shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.evidence.snapshot import Snapshot

if TYPE_CHECKING:
    from pytest_wedge.faults.base import Fault, FaultSet
    from pytest_wedge.load.ledger import ClientLedger
    from pytest_wedge.topology.running import Topology


def fault_label(fault: Fault) -> str:
    """``Pause(router)``: the fault's kind and target, as a test writes it."""
    return f"{type(fault).__name__}({fault.target})"


def active_fault_labels(faults: FaultSet) -> list[str]:
    """The faults active now, read from the windows: unlike ``FaultSet.active_faults`` this
    never raises a pending ``ScheduledFaultError`` (the report lists those separately)."""
    return [fault_label(w.fault) for w in list(faults.windows) if w.ended is None]


def current_window_start(faults: FaultSet) -> float | None:
    """The start of the latest fault window: requests that failed before it must not outvote
    the ones stuck now."""
    return max((w.started for w in list(faults.windows)), default=None)


def main_origin(ledger: ClientLedger) -> str:
    """The origin under test: ``harness`` when present, else the first origin that sent."""
    origins = ledger.origins()
    return "harness" if "harness" in origins or not origins else origins[0]


@dataclass
class Moment:
    """What was seen at one moment, taken before anything was reverted."""

    label: str  # "at failure", "at the test's diagnose()", "at the report"
    taken_at: float
    test_started: float
    faults: list[str]
    states: dict[str, str]
    snapshot: Snapshot
    diagnosis: Diagnosis
    error: BaseException | None = field(default=None, repr=False)

    def active(self) -> str:
        """``fault Pause(router) active`` (or ``no fault active``)."""
        if not self.faults:
            return "no fault active"
        return f"fault{'s' if len(self.faults) > 1 else ''} {', '.join(self.faults)} active"

    def describe(self) -> str:
        """``at failure, fault Pause(router) active (+3.2 s into the test)``."""
        return (
            f"{self.label}, {self.active()} (+{self.taken_at - self.test_started:.1f} s "
            "into the test)"
        )

    def caused(self, error: BaseException | None) -> bool:
        """True when ``error`` is the exception this moment was taken for, or raised from it."""
        seen: set[int] = set()
        while error is not None and id(error) not in seen:
            if error is self.error:
                return True
            seen.add(id(error))
            error = error.__cause__ or error.__context__
        return False

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "described": self.describe(),
            "taken_at": self.taken_at,
            "seconds_into_test": round(self.taken_at - self.test_started, 3),
            "active_faults": self.faults,
            "components": self.states,
            "location": self.diagnosis.location,
            "headline": self.diagnosis.headline(),
        }


def component_states(topology: Topology) -> dict[str, str]:
    """Each component's state by its runtime; one that cannot be read says why."""
    states = {}
    for name in topology.components:
        try:
            states[name] = str(topology.runtime.state(name))
        except Exception as exc:  # a report names what it cannot read
            states[name] = f"unknown ({type(exc).__name__})"
    return states
