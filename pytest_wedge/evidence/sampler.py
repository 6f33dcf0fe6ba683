"""The probe's sampler: one sample, and the program that takes them out of the test process.

``python -m pytest_wedge.evidence.sampler`` reads one JSON line on stdin (the
:class:`~pytest_wedge.evidence.target.ProbeTarget` and the timing), then writes one frame per
tick on stdout (``evidence/frames.py``): ``("sample", slow, taken_at, pickled Snapshot)``
(:func:`~pytest_wedge.evidence.frames.sample_frame`: the probe unpickles a sample only when it
is read), or ``("error", text)`` for a tick that failed as a whole. A slow tick's frame goes
out at once, a fast tick's with the next slow one
(:class:`~pytest_wedge.evidence.frames.Outbox`). When the stubs' state streams carry all that
a fast sample reads, the program wakes on slow ticks only and fills in the fast samples between
them from the streamed states (:class:`FastFill`): on this machine a wake-up alone cost a
process about 0.3 ms, more than a fast sample's work.

With ``"links": true`` in its configuration it also meters every link's bytes (what
:class:`~pytest_wedge.links.rates.LinkMeter` does in a thread) on each slow tick, from
the Toxiproxy counters that tick reads anyway plus the kernel's count for open sockets. That
series stays here until asked for: an empty line on stdin is answered with one frame,
``("series", errors, [(time, totals), ...])``, so the test process pays nothing for it while
the test runs. A line ``mark`` asks for a slow sample now (:data:`MARK`): the probe asks for one
as a fault window opens, so the window starts at a sample taken just before the fault, not at
the last periodic one, up to a slow interval earlier. One program, one clock: a meter of its
own read Toxiproxy on a second clock and the kernel's socket table four times a second, and
cost as much CPU as this whole program (the kernel walks its entire TCP hash table for each
dump, about 1.7 ms here however few sockets match;
:class:`~pytest_wedge.links.sockdiag.SocketCounters` now dumps only after an accept).

Why a program of its own: in the test process the sampling (HTTP fetches, Prometheus parsing)
competed with the harness's event loop for the GIL, which cost the harness 12-20 % of its
throughput. Here it has its own interpreter, and its fetches run in one event loop
(``evidence/async_fetch.py``).

It never outlives the test process: it exits when its stdin reaches end of file, which happens
when the probe stops *and* when the test process dies in any way (even SIGKILL), and when its
stdout is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO

from pytest_wedge.evidence import async_fetch
from pytest_wedge.evidence.fetch import gather
from pytest_wedge.evidence.frames import Outbox, sample_frame
from pytest_wedge.evidence.read_public import Jobs, observed_jobs
from pytest_wedge.evidence.snapshot import Snapshot, empty_snapshot, fill, truth_jobs
from pytest_wedge.evidence.state_stream import StateStreams
from pytest_wedge.evidence.target import ProbeTarget, TargetTopology
from pytest_wedge.links.rates import (
    LINK_WALK_GAP_S,
    OpenSocketBytes,
    Totals,
    add_counters,
)

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology

PROGRAM = "pytest_wedge.evidence.sampler"
# Exit code for a bad first line (the probe and the sampler disagree on the protocol).
BAD_CONFIG = 2
# The job reading Toxiproxy's per-link counters (``observe.observed_jobs`` names it so too).
LINK_JOB = "link traffic"
LINK_SERIES_MAXLEN = 4000


def _jobs(
    topology: Topology, timeout_s: float, *, slow: bool, components: bool
) -> tuple[Jobs, dict[str, float]]:
    """Stub states every time; with ``slow``, also the engines' and the router's metrics and
    the links' byte counters. ``components=False`` leaves out the runtime's view (the sampler
    has no runtime; the probe adds it)."""
    jobs, timeouts = truth_jobs(
        topology, timeout_s, ledgers=False, ledger_timeout_s=timeout_s, toxics=False
    )
    if not components:
        del jobs["components"]
    if slow:
        more, more_timeouts = observed_jobs(topology, timeout_s, extras=False)
        jobs, timeouts = jobs | more, timeouts | more_timeouts
    return jobs, timeouts


def _snapshot(
    topology: Topology,
    started: float,
    results: dict[str, Any],
    failed: dict[str, str],
    taken_at: float | None = None,
) -> Snapshot:
    snapshot = empty_snapshot(topology)
    fill(snapshot, topology, results, failed)
    snapshot.taken_at = time.time() if taken_at is None else taken_at
    assert snapshot.observed is not None
    snapshot.observed.taken_at = snapshot.taken_at
    snapshot.collect_s = max(0.0, snapshot.taken_at - started)
    return snapshot


def sample_once(
    topology: Topology, pool: ThreadPoolExecutor, timeout_s: float, *, slow: bool
) -> Snapshot:
    """One sample taken in this process (httpx in ``pool``'s threads)."""
    started = time.time()
    jobs, timeouts = _jobs(topology, timeout_s, slow=slow, components=True)
    return _snapshot(topology, started, *gather(jobs, timeouts, pool))


class FastFill:
    """The fast samples between slow ones, read back from the states the stubs streamed (when
    every fast job is a streamed stub state: see :func:`streams_cover_fast_ticks`), one per
    interval since the last sample."""

    def __init__(self, topology: Topology, streams: StateStreams, interval_s: float) -> None:
        self.topology, self.streams, self.interval_s = topology, streams, interval_s
        self.since: float | None = None  # the moment of the last sample, fast or slow

    def due(self, now: float, *, to_the_end: bool = False) -> list[Snapshot]:
        """Those before a slow sample taken at ``now`` (``to_the_end``: up to ``now`` itself,
        when no slow sample follows)."""
        if self.since is None:
            return []
        intervals = (now - self.since) / self.interval_s
        count = math.floor(intervals + 1e-9) if to_the_end else max(0, round(intervals) - 1)
        moments = [self.since + self.interval_s * i for i in range(1, count + 1)]
        self.since = moments[-1] if moments else self.since
        return [
            _snapshot(self.topology, moment, *self.streams.states(moment), taken_at=moment)
            for moment in moments
        ]


def streams_cover_fast_ticks(topology: Topology, streams: StateStreams) -> bool:
    """Whether a fast sample reads nothing but states the stubs stream."""
    jobs, _ = _jobs(topology, 1.0, slow=False, components=False)
    return set(jobs) <= {f"{name} state" for name in streams.stubs}


async def sample_async(
    topology: Topology,
    session: async_fetch.Session,
    timeout_s: float,
    *,
    slow: bool,
    streams: StateStreams | None = None,
) -> Snapshot:
    """One sample as the sampler takes it: the same jobs on one event loop, no runtime view.
    With ``streams``, the stubs' states come from their streams instead of being asked for
    (each carries the moment it was taken, ``at``); a slow sample still asks a stub whose
    stream has no fresh state (not open yet, or the stub is silent), as it would without one.
    The streamed states are those of the sample's moment, when its fetches are done."""
    started = time.time()
    jobs, timeouts = _jobs(topology, timeout_s, slow=slow, components=False)
    streamed: set[str] = set()
    if streams is not None:
        fresh, silent = streams.states()
        streamed = {*fresh, *({} if slow else silent)}
        for key in streamed:
            jobs.pop(key, None)
    results, failed = await async_fetch.gather(session, jobs, timeouts)
    if streamed and streams is not None:
        if jobs:  # the fetches took time: what came meanwhile, and who went silent
            streams.tick()
        fresh, silent = streams.states()
        results |= {key: state for key, state in fresh.items() if key in streamed}
        failed |= {key: why for key, why in silent.items() if key in streamed}
    return _snapshot(topology, started, results, failed)


def closed_counters(snapshot: Snapshot) -> dict[str, dict[str, float]] | None:
    """Toxiproxy's per-link counters a slow sample read; None when they did not answer."""
    if snapshot.observed is None or LINK_JOB in snapshot.unanswered:
        return None
    return snapshot.observed.traffic


class LinkSeries:
    """Every link's bytes so far (Toxiproxy's closed connections plus the kernel's open ones),
    one point per slow tick (per :data:`LINK_WALK_GAP_S` while connections keep being
    accepted), bounded. Every point is complete: a point between two walks would miss the
    bytes of connections accepted since the last."""

    def __init__(self, topology: Topology, maxlen: int) -> None:
        self.ports = {link.listen_port: name for name, link in topology.links.items()}
        self.kernel = OpenSocketBytes(self.ports)
        self.points: deque[tuple[float, Totals]] = deque(maxlen=maxlen)
        self.errors = 0

    def add(self, closed: dict[str, dict[str, float]] | None) -> None:
        """A point from Toxiproxy's counters just read (None: they did not answer)."""
        if closed is None:
            self.errors += 1
            return
        if not self.kernel.due(LINK_WALK_GAP_S):
            return
        try:
            live = self.kernel.read()
        except Exception:  # a meter must never end the sampler; count and go on
            self.errors += 1
            return
        self.points.append((time.time(), add_counters(closed, live)))

    def frame(self) -> tuple[Any, ...]:
        return ("series", self.errors, list(self.points))


def config_line(
    target: ProbeTarget,
    interval_s: float,
    timeout_s: float,
    slow_every: int,
    *,
    links: bool = False,
) -> bytes:
    config = {
        "target": target.to_dict(),
        "interval_s": interval_s,
        "timeout_s": timeout_s,
        "slow_every": slow_every,
        "links": links,
    }
    return json.dumps(config).encode() + b"\n"


# At the end of input, how long the last frames may take to go out before the program ends
# anyway (a tick may be waiting for a fetch).
FLUSH_AT_END_S = 1.0
# The line on stdin that asks for a slow sample now (see the module's docstring).
MARK = b"mark"


def _answer_requests(
    stdin: BinaryIO,
    loop: asyncio.AbstractEventLoop,
    answer: Any,
    mark: asyncio.Event,
    last_words: Any,
) -> None:
    """An empty line asks for the link series, written by the event loop between ticks (so
    frames never interleave); a :data:`MARK` line wakes the loop for a slow sample now. End of
    file: the probe stopped or its process is gone; the frames still waiting go out (if anyone
    still reads them), then the program ends."""
    while line := stdin.readline():
        with contextlib.suppress(RuntimeError):  # the loop is closing: the program ends anyway
            loop.call_soon_threadsafe(mark.set if line.strip() == MARK else answer)
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(last_words)
    time.sleep(FLUSH_AT_END_S)
    os._exit(0)


async def _run(config: dict[str, Any], stdin: BinaryIO, out: BinaryIO) -> None:
    topology = TargetTopology(ProbeTarget.from_dict(config["target"])).as_topology()
    interval_s, timeout_s = float(config["interval_s"]), float(config["timeout_s"])
    slow_every = max(1, int(config["slow_every"]))
    links = LinkSeries(topology, int(config.get("link_maxlen", LINK_SERIES_MAXLEN)))
    metered = bool(config.get("links", False)) and bool(links.ports)
    outbox = Outbox(out)

    def answer() -> None:
        with contextlib.suppress(BrokenPipeError):  # the probe is gone: the next tick ends us
            outbox.put(links.frame(), now=True)

    streams = StateStreams(
        {name: stub.base_url for name, stub in topology.stubs.items()},
        interval_s,
        timeout_s,
        keep_s=2 * interval_s * slow_every + interval_s + timeout_s,
    )
    # When the streams carry everything a fast sample reads, the program wakes on slow ticks
    # only and fills in the fast samples between two of them from the streamed states: a
    # wake-up costs more than a fast sample's work. Else every tick samples.
    batched = slow_every > 1 and streams_cover_fast_ticks(topology, streams)
    fill = FastFill(topology, streams, interval_s) if batched else None
    period_s = interval_s * slow_every if batched else interval_s

    def last_words() -> None:
        with contextlib.suppress(Exception):  # the samples since the last slow one
            if fill is not None:
                streams.tick()
                for fast in fill.due(time.time(), to_the_end=True):
                    outbox.put(sample_frame(False, fast), now=False)
        with contextlib.suppress(OSError):
            outbox.flush()
        os._exit(0)

    loop = asyncio.get_running_loop()
    mark = asyncio.Event()
    threading.Thread(
        target=_answer_requests, args=(stdin, loop, answer, mark, last_words), daemon=True
    ).start()
    async with async_fetch.new_session() as session:
        for tick in itertools.count():  # until end of input or a closed stdout ends the program
            started = time.monotonic()
            slow = batched or mark.is_set() or tick % slow_every == 0
            mark.clear()  # a mark that comes during this tick's fetches asks for the next one
            streams.tick()
            frame: tuple[Any, ...]
            try:
                snapshot = await sample_async(
                    topology, session, timeout_s, slow=slow, streams=streams
                )
                frame = sample_frame(slow, snapshot)
                if fill is not None:  # the fast samples up to this one's moment, in order
                    for fast in fill.due(snapshot.taken_at):
                        outbox.put(sample_frame(False, fast), now=False)
                    fill.since = snapshot.taken_at
            except Exception as exc:  # one failed tick is evidence, not the end of the probe
                frame, snapshot = ("error", f"{type(exc).__name__}: {exc}"[:500]), None
            if metered and slow:
                links.add(closed_counters(snapshot) if snapshot is not None else None)
            outbox.put(frame, now=slow)
            with contextlib.suppress(TimeoutError):  # the period is over and no mark came
                await asyncio.wait_for(mark.wait(), period_s - (time.monotonic() - started))


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    """The program: a configuration line on ``stdin``, then frames on ``stdout`` until end of
    input (spawned, ``stdin`` and ``stdout`` are the process's own; forked by the zygote, the
    probe's pipes)."""
    line = stdin.readline()
    try:
        config = json.loads(line)
        ProbeTarget.from_dict(config["target"])
    except (ValueError, KeyError, TypeError) as exc:
        print(
            f"pytest-wedge sampler: the first line on stdin is not a probe configuration "
            f"({type(exc).__name__}: {exc}): {line[:200]!r}",
            file=sys.stderr,
        )
        return BAD_CONFIG
    try:
        asyncio.run(_run(config, stdin, stdout))
    except BrokenPipeError:  # the probe closed its end: nobody is listening any more
        os._exit(0)
    return 0


def main() -> int:
    return serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main())
