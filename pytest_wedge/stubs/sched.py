"""Scheduling primitives: running slots, releasable waits, a throughput window."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .worker_ledger import Entry

T = TypeVar("T")


class Released(Exception):
    """A watchdog or /control/reset ended the wait the request was stuck in."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def until_released(entry: Entry, aw: Awaitable[T]) -> T:
    """Await aw unless the entry is released first; then raise Released."""
    if entry.release.is_set():
        if asyncio.iscoroutine(aw):
            aw.close()
        raise Released(entry.release_reason)
    task = asyncio.ensure_future(aw)
    rel = asyncio.ensure_future(entry.release.wait())
    try:
        await asyncio.wait((task, rel), return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Cancelling the pending side is what closes an abandoned KV fetch connection.
        for fut in (task, rel):
            if not fut.done():
                fut.cancel()
            # An outcome nobody will read must not be logged as "never retrieved".
            fut.add_done_callback(_consume)
    if task.done() and not task.cancelled():
        return task.result()
    raise Released(entry.release_reason)


def _consume(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


async def hold(entry: Entry) -> None:
    """Park forever: the request stays open until something releases it."""
    await entry.release.wait()
    raise Released(entry.release_reason)


async def stall(
    entry: Entry, stalled: Callable[[], bool], changed: Callable[[], asyncio.Event]
) -> None:
    """Hold the request while ``stalled()`` holds, then let it go on where it stopped.

    ``changed()`` is the event set at the next change of the faults; each change re-checks,
    so reverting the fault (or the end of its window) resumes the request at once, as a real
    scheduler that unblocks runs its batch at the next step. A release still ends it.
    """
    while stalled():
        await until_released(entry, changed().wait())
        if entry.release.is_set():
            # A reset clears the faults and releases in one step: the release wins.
            raise Released(entry.release_reason)


class SlotPool:
    """FIFO admission to running slots with a capacity that may change at run time."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def set_capacity(self, capacity: int) -> None:
        self.capacity = capacity
        self._wake()

    def try_acquire(self) -> bool:
        if self.used < self.capacity and not self._waiters:
            self.used += 1
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was handed over just as we gave up
            else:
                self._waiters.remove(fut)
            raise

    def release(self) -> None:
        self.used -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.used < self.capacity:
            fut = self._waiters.popleft()
            if not fut.done():
                self.used += 1
                fut.set_result(None)


class ThroughputWindow:
    """Tokens per second over the last second, in 100 ms buckets, cheap per token."""

    BUCKET_S = 0.1
    BUCKETS = 10

    def __init__(self) -> None:
        self._counts: deque[tuple[int, int]] = deque()

    def add(self, n: int, now: float | None = None) -> None:
        bucket = int((time.monotonic() if now is None else now) / self.BUCKET_S)
        if self._counts and self._counts[-1][0] == bucket:
            self._counts[-1] = (bucket, self._counts[-1][1] + n)
        else:
            self._counts.append((bucket, n))
            while len(self._counts) > self.BUCKETS + 1:
                self._counts.popleft()

    def rate(self, now: float | None = None) -> float:
        bucket = int((time.monotonic() if now is None else now) / self.BUCKET_S)
        oldest = bucket - self.BUCKETS + 1
        total = sum(n for b, n in self._counts if b >= oldest)
        return total / (self.BUCKETS * self.BUCKET_S)
