"""The probe: every component sampled once a second, in one thread of the test process.

A sample is a :class:`Snapshot` without ledgers: the stubs' states, the engines' and the
router's metrics, Toxiproxy's byte counters per link (never the toxic configuration) and the
runtime's view of each component. The diagnosis reads the newest one as the "before" point of
rates, and the one from before a wedge as the start of the window over which link traffic and
router counters are compared; the timeline reads them all. :meth:`Probe.mark` takes one at
once: a fault window opens with it (``handle.py``), so a window starts just before its fault.

Each sample is also handed to ``on_sample``: the handle's link meter takes its point there
(``links/rates.py``), in the same tick and before a mark waiting for the sample returns.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Self

from pytest_wedge.errors import WedgeError
from pytest_wedge.evidence.snapshot import Snapshot, read_servers

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology

__all__ = ["Probe", "ProbeError"]

# Each sample costs every server a GET and this process a Prometheus parse: once a second
# draws the timeline finely enough, and a fault window's start needs none (mark() takes it).
SLOW_INTERVAL_S = 1.0
# How long mark() waits for its sample before the fault goes ahead anyway (the window then
# starts at the last periodic sample): longer than a sample's slowest fetch (Toxiproxy's, 1 s),
# short enough not to hold up a watchdog's restart for long.
MARK_WAIT_S = 1.5


class ProbeError(WedgeError):
    """The probe's sampling thread died while the test ran."""


class Probe:
    """``Probe(topology).start()`` ... ``.stop()``; a context manager.

    A fetch that fails (a paused or dead component) is recorded in the sample's
    ``unanswered``; a sample that fails as a whole is counted in ``errors``. ``stop()`` raises
    :class:`ProbeError` (once) when the thread itself died; samples taken until then stay.
    """

    def __init__(
        self,
        topology: Topology,
        interval_s: float = SLOW_INTERVAL_S,
        *,
        maxlen: int = 3000,
        timeout_s: float = 0.2,
        on_sample: Callable[[Snapshot], object] | None = None,
    ) -> None:
        self.topology = topology
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.on_sample = on_sample
        self.errors = 0
        self.last_error: str | None = None
        self.failure: ProbeError | None = None
        self._failure_raised = False
        self._samples: deque[Snapshot] = deque(maxlen=maxlen)
        self._changed = threading.Condition()
        self._asked_at = 0.0  # when mark() last asked for a sample
        self._tick_at = 0.0  # when the last sample was done (or failed)
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    def start(self) -> Self:
        """The first sample is taken here, in the caller's thread: the samples (and the link
        meter's points) start with the test, before any load it sends."""
        if self._thread is None:
            self._pool = ThreadPoolExecutor(32, thread_name_prefix="wedge-probe-fetch")
            self._tick()
            self._thread = threading.Thread(target=self._run, name="wedge-probe", daemon=True)
            self._thread.start()
        return self

    def sample(self) -> Snapshot:
        """One sample, taken now in the calling thread."""
        started = time.time()
        snapshot = read_servers(
            self.topology,
            self.timeout_s,
            truth=True,
            ledgers=False,
            ledger_timeout_s=self.timeout_s,
            toxics=False,
            extras=False,
            pool=self._pool,
        )
        assert snapshot.observed is not None
        snapshot.taken_at = snapshot.observed.taken_at = time.time()
        snapshot.collect_s = snapshot.taken_at - started
        return snapshot

    def _run(self) -> None:
        try:
            due = time.monotonic() + self.interval_s  # start() took the first one
            while self._wait(due):
                due = time.monotonic() + self.interval_s
                self._tick()
        except BaseException as exc:
            self.failure = ProbeError(
                "The probe's sampling thread died while the test ran; samples stopped there",
                facts={
                    "error": f"{type(exc).__name__}: {exc}",
                    "samples kept": len(self._samples),
                },
                fix="this is a bug in pytest-wedge: report it with the error above",
            )
            with self._changed:
                self._stopping = True
                self._changed.notify_all()

    def _wait(self, due: float) -> bool:
        """Until ``due`` (``time.monotonic()``) or a mark; False once stopping."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._stopping or self._asked_at > self._tick_at or time.monotonic() >= due,
                max(0.0, due - time.monotonic()),
            )
            return not self._stopping

    def _tick(self) -> None:
        snapshot: Snapshot | None = None
        try:
            snapshot = self.sample()
        except Exception as exc:  # one failed sample is counted, never the end of the probe
            self._count_error(exc)
        if snapshot is not None and self.on_sample is not None:
            try:  # before the notify: a mark's fault goes ahead only once the point is taken
                self.on_sample(snapshot)
            except Exception as exc:
                self._count_error(exc)
        with self._changed:
            if snapshot is not None:
                self._samples.append(snapshot)
            self._tick_at = snapshot.taken_at if snapshot is not None else time.time()
            self._changed.notify_all()

    def _count_error(self, exc: Exception) -> None:
        self.errors += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:500]

    def mark(self, timeout_s: float = MARK_WAIT_S) -> float | None:
        """Take a sample now and return its moment, once this probe has it (so
        :meth:`slow_before` a moment later finds it); None when the probe is not running or no
        sample came within ``timeout_s``. Called as a fault window opens: the window's
        counters then start just before the fault."""
        asked = time.time()
        with self._changed:
            if self._thread is None or self._stopping:
                return None
            self._asked_at = max(self._asked_at, asked)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._tick_at >= asked or self._stopping, timeout_s)
            newest = self._samples[-1].taken_at if self._samples else 0.0
            return newest if newest >= asked else None

    def stop(self, timeout_s: float = 2.0) -> None:
        """End the sampling (a sample under way may take up to ``timeout_s`` to finish)."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        if self.failure is not None and not self._failure_raised:
            self._failure_raised = True
            raise self.failure

    # -- the samples -------------------------------------------------------------------------

    def samples(self) -> list[Snapshot]:
        with self._changed:
            return list(self._samples)

    def latest_slow(self, min_age_s: float = 0.0) -> Snapshot | None:
        """The newest sample at least ``min_age_s`` old (a rate needs some distance)."""
        return self._newest_at_or_before(time.time() - min_age_s)

    def slow_before(self, at: float) -> Snapshot | None:
        """The newest sample taken at or before ``at``, else the oldest one kept."""
        found = self._newest_at_or_before(at)
        if found is None:
            with self._changed:
                found = self._samples[0] if self._samples else None
        return found

    def _newest_at_or_before(self, cutoff: float) -> Snapshot | None:
        return next((s for s in reversed(self.samples()) if s.taken_at <= cutoff), None)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
            return
        with contextlib.suppress(ProbeError):  # the block's own error is the one to see
            self.stop()
