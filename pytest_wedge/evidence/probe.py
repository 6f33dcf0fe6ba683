"""The probe: every component sampled on an interval, by a sampler outside the test process.

A sample is a :class:`Snapshot` without ledgers (the expensive part). Every tick reads the stub
states; every ``slow_every``-th tick (a *slow* sample, once a second by default) also reads
what an operator sees: the engines' and the router's metrics and Toxiproxy's byte counters per
link (never the toxic configuration). The bounded series feeds the timeline; the latest slow
sample is the "before" point of rates, and the slow sample from before a wedge is the start of
the window over which link traffic and router counters are compared. :meth:`Probe.mark` takes
one at once (a fault window opens with it, see ``handle.py``), so a window starts just before
its fault whatever the slow interval.

The sampling runs in its own process (``evidence/sampler.py``): in the test process it
competed with the harness for the GIL. With ``meter_links``, that process also meters every
link's bytes for the timeline's link lanes (:meth:`Probe.link_series`, the source of a
:class:`~pytest_wedge.links.rates.LinkMeter`). That process is forked from a
pre-imported parent, the zygote (``evidence/zygote.py``, started by ``evidence/launch.py``), so
a probe costs a fork, not an interpreter's imports. Here a reader thread, blocked on a pipe
most of the time, keeps each sample as its sampler pickled it and adds to each slow one what
only this process knows: the runtime's view of the components (paused, stopped, restarted). A
sample is unpickled when it is first read (most never are, and this process shares its
interpreter lock with the harness). Samples keep their type, :class:`Snapshot`.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self

from pytest_wedge.evidence.frames import read_frame
from pytest_wedge.evidence.launch import (
    FIRST_FORK_TIMEOUT_S,
    ForkedChild,
    ProbeError,
    fork_child,
    reap,
    zygote_warm,
)
from pytest_wedge.evidence.sample_store import Components, KeptSample, SampleStore
from pytest_wedge.evidence.sampler import config_line, sample_once
from pytest_wedge.evidence.sampler_asks import SamplerAsks
from pytest_wedge.evidence.snapshot import Snapshot, component_states
from pytest_wedge.evidence.target import ProbeTarget

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology

__all__ = ["Probe", "ProbeError"]

STDERR_TAIL_BYTES = 4000
# Longer than a first sample's slowest fetch (Toxiproxy's, 1 s) on a loaded machine.
FIRST_SAMPLE_WAIT_S = 2.0
# How often a slow sample comes by default. Each one costs every server a GET and the sampler
# a Prometheus parse; a fault window's start needs no periodic one, since mark() takes it.
SLOW_INTERVAL_S = 1.0
# How long mark() waits for its sample before the fault goes ahead anyway (the window then
# starts at the last periodic slow sample): longer than a slow sample's slowest fetch
# (Toxiproxy's, 1 s), short enough not to hold up a watchdog's restart for long.
MARK_WAIT_S = 1.5


class Probe:
    """``Probe(topology, interval_s=0.1).start()`` ... ``.stop()``; a context manager.

    ``stop()`` raises :class:`ProbeError` (once) when the sampler died under the test; samples
    received until then stay available.
    """

    def __init__(
        self,
        topology: Topology,
        interval_s: float = 0.1,
        *,
        maxlen: int = 3000,
        timeout_s: float = 0.2,
        slow_every: int | None = None,
        meter_links: bool = False,
    ) -> None:
        self.topology = topology
        self.meter_links = meter_links
        # Whether the sampler meters the links: only one forked at the start does (a first
        # probe's sampler comes seconds late, and a meter must cover the whole test).
        self.meters_links = False
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        # Stub states (per-origin tokens, queues) change every tick; the router's metrics and
        # the proxies' state are costlier to render and change rarely, so only every
        # ``slow_every``-th sample reads them (default: one every SLOW_INTERVAL_S).
        if slow_every is None:
            slow_every = round(SLOW_INTERVAL_S / interval_s) if interval_s > 0 else 1
        self.slow_every = max(1, slow_every)
        self._store = SampleStore(maxlen, self._count_error)
        self.errors = 0  # ticks that failed as a whole, and lines that did not decode
        self.last_error: str | None = None
        self.failure: ProbeError | None = None
        self._failure_raised = False
        # What stop() did, set before it does it: a sampler's exit is the probe's doing only
        # when its input was closed first (it then exits 0), or when stop() killed it.
        self._input_closed = False
        self._killed = False
        self._process: ForkedChild | None = None
        self._stdin: IO[bytes] | None = None
        self._stdout: IO[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._first = threading.Event()  # a frame arrived, or the sampler's output ended
        self._forked = threading.Event()  # the fork was answered (a PID or an error)
        self._stderr: IO[bytes] | None = None
        self._asks = SamplerAsks()

    @property
    def pid(self) -> int | None:
        """The sampler's PID (after a first probe's fork, which waits for the zygote)."""
        if self._reader is not None:
            self._forked.wait(FIRST_FORK_TIMEOUT_S)
        return self._process.pid if self._process is not None else None

    def sample(self) -> Snapshot:
        """Take one sample now, in this process (a slow one: everything the probe reads)."""
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="wedge-probe") as pool:
            return sample_once(self.topology, pool, self.timeout_s, slow=True)

    # -- the sampler process -----------------------------------------------------------------

    def start(self) -> Self:
        if self._reader is not None:
            return self
        target = ProbeTarget.of(self.topology)
        # Unlinked at once: nothing is left in TMPDIR whatever happens to this process.
        self._stderr = tempfile.TemporaryFile(prefix="wedge-sampler-")  # noqa: SIM115 - stop() closes it
        if zygote_warm():
            self.meters_links = self.meter_links
            config = config_line(
                target, self.interval_s, self.timeout_s, self.slow_every, links=self.meters_links
            )
            try:
                self._fork(config)
            except ProbeError:
                self._stderr.close()
                raise
            self._reader = threading.Thread(target=self._read, name="wedge-probe", daemon=True)
            self._reader.start()
            # A fault applied right after the start needs a sample from before it: the start
            # returns once the sampler's first sample is here (a few ms after the fork), or
            # after FIRST_SAMPLE_WAIT_S if that fetch is slow (its samples follow anyway).
            self._first.wait(FIRST_SAMPLE_WAIT_S)
            return self
        # The first probe of a process waits for the zygote's imports (seconds on a loaded
        # machine): the reader thread waits for them, and one sample is taken here at once.
        config = config_line(target, self.interval_s, self.timeout_s, self.slow_every)
        self._reader = threading.Thread(
            target=self._fork_then_read, args=(config,), name="wedge-probe", daemon=True
        )
        self._reader.start()
        threading.Thread(target=self._first_sample, name="wedge-probe-first", daemon=True).start()
        return self

    def _fork(self, config: bytes) -> None:
        """The sampler, with its configuration written; ``_forked`` is set only then, so a
        stop() never closes its stdin under the write."""
        try:
            process, stdin, stdout = fork_child("sampler", self._stderr_fd())
        except BaseException:
            self._forked.set()  # a stop() must not wait for a fork that will never come
            raise
        weakref.finalize(self, reap, process)
        # One line, far below a pipe's buffer: never blocks, even if the sampler is slow to start.
        with contextlib.suppress(BrokenPipeError):
            stdin.write(config)
            stdin.flush()
        self._process, self._stdin, self._stdout = process, stdin, stdout
        self._forked.set()

    def _stderr_fd(self) -> int:
        assert self._stderr is not None
        return self._stderr.fileno()

    def _fork_then_read(self, config: bytes) -> None:
        try:
            self._fork(config)
        except ProbeError as exc:  # the test goes on without samples; stop() raises this
            self.failure = exc
            return
        self._read()

    def _first_sample(self) -> None:
        try:
            snapshot = self.sample()
        except Exception as exc:  # the sampler's own samples follow anyway
            self._count_error(f"first sample: {type(exc).__name__}: {exc}")
            return
        self._store.add_first(snapshot)

    def _read(self) -> None:
        process, stdout = self._process, self._stdout
        assert process is not None and stdout is not None
        while True:
            try:
                frame = read_frame(stdout)
            except Exception as exc:  # a frame that does not decode: count it, keep reading
                self._count_error(f"undecodable frame: {type(exc).__name__}: {exc}")
                continue
            if frame is None:
                break
            self._receive(frame)
            if frame[0] != "series":  # a tick's frame, now kept
                self._first.set()
        self._first.set()
        self._asks.output_ended()  # nothing more will answer: an asker must not wait
        code = process.wait()
        # Judged by the exit itself, not by whether stop() saw it still running: the zygote
        # reports a death a moment after it happens, so that look would race with it.
        if not self._input_closed or (code != 0 and not self._killed):
            self.failure = ProbeError(
                "The probe's sampler exited while the test ran; samples stopped there",
                facts={
                    "sampler pid": process.pid,
                    "exit code": code,
                    "samples received": len(self._store),
                },
                log_tail=self._stderr_tail(),
                fix="the log tail says why; a negative exit code is the signal that ended it "
                "(something outside pytest-wedge killed it)",
            )

    def _count_error(self, text: str) -> None:
        self.errors += 1
        self.last_error = text[:500]

    def _receive(self, frame: tuple[Any, ...]) -> None:
        if frame[0] == "series":
            self._asks.series_came((int(frame[1]), list(frame[2])))
            return
        if frame[0] != "sample" or len(frame) != 4 or not isinstance(frame[2], float):
            self._count_error(str(frame[1]) if frame[0] == "error" else f"odd frame {frame[0]!r}")
            return
        slow = bool(frame[1])
        # With the slow samples only, like the router's metrics: reading each component's state
        # from the runtime and /proc is most of this process's share of the probe's cost.
        components: Components = None
        if slow:
            try:
                components = component_states(self.topology)
            except Exception as exc:  # as in a snapshot: a runtime that did not answer
                components = f"{type(exc).__name__}: {exc}"[:200]
        self._store.add(KeptSample(frame[2], frame=frame, components=components), slow=slow)
        if slow:
            self._asks.slow_came(frame[2])

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0, 2)
            self._stderr.seek(max(0, self._stderr.tell() - STDERR_TAIL_BYTES))
            return self._stderr.read().decode(errors="replace")
        return ""

    def stop(self, timeout_s: float = 2.0) -> None:
        """End the sampler (end of its input; killed if it does not go within ``timeout_s``)."""
        if self._reader is not None:  # a first probe's fork may still wait for the zygote
            self._forked.wait(FIRST_FORK_TIMEOUT_S)
        process = self._process
        if process is not None:
            self._input_closed = True
            if self._stdin is not None:
                with contextlib.suppress(OSError):
                    self._stdin.close()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._killed = True
                process.kill()
                process.wait(timeout_s)
            if self._reader is not None:
                self._reader.join(timeout_s)
            if self._stdout is not None:
                self._stdout.close()
        if self._stderr is not None:
            self._stderr.close()
        if self.failure is not None and not self._failure_raised:
            self._failure_raised = True
            raise self.failure

    def link_series(self, timeout_s: float = 5.0) -> tuple[int, list[Any]] | None:
        """The sampler's link series so far and its error count, asked for now; None when it
        does not meter the links or does not answer within ``timeout_s``."""
        if not self.meters_links:
            return None
        self._forked.wait(FIRST_FORK_TIMEOUT_S)
        stdin = self._stdin
        if stdin is None or self._reader_done():
            return None
        return self._asks.series(stdin, timeout_s)

    def mark(self, timeout_s: float = MARK_WAIT_S) -> float | None:
        """Take a slow sample now and return its moment, once this probe has it (so
        :meth:`slow_before` a moment after this returns finds it); None when the sampler is not
        running yet or any more, or did not answer within ``timeout_s``. Called as a fault
        window opens: the window's counters then start just before the fault."""
        stdin = self._stdin
        if not self._forked.is_set() or stdin is None or self._reader_done():
            return None  # a first probe's fork still waits for the zygote: never block on it
        return self._asks.mark(stdin, time.time(), timeout_s)

    def _reader_done(self) -> bool:
        return self._reader is not None and not self._reader.is_alive()

    # -- the samples -------------------------------------------------------------------------

    def latest(self, min_age_s: float = 0.0) -> Snapshot | None:
        """The newest sample at least ``min_age_s`` old (a rate needs some distance)."""
        return self._store.latest(time.time() - min_age_s, slow=False)

    def latest_slow(self, min_age_s: float = 0.0) -> Snapshot | None:
        """The newest slow sample (engine, router and link counters) at least ``min_age_s``
        old."""
        return self._store.latest(time.time() - min_age_s, slow=True)

    def slow_before(self, at: float) -> Snapshot | None:
        """The newest slow sample taken at or before ``at``, else the oldest one kept."""
        return self._store.latest(at, slow=True) or self._store.oldest_slow()

    def samples(self) -> list[Snapshot]:
        return self._store.samples()

    def slow_samples(self) -> list[Snapshot]:
        return self._store.samples(slow=True)

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
