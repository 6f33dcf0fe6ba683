"""The fault interface: one small frozen dataclass per failure, applied and reverted.

Like a Toxiproxy toxic, a fault is a tiny unit behind a one-method-pair interface. Reverting
is idempotent, and every fault still active is reverted at teardown by :class:`FaultSet`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


class Fault(ABC):
    """One injectable failure. Subclasses are ``@dataclass(frozen=True)``."""

    @property
    @abstractmethod
    def target(self) -> str:
        """The component or link this fault acts on (what a diagnosis should name)."""

    @abstractmethod
    def apply(self, topology: Topology) -> None: ...

    def revert(self, topology: Topology) -> None:  # noqa: B027 - one-shot faults revert nothing
        """Undo the fault. Must be idempotent: it may run twice, or after a failed apply."""

    def describe(self) -> str:
        return f"{type(self).__name__} on {self.target}"


@dataclass
class FaultWindow:
    """When a fault was active, in wall-clock seconds (for the timeline and the diagnosis)."""

    fault: Fault
    started: float
    ended: float | None = None


@dataclass
class FaultSet:
    """The faults applied to one topology during one test."""

    topology: Topology
    windows: list[FaultWindow] = field(default_factory=list)
    _timers: list[threading.Timer] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def apply(self, fault: Fault) -> Fault:
        with self._lock:
            window = FaultWindow(fault, time.time())
            self.windows.append(window)
        try:
            fault.apply(self.topology)
        except BaseException:
            # Undo what part of it took effect; the apply error is the one to report.
            with contextlib.suppress(Exception):
                self.revert(fault)
            raise
        return fault

    def revert(self, fault: Fault) -> None:
        with self._lock:
            for window in self.windows:
                if window.fault is fault and window.ended is None:
                    window.ended = time.time()
        fault.revert(self.topology)

    @contextlib.contextmanager
    def active(self, fault: Fault) -> Iterator[Fault]:
        """``with wedge.faults.active(Pause("router")):`` - reverted on exit, even on error."""
        self.apply(fault)
        try:
            yield fault
        finally:
            self.revert(fault)

    def schedule(self, fault: Fault, *, at_s: float = 0.0, for_s: float | None = None) -> None:
        """Apply ``fault`` ``at_s`` seconds from now and revert it ``for_s`` seconds later."""
        start = threading.Timer(at_s, self.apply, args=(fault,))
        start.daemon = True
        self._timers.append(start)
        start.start()
        if for_s is not None:
            stop = threading.Timer(at_s + for_s, self.revert, args=(fault,))
            stop.daemon = True
            self._timers.append(stop)
            stop.start()

    def active_faults(self) -> list[Fault]:
        return [w.fault for w in self.windows if w.ended is None]

    def revert_all(self) -> list[str]:
        """Revert everything still active; returns the errors (teardown must not stop early)."""
        for timer in self._timers:
            timer.cancel()
        errors: list[str] = []
        for fault in reversed(self.active_faults()):
            try:
                self.revert(fault)
            except Exception as exc:
                errors.append(f"{fault.describe()}: {exc}")
        return errors
