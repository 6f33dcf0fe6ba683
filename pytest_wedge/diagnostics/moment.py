"""The evidence at one moment of a test (active faults, component states, snapshot, diagnosis),
taken before a fault block reverts its fault or a watchdog clears the wedge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.evidence.snapshot import Snapshot

if TYPE_CHECKING:
    from pytest_wedge.faults.fault import Fault, FaultSet
    from pytest_wedge.load.client_ledger import ClientLedger


def fault_label(fault: Fault) -> str:
    """``Pause(router)``: the fault's kind and target, as a test writes it."""
    return f"{type(fault).__name__}({fault.target})"


def active_fault_labels(faults: FaultSet) -> list[str]:
    """The faults active now; unlike ``FaultSet.active_faults``, never raises."""
    return [fault_label(w.fault) for w in list(faults.windows) if w.ended is None]


def current_window_start(faults: FaultSet) -> float | None:
    """The start of the latest fault window."""
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

    def to_json(self) -> dict[str, object]:
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
