"""The probe's samples as the test process keeps them: each still pickled as the sampler sent
it, unpickled when first read.

The probe's reader thread shares the interpreter lock with the harness, and unpickling every
sample as it came (five every half second) was most of what the probe cost this process,
while most samples are never read: the timeline and the locators read them only when a test
ends or a wedge is diagnosed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pytest_wedge.evidence.frames import sample_of
from pytest_wedge.evidence.snapshot import Snapshot

# What a slow sample gets from the test process: the runtime's view of the components, or why
# it could not be read.
Components = dict[str, str] | str | None


class KeptSample:
    """One sample: its moment, and its snapshot, pickled in the sampler's frame until first
    read (with the runtime's view of the components to add then)."""

    __slots__ = ("_components", "_frame", "_snapshot", "taken_at")

    def __init__(
        self,
        taken_at: float,
        *,
        frame: tuple[Any, ...] | None = None,
        components: Components = None,
        snapshot: Snapshot | None = None,
    ) -> None:
        self.taken_at = taken_at
        self._frame, self._components, self._snapshot = frame, components, snapshot

    def snapshot(self) -> Snapshot:
        """The sample (``Exception`` from unpickling a frame that does not hold one). Two
        threads may both unpickle it at first; either result is the same sample."""
        snapshot, frame = self._snapshot, self._frame
        if snapshot is not None:
            return snapshot
        if frame is None:  # another thread unpickled it meanwhile (it sets the snapshot first)
            assert self._snapshot is not None
            return self._snapshot
        snapshot = sample_of(frame)
        if isinstance(self._components, str):
            snapshot.unanswered["components"] = self._components
        elif self._components is not None:
            snapshot.components = self._components
        self._snapshot = snapshot
        self._frame = None
        return snapshot


class SampleStore:
    """Every sample and the slow ones, each bounded to ``maxlen``; thread-safe. A sample that
    does not unpickle is reported to ``on_error`` and left out. Samples are unpickled outside
    the lock: the probe's reader adds under it, and a reader held up by thousands of unpickles
    would leave the sampler blocked on a full pipe."""

    def __init__(self, maxlen: int, on_error: Callable[[str], None]) -> None:
        self._all: deque[KeptSample] = deque(maxlen=maxlen)
        self._slow: deque[KeptSample] = deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self._on_error = on_error

    def __len__(self) -> int:
        return len(self._all)

    def add(self, sample: KeptSample, *, slow: bool) -> None:
        with self._lock:
            self._all.append(sample)
            if slow:
                self._slow.append(sample)

    def add_first(self, snapshot: Snapshot) -> None:
        """A slow sample taken in the test process, kept only if none came before it (so the
        series stays in order)."""
        with self._lock:
            if not self._all:
                sample = KeptSample(snapshot.taken_at, snapshot=snapshot)
                self._all.append(sample)
                self._slow.append(sample)

    def _decoded(self, kept: Iterable[KeptSample]) -> Iterator[Snapshot]:
        for one in kept:
            try:
                yield one.snapshot()
            except Exception as exc:
                self._on_error(f"undecodable sample: {type(exc).__name__}: {exc}")

    def _kept(self, *, slow: bool) -> list[KeptSample]:
        with self._lock:
            return list(self._slow if slow else self._all)

    def latest(self, cutoff: float, *, slow: bool) -> Snapshot | None:
        """The newest sample (slow one) taken at or before ``cutoff``."""
        kept = reversed(self._kept(slow=slow))
        return next(self._decoded(k for k in kept if k.taken_at <= cutoff), None)

    def oldest_slow(self) -> Snapshot | None:
        return next(self._decoded(self._kept(slow=True)), None)

    def samples(self, *, slow: bool = False) -> list[Snapshot]:
        return list(self._decoded(self._kept(slow=slow)))
