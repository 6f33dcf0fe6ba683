"""The fault interface: one small frozen dataclass per failure, applied and reverted.
Reverting is idempotent; :class:`FaultSet` reverts every fault still active at teardown.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_wedge.errors import WedgeError
from pytest_wedge.spec.component import check_field_types

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology

# Per process; a topology (its proxies and stubs) never outlives the process that made it.
_instance_ids = itertools.count(1)


def _next_instance_id() -> int:
    return next(_instance_ids)


@dataclass(frozen=True)
class Fault(ABC):
    """One injectable failure. ``instance_id`` names it where equal faults live side by side
    (toxic names, stub fault names) and takes no part in equality."""

    target: str
    """The component (``router``, ``prefill-0``, ``decode-1``) or link (``client->router``,
    ``decode-0->prefill-0``) it acts on, as the topology names it."""
    instance_id: int = field(
        default_factory=_next_instance_id, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        # Every field against its annotation: a wrong type fails here, naming the field, not
        # later in a stub or in Toxiproxy. Scenario files get the same check through this.
        check_field_types(self)

    @abstractmethod
    def apply(self, topology: Topology) -> None: ...

    def revert(self, topology: Topology) -> None:  # noqa: B027 - one-shot faults revert nothing
        """Undo the fault. Must be idempotent: it may run twice, or after a failed apply."""

    def describe(self) -> str:
        return f"{type(self).__name__} on {self.target}"

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        """What shows it took effect (``"router: 1 process stopped (T)"``), read right after
        ``apply``; raise :class:`FaultNotApplied` when it did not. None: nothing to read."""
        return None


class FaultNotApplied(WedgeError, AssertionError):
    """A fault was applied and did not take effect: a run that trusted it would test nothing."""

    def __init__(self, fault: Fault, expected: str, seen: str, fix: str = "") -> None:
        super().__init__(
            f"{fault.describe()} did not take effect",
            facts={"expected": expected, "seen": seen},
            fix=fix or "check that the target is up and is the one you meant",
        )


@dataclass
class FaultWindow:
    """When a fault was active, in wall-clock seconds (for the timeline and the diagnosis),
    and what showed it took effect, when."""

    fault: Fault
    started: float
    ended: float | None = None
    verified_at: float | None = None
    verified: str = ""


@dataclass(frozen=True)
class ScheduledError:
    """A scheduled apply or revert that raised in its timer thread."""

    fault: Fault
    action: str  # "apply" or "revert"
    at_s: float  # seconds after schedule() was called
    error: BaseException

    def __str__(self) -> str:
        return (
            f"scheduled {self.action} of {self.fault.describe()} at +{self.at_s:g} s "
            f"failed: {type(self.error).__name__}: {self.error}"
        )


class ScheduledFaultError(WedgeError):
    """A fault scheduled with ``FaultSet.schedule`` could not be applied or reverted."""

    def __init__(self, errors: list[ScheduledError]) -> None:
        self.errors = errors
        super().__init__(
            f"{len(errors)} scheduled fault action(s) failed in the background",
            facts={f"error {i}": str(e) for i, e in enumerate(errors, 1)},
            fix="check the fault's target and arguments; the first error's traceback is chained",
        )
        self.__cause__ = errors[0].error


# Long enough for a scheduled Restart to finish, short enough that a stuck one is reported.
JOIN_TIMEOUT_S = 60.0


@dataclass
class FaultSet:
    """The faults applied to one topology during one test. A scheduled action that fails on
    its timer thread is raised in the test's thread by the next :meth:`apply` or
    :meth:`active_faults`, or returned by :meth:`revert_all`."""

    topology: Topology
    windows: list[FaultWindow] = field(default_factory=list)
    # Called as each fault window opens, before the fault: the handle's probe takes a sample
    # there (``Probe.mark``), so the window's counters start just before the fault.
    before_window: Callable[[], object] | None = None
    _timers: list[threading.Timer] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _scheduled_errors: list[ScheduledError] = field(default_factory=list)
    _raised: int = 0  # how many of _scheduled_errors the test thread has seen raised
    # The thread that made the set runs the test; watchdog threads also call apply(), and an
    # error raised there would be swallowed by the watchdog instead of failing the test.
    _owner: int = field(default_factory=threading.get_ident)

    def apply(self, fault: Fault) -> Fault:
        self._raise_scheduled_errors()
        self._apply(fault)
        return fault

    def _apply(self, fault: Fault) -> None:
        if self.before_window is not None:
            self.before_window()
        window = FaultWindow(fault, time.time())
        with self._lock:
            self.windows.append(window)
        try:
            fault.apply(self.topology)
            seen = fault.verify(self.topology, window.started)
            window.verified_at, window.verified = time.time(), seen or ""
        except BaseException:
            # Undo what part of it took effect; the apply error is the one to report.
            with contextlib.suppress(Exception):
                self.revert(fault)
            raise

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
        """Apply ``fault`` ``at_s`` seconds from now and revert it ``for_s`` seconds later.

        At 0 s it is applied here, before this returns: on a loaded machine a timer thread can
        start late, and load started next would then run ahead of the fault."""
        if at_s <= 0:
            self._apply(fault)
        else:
            self._start_timer(at_s, "apply", fault, self._apply)
        if for_s is not None:
            self._start_timer(at_s + for_s, "revert", fault, self.revert)

    def _start_timer(
        self, at_s: float, action: str, fault: Fault, run: Callable[[Fault], None]
    ) -> None:
        def guarded() -> None:
            try:
                run(fault)
            except Exception as exc:  # a timer thread has nobody to raise to: record it
                with self._lock:
                    self._scheduled_errors.append(ScheduledError(fault, action, at_s, exc))

        timer = threading.Timer(at_s, guarded)
        timer.name = f"wedge-{action}-{type(fault).__name__}"
        timer.daemon = True
        with self._lock:
            self._timers.append(timer)
        timer.start()

    def wait_scheduled(self, timeout_s: float = JOIN_TIMEOUT_S) -> bool:
        """Wait until every scheduled apply and revert has run; False if one is still due."""
        deadline = time.monotonic() + timeout_s
        for timer in list(self._timers):
            timer.join(max(0.0, deadline - time.monotonic()))
        return not any(timer.is_alive() for timer in self._timers)

    @property
    def scheduled_errors(self) -> list[ScheduledError]:
        """Every scheduled apply or revert that failed so far (raised or not)."""
        with self._lock:
            return list(self._scheduled_errors)

    def _raise_scheduled_errors(self) -> None:
        if threading.get_ident() != self._owner:
            return
        with self._lock:
            fresh = self._scheduled_errors[self._raised :]
            self._raised = len(self._scheduled_errors)
        if fresh:
            raise ScheduledFaultError(fresh)

    def active_faults(self) -> list[Fault]:
        self._raise_scheduled_errors()
        return [w.fault for w in self.windows if w.ended is None]

    def revert_all(self) -> list[str]:
        """Revert everything still active; returns the errors (teardown must not stop early).

        The errors include every scheduled apply or revert that failed and was not raised yet.
        """
        for timer in self._timers:
            timer.cancel()
        errors: list[str] = []
        # A timer already running its apply would otherwise apply after this revert.
        if not self.wait_scheduled():
            errors.append(f"a scheduled fault action still ran after {JOIN_TIMEOUT_S:g} s")
        for fault in reversed([w.fault for w in self.windows if w.ended is None]):
            try:
                self.revert(fault)
            except Exception as exc:
                errors.append(f"{fault.describe()}: {exc}")
        with self._lock:
            errors += [str(e) for e in self._scheduled_errors[self._raised :]]
        return errors
