"""Bytes per second through each link over time, for the timeline's link lanes.

Toxiproxy's ``-proxy-metrics`` counters are the source, but Toxiproxy adds a connection's bytes
only when that connection ends (``link.go`` counts after ``io.Copy`` returns). Every client in
the topology keeps its connections alive (smg's pool, the load's and the stubs' aiohttp pools),
so those counters alone stay flat for a whole test. The live part comes from the kernel: the
bytes each open socket that Toxiproxy accepted on a link's listen port has received and had
acknowledged (``tcp_info``, asked of the kernel over netlink as iproute2's ``ss`` does: see
``links/sockdiag.py``). Closed connections are in Toxiproxy's counters, open ones in the
kernel's, so their sum is the link's traffic so far, and two samples give a rate.

Per link and direction: ``upstream`` is what the link's client sent towards the target,
``downstream`` what the target sent back (Toxiproxy's ``upstream_in`` and ``downstream_out``).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import TracebackType
from typing import TYPE_CHECKING, Self

from pytest_wedge.evidence.read_public import link_bytes
from pytest_wedge.links.sockdiag import SocketCounters, socket_bytes

if TYPE_CHECKING:
    from pytest_wedge.evidence.snapshot import Snapshot
    from pytest_wedge.topology.running import Topology

DIRECTIONS = ("upstream", "downstream")
SOURCE_BOTH = "Toxiproxy's counters (closed connections) + the kernel's (open connections)"
SOURCE_TOXIPROXY = "Toxiproxy's counters (a connection counts when it closes)"
_ADDRESS = re.compile(r"\S+:(\d+)\s")
_RECEIVED = re.compile(r"\bbytes_received:(\d+)")
_ACKED = re.compile(r"\bbytes_acked:(\d+)")

Totals = dict[str, dict[str, float]]  # link -> direction -> bytes so far
# A point needs the kernel's socket table walked whenever a connection may have been accepted
# since the last (2.5 ms of CPU here, under load). Under load smg keeps opening connections to
# a decode, so every point would walk it: then a meter takes a point at most this often. Just
# under the probe's slow interval (1 s), so that slow ticks a second apart each take one
# whatever their jitter.
LINK_WALK_GAP_S = 0.9
# Asked with a timeout: (errors, series) so far, or None when the answer did not come.
SeriesSource = Callable[[float], "tuple[int, list[tuple[float, Totals]]] | None"]


@dataclass(frozen=True)
class RateSpan:
    """Mean bytes per second per direction between two samples of one link."""

    start: float
    end: float
    upstream: float
    downstream: float


@dataclass(frozen=True)
class LinkRates:
    """Every link's rate series, and where the numbers came from (shown in the lane)."""

    spans: dict[str, list[RateSpan]]
    source: str

    def peak(self, link: str) -> float:
        return max((max(s.upstream, s.downstream) for s in self.spans.get(link, [])), default=0.0)


def open_socket_bytes(ports: Mapping[int, str]) -> Totals:
    """Bytes received and acknowledged so far on each open socket whose local port is a link's
    listen port (Toxiproxy's accepted side), summed per link: asked of the kernel over netlink
    (``links/sockdiag.py``), else read from ``ss``. Empty when neither answers."""
    if not ports:
        return {}
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no AF_NETLINK here
        return socket_bytes(ports)
    return _ss_socket_bytes(ports)


class OpenSocketBytes:
    """:func:`open_socket_bytes` for a meter that reads the same ports again and again: the
    kernel dumps its connection table only when one may have been accepted since the last
    read (:class:`~pytest_wedge.links.sockdiag.SocketCounters`)."""

    def __init__(self, ports: Mapping[int, str]) -> None:
        self.ports = dict(ports)
        self.counters = SocketCounters(self.ports)
        self.walked_at: float | None = None  # time.monotonic() of the last read that dumped

    def due(self, min_walk_gap_s: float) -> bool:
        """Whether to read now: not when the read would walk the kernel's whole table (a dump,
        or ``ss``) within ``min_walk_gap_s`` of the last walk."""
        if self.walked_at is None or time.monotonic() - self.walked_at >= min_walk_gap_s:
            return True
        return not self.counters.would_dump()

    def read(self) -> Totals:
        if not self.ports:
            return {}
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: no AF_NETLINK here
            dumps = self.counters.dumps
            totals = self.counters.read()
            if self.counters.dumps != dumps:
                self.walked_at = time.monotonic()
            return totals
        self.walked_at = time.monotonic()
        return _ss_socket_bytes(self.ports)


def kernel_readable() -> bool:
    """Whether open sockets' bytes can be read at all (netlink, else ``ss``)."""
    try:
        socket_bytes({})
    except (OSError, AttributeError):
        return shutil.which("ss") is not None
    return True


def _ss_socket_bytes(ports: Mapping[int, str]) -> Totals:
    ss = shutil.which("ss")
    if ss is None:
        return {}
    wanted = " or ".join(f"sport = :{port}" for port in ports)
    done = subprocess.run(
        [ss, "-tinH", "state", "connected", f"( {wanted} )"],
        capture_output=True,
        text=True,
        timeout=2,
        check=False,
    )
    return parse_ss(done.stdout, ports)


def parse_ss(text: str, ports: Mapping[int, str]) -> Totals:
    """``ss -tinH`` output: a socket line, then an indented line of its ``tcp_info``."""
    totals: Totals = {}
    link: str | None = None
    for line in text.splitlines():
        if line[:1] not in ("\t", " "):
            found = _ADDRESS.search(line + " ")
            link = ports.get(int(found.group(1))) if found else None
            continue
        if link is None:
            continue
        got, acked = _RECEIVED.search(line), _ACKED.search(line)
        mine = totals.setdefault(link, {"upstream": 0.0, "downstream": 0.0})
        mine["upstream"] += float(got.group(1)) if got else 0.0
        mine["downstream"] += float(acked.group(1)) if acked else 0.0
        link = None
    return totals


def add_counters(closed: Mapping[str, Mapping[str, float]], live: Totals) -> Totals:
    """Toxiproxy's per-link counters (``upstream_in``, ``downstream_out``) plus live bytes."""
    out: Totals = {}
    for link in {*closed, *live}:
        counters, now = closed.get(link, {}), live.get(link, {})
        out[link] = {
            "upstream": counters.get("upstream_in", 0.0) + now.get("upstream", 0.0),
            "downstream": counters.get("downstream_out", 0.0) + now.get("downstream", 0.0),
        }
    return out


def rates(series: Sequence[tuple[float, Totals]], source: str) -> LinkRates:
    """Rates between consecutive samples. A dip (a connection's bytes moving from the kernel's
    count to Toxiproxy's between the two reads) is clamped to 0 rather than drawn negative."""
    spans: dict[str, list[RateSpan]] = {}
    for (t0, before), (t1, after) in pairwise(series):
        if t1 <= t0:
            continue
        for link in after:
            was, now = before.get(link, {}), after[link]
            up, down = (max(0.0, now.get(d, 0.0) - was.get(d, 0.0)) / (t1 - t0) for d in DIRECTIONS)
            spans.setdefault(link, []).append(RateSpan(t0, t1, up, down))
    return LinkRates(spans, source)


def rates_from_samples(samples: Iterable[Snapshot]) -> LinkRates:
    """Rates from the probe's slow samples (Toxiproxy's counters only): the fallback when no
    :class:`LinkMeter` ran."""
    series = [
        (s.taken_at, add_counters(s.observed.traffic, {}))
        for s in samples
        if s.observed is not None and s.observed.traffic
    ]
    return rates(series, SOURCE_TOXIPROXY)


class LinkMeter:
    """``with LinkMeter(topology): ...`` samples every link's bytes every ``interval_s``;
    :meth:`rates` turns the series into :class:`LinkRates`.

    With a ``source`` (the probe's sampler, which meters the links in its own process: see
    ``evidence/sampler.py``), the test process pays nothing while the test runs and asks for
    the series when it draws it. Without one (the first probe of a process waits for its
    sampler's imports, and this meter samples from the start), it samples in a thread here.
    """

    def __init__(
        self,
        topology: Topology,
        interval_s: float = 0.25,
        *,
        maxlen: int = 4000,
        source: SeriesSource | None = None,
    ) -> None:
        self.topology = topology
        self.interval_s = interval_s
        self.maxlen = maxlen
        self.errors = 0
        self._ports = {link.listen_port: name for name, link in topology.links.items()}
        self._kernel = OpenSocketBytes(self._ports)
        self._series: list[tuple[float, Totals]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._source = source

    def closed_counters(self) -> dict[str, dict[str, float]]:
        """Toxiproxy's per-link counters (the closed connections' bytes)."""
        return link_bytes(self.topology, timeout_s=1.0)

    def sample(self) -> tuple[float, Totals]:
        """One point, taken here and now, added to the series."""
        closed = self.closed_counters()
        live = self._kernel.read()
        point = (time.time(), add_counters(closed, live))
        with self._lock:
            self._series.append(point)
            del self._series[: max(0, len(self._series) - self.maxlen)]
        return point

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if self._kernel.due(LINK_WALK_GAP_S):
                    self.sample()
            except Exception:  # a meter must never take the test down; count and go on
                self.errors += 1
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _fetch(self, timeout_s: float = 5.0) -> None:
        """The source's series and error count so far, kept here."""
        answer = self._source(timeout_s) if self._source is not None else None
        if answer is None:
            return  # it died or hung: what was fetched before stays (never the test's error)
        errors, series = answer
        with self._lock:
            self.errors, self._series = errors, series

    def series(self) -> list[tuple[float, Totals]]:
        self._fetch()
        with self._lock:
            return list(self._series)

    def rates(self) -> LinkRates:
        # Without netlink or ss the open connections are unseen: say so rather than claim both.
        unseen = f"{SOURCE_TOXIPROXY}; no netlink, ss not found"
        source = SOURCE_BOTH if kernel_readable() else unseen
        return rates(self.series(), source)

    def start(self) -> Self:
        if self._thread is None and self._source is None:
            self._thread = threading.Thread(target=self._run, name="wedge-linkmeter", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._source is not None:
            self._fetch(timeout_s)  # the last series: rates() after the stop still draws it
            self._source = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
