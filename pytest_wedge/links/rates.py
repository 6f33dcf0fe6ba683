"""Bytes per second through each link over time, for the timeline's link lanes.

Toxiproxy's ``-proxy-metrics`` counters are the source, but Toxiproxy adds a connection's bytes
only when that connection ends (``link.go`` counts after ``io.Copy`` returns). Every client in
the topology keeps its connections alive (smg's pool, the load's and the stubs' aiohttp pools),
so those counters alone stay flat for a whole test. The live part comes from the kernel: the
bytes each open socket that Toxiproxy accepted on a link's listen port has received and had
acknowledged (``tcp_info``, as ``ss -tin`` prints it). Closed connections are in Toxiproxy's
counters, open ones in the kernel's, so their sum is the link's traffic so far, and two points
give a rate.

Per link and direction: ``upstream`` is what the link's client sent towards the target,
``downstream`` what the target sent back (Toxiproxy's ``upstream_in`` and ``downstream_out``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from pytest_wedge.evidence.read_public import link_bytes

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
# The fetch whose answer is Toxiproxy's per-link counters (``read_public.observed_jobs``).
LINK_JOB = "link traffic"


@dataclass(frozen=True)
class RateSpan:
    """Mean bytes per second per direction between two samples of one link."""

    start: float
    end: float
    upstream: float
    downstream: float
    # The link end that was stopped (SIGSTOP) all through this step, if one was: the bytes
    # moved anyway, and the timeline says why.
    while_stopped: str = ""


@dataclass(frozen=True)
class LinkRates:
    """Every link's rate series, and where the numbers came from (shown in the lane)."""

    spans: dict[str, list[RateSpan]]
    source: str


def open_socket_bytes(ports: Mapping[int, str]) -> Totals:
    """Bytes received and acknowledged so far on each open socket whose local port is a link's
    listen port (Toxiproxy's accepted side), summed per link, as ``ss -tin`` reports them.
    Empty when ``ss`` is not installed."""
    ss = shutil.which("ss")
    if ss is None or not ports:
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
    """Rates between consecutive points of each link's running total. A total may dip (a
    connection that closed between Toxiproxy's read and ``ss``'s is in neither count until the
    next point): the total kept is the highest seen, so the bytes' return is not drawn as new
    traffic."""
    spans: dict[str, list[RateSpan]] = {}
    highest: Totals = {}
    for (t0, _), (t1, after) in pairwise(series):
        if t1 <= t0:
            continue
        for link, now in after.items():
            was = highest.setdefault(link, dict(series[0][1].get(link, {})))
            moved = [max(0.0, now.get(d, 0.0) - was.get(d, 0.0)) for d in DIRECTIONS]
            was.update({d: was.get(d, 0.0) + m for d, m in zip(DIRECTIONS, moved, strict=True)})
            up, down = (m / (t1 - t0) for m in moved)
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
    """Every link's bytes so far, one point at a time: Toxiproxy's counters (closed
    connections) plus ``ss``'s (open ones); :meth:`rates` turns the series into
    :class:`LinkRates`. The probe hands it each of its samples (:meth:`add_sample`), so the
    links are metered in the probe's tick and nowhere else."""

    def __init__(self, topology: Topology, *, maxlen: int = 4000) -> None:
        self.topology = topology
        self.errors = 0
        self._ports = {link.listen_port: name for name, link in topology.links.items()}
        self._series: deque[tuple[float, Totals]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    def add(
        self, closed: Mapping[str, Mapping[str, float]] | None, at: float | None = None
    ) -> None:
        """A point at ``at`` (default: now) from Toxiproxy's counters just read (None: they did
        not answer) and the open sockets' bytes read now. A failure is counted, never raised."""
        try:
            if closed is None:
                raise ValueError("Toxiproxy's counters did not answer")
            totals = add_counters(closed, open_socket_bytes(self._ports))
        except Exception:
            self.errors += 1
            return
        with self._lock:
            self._series.append((time.time() if at is None else at, totals))

    def add_sample(self, sample: Snapshot) -> None:
        """A point from a probe sample's Toxiproxy counters, with the open sockets' now,
        stamped with the sample's moment: the lanes' steps then meet the probe's samples (and
        a fault window's first one) where they were taken, not where the meter read them."""
        read = sample.observed is not None and LINK_JOB not in sample.unanswered
        self.add(sample.observed.traffic if read and sample.observed else None, sample.taken_at)

    def sample(self) -> None:
        """One point, taken here and now."""
        try:
            closed: dict[str, dict[str, float]] | None = link_bytes(self.topology, timeout_s=1.0)
        except Exception:
            closed = None
        self.add(closed)

    def series(self) -> list[tuple[float, Totals]]:
        with self._lock:
            return list(self._series)

    def rates(self) -> LinkRates:
        # Without ss the open connections are unseen: say so rather than claim both.
        found = shutil.which("ss") is not None
        return rates(self.series(), SOURCE_BOTH if found else f"{SOURCE_TOXIPROXY}; ss not found")
