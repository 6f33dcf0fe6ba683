"""The probe: a background thread sampling every component on an interval, cheaply.

A sample is a :class:`Snapshot` without ledgers (the expensive part). Every tick reads the stub
states and component states; every ``slow_every``-th tick (a *slow* sample) also reads what an
operator sees: the engines' and the router's metrics and Toxiproxy's byte counters per link
(never the toxic configuration). The bounded series feeds the timeline; the latest slow sample is
the "before" point of rates, and the slow sample from before a wedge is the start of the
window over which link traffic and router counters are compared.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Self

from pytest_wedge.evidence.fetch import gather
from pytest_wedge.evidence.observe import observed_jobs
from pytest_wedge.evidence.snapshot import Snapshot, empty_snapshot, fill, truth_jobs

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


class Probe:
    """``Probe(topology, interval_s=0.1).start()`` ... ``.stop()``; a context manager."""

    def __init__(
        self,
        topology: Topology,
        interval_s: float = 0.1,
        *,
        maxlen: int = 3000,
        timeout_s: float = 0.2,
        slow_every: int = 5,
    ) -> None:
        self.topology = topology
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._samples: deque[Snapshot] = deque(maxlen=maxlen)
        self._slow: deque[Snapshot] = deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Two workers, not one per fetch: the probe shares the interpreter with the harness it
        # watches, and every extra thread competing for the GIL slowed the harness (13 % with
        # eight). Two still let a hung endpoint (a paused router) time out beside the others.
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="wedge-probe")
        self.errors = 0
        # Stub states (per-origin tokens, queues) change every tick; the router's metrics and
        # the proxies' state are costlier to render and change rarely, so only every
        # ``slow_every``-th sample reads them. At 10 Hz everything cost the harness ~11 %.
        self.slow_every = max(1, slow_every)
        self._ticks = 0

    def sample(self) -> Snapshot:
        """Take one sample now (also what the thread does each tick)."""
        started = time.time()
        snapshot = empty_snapshot(self.topology)
        slow = not self._ticks % self.slow_every
        self._ticks += 1
        jobs, timeouts = truth_jobs(self.topology, self.timeout_s, ledgers=False,
                                    ledger_timeout_s=self.timeout_s, toxics=False)  # fmt: skip
        if slow:
            more, more_timeouts = observed_jobs(self.topology, self.timeout_s, extras=False)
            jobs, timeouts = jobs | more, timeouts | more_timeouts
        results, failed = gather(jobs, timeouts, self._pool)
        fill(snapshot, self.topology, results, failed)
        snapshot.taken_at = time.time()
        assert snapshot.observed is not None
        snapshot.observed.taken_at = snapshot.taken_at
        snapshot.collect_s = snapshot.taken_at - started
        if slow:
            with self._lock:
                self._slow.append(snapshot)
        return snapshot

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                snapshot = self.sample()
            except Exception:  # a probe must never take the test down; count and go on
                self.errors += 1
            else:
                with self._lock:
                    self._samples.append(snapshot)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="wedge-probe", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def latest(self, min_age_s: float = 0.0) -> Snapshot | None:
        """The newest sample at least ``min_age_s`` old (a rate needs some distance)."""
        cutoff = time.time() - min_age_s
        with self._lock:
            for snapshot in reversed(self._samples):
                if snapshot.taken_at <= cutoff:
                    return snapshot
        return None

    def latest_slow(self, min_age_s: float = 0.0) -> Snapshot | None:
        """The newest slow sample (engine, router and link counters) at least ``min_age_s``
        old."""
        cutoff = time.time() - min_age_s
        with self._lock:
            return next((s for s in reversed(self._slow) if s.taken_at <= cutoff), None)

    def slow_before(self, at: float) -> Snapshot | None:
        """The newest slow sample taken at or before ``at``, else the oldest one kept."""
        with self._lock:
            found = next((s for s in reversed(self._slow) if s.taken_at <= at), None)
            return found or (self._slow[0] if self._slow else None)

    def samples(self) -> list[Snapshot]:
        with self._lock:
            return list(self._samples)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
