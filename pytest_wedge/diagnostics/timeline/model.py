"""The timeline's data, once: the HTML page and the Chrome trace are two renderings of it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.diagnostics.timeline.waterfall import RequestRow, request_rows
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.evidence.truth import FaultRecord, FaultWindow, window_record
from pytest_wedge.faults.process_actions import Pause
from pytest_wedge.links.rates import LinkRates, RateSpan, rates_from_samples

# Rows beyond this are dropped (the origin under test and wedged requests never are): a page of
# 3000 rows is no longer read, and the trace JSON keeps every request anyway.
MAX_ROWS = 600
Mark = tuple[float, str]  # (wall-clock time, label)
# A step that overlaps a stop of one of its link's ends keeps its bytes inside the stop only
# when the rest of it is shorter than this share of the step (then it is the stop's step).
OUTSIDE_SHARE = 0.1


@dataclass(frozen=True)
class FaultSpan:
    label: str
    target: str
    start: float
    end: float | None  # None: still active when the timeline was made
    stops: bool = False  # the fault stops its target's process: it moves no bytes itself


@dataclass(frozen=True)
class Marker:
    """A vertical line: a watchdog firing, the diagnosis, the failure, or a caller's mark."""

    at: float
    label: str
    kind: str  # "watchdog" | "diagnosis" | "failure" | "mark"
    where: str | None = None  # the component or link a watchdog acted on
    name: str = ""  # a watchdog's name


@dataclass
class Timeline:
    title: str
    failure: str | None
    headline: str
    location: str
    origin: str
    start: float
    end: float
    groups: dict[str, list[RequestRow]]
    faults: list[FaultSpan]
    markers: list[Marker]
    links: list[str]
    rates: LinkRates
    lanes: dict[str, list[RateSpan]]  # each link's steps as drawn (see lane_spans)
    zero: str  # what time 0 is: "test start", else the first thing drawn
    evidence: list[str] = field(default_factory=list)
    red_herrings: list[str] = field(default_factory=list)
    dropped: int = 0

    @property
    def rows(self) -> int:
        return sum(len(rows) for rows in self.groups.values())


def _markers(
    diagnosis: Diagnosis | None,
    watchdogs: Sequence[Mapping[str, object]],
    snapshot: Snapshot,
    marks: Iterable[Mark],
    failure: str | None,
) -> list[Marker]:
    out = []
    # The stubs' own firings and the report's watchdog rows (``name``, ``lane``).
    for w in [*(diagnosis.watchdogs if diagnosis else []), *watchdogs]:
        at = w.get("at")
        if not isinstance(at, int | float):
            continue
        name, where = str(w.get("watchdog") or w.get("name")), w.get("component") or w.get("lane")
        where = str(where) if where else None
        out.append(Marker(float(at), f"watchdog {name} fired", "watchdog", where, name))
    if diagnosis is not None:
        out.append(Marker(snapshot.taken_at, f"diagnosis: {diagnosis.location}", "diagnosis"))
    for at, label in marks:
        kind = "failure" if label.lower().startswith("fail") else "mark"
        out.append(Marker(float(at), label, kind))
    if failure and not any(m.kind == "failure" for m in out):
        # The caller named a failure without its moment: the evidence was taken at it.
        out.append(Marker(snapshot.taken_at, "failure", "failure"))
    return sorted(out, key=lambda m: m.at)


def _keep(rows: list[RequestRow], origin: str, cap: int) -> tuple[list[RequestRow], int]:
    """At most ``cap`` rows: wedged ones and the origin under test first, then the newest."""
    if len(rows) <= cap:
        return rows, 0
    ranked = sorted(rows, key=lambda r: (not r.wedged, r.origin != origin, -r.start))
    kept = {id(r) for r in ranked[:cap]}
    return [r for r in rows if id(r) in kept], len(rows) - cap


def _merged(parts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(parts):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def lane_spans(
    link: str, spans: Sequence[RateSpan], stops: Sequence[FaultSpan], end: float
) -> list[RateSpan]:
    """A link's steps as drawn. A stopped process moves no bytes itself, so the bytes of a step
    that overlaps a stop of one of the link's ends are drawn in the part of the step where that
    end ran. A step (nearly) all inside the stop keeps its bytes there, marked
    ``while_stopped``: they moved anyway (the stopped end's kernel still takes bytes into its
    socket buffers; another client, such as a diagnosis's /health, still uses the link)."""
    ends = set(link.split("->"))
    mine = [(f.start, end if f.end is None else f.end, f.target) for f in stops if f.target in ends]
    out: list[RateSpan] = []
    for s in spans:
        hit = [(max(a, s.start), min(b, s.end), w) for a, b, w in mine if a < s.end and b > s.start]
        cuts = _merged([(a, b) for a, b, _ in hit])
        length = s.end - s.start
        outside = length - sum(b - a for a, b in cuts)
        if not cuts:
            out.append(s)
        elif outside < OUTSIDE_SHARE * length:
            if s.upstream or s.downstream:  # else nothing moved: nothing to draw or explain
                who = " and ".join(dict.fromkeys(w for _, _, w in hit))
                out.append(RateSpan(s.start, s.end, s.upstream, s.downstream, while_stopped=who))
        else:
            scale = length / outside
            edges = [s.start, *(t for cut in cuts for t in cut), s.end]
            out += [
                RateSpan(a, b, s.upstream * scale, s.downstream * scale)
                for a, b in zip(edges[::2], edges[1::2], strict=True)
                if b > a
            ]
    return out


def build_timeline(
    diagnosis: Diagnosis | None,
    snapshot: Snapshot,
    fault_windows: Iterable[FaultWindow | FaultRecord] = (),
    watchdogs: Sequence[Mapping[str, object]] = (),
    samples: Sequence[Snapshot] = (),
    *,
    title: str | None = None,
    failure: str | None = None,
    marks: Iterable[Mark] = (),
    link_rates: LinkRates | None = None,
    max_rows: int = MAX_ROWS,
    started: float | None = None,
) -> Timeline:
    """``started``: when the test started, time 0 of the axes (else the first thing drawn)."""
    origin = diagnosis.origin if diagnosis else "harness"
    rows, dropped = _keep(request_rows(snapshot, diagnosis), origin, max_rows)
    groups: dict[str, list[RequestRow]] = {}
    # The origin under test first, then the others by name.
    for row in sorted(rows, key=lambda r: (r.origin != origin, r.origin)):
        groups.setdefault(row.origin, []).append(row)
    pause = f"{Pause.__name__} on "
    faults = [
        FaultSpan(
            f["description"],
            f["target"],
            f["started"],
            f["ended"] or None,
            f["description"].startswith(pause),
        )
        for f in map(window_record, fault_windows)
    ]
    markers = _markers(diagnosis, watchdogs, snapshot, marks, failure)
    rates = link_rates if link_rates is not None else rates_from_samples(samples)
    times = [r.start for r in rows] + [f.start for f in faults] + [m.at for m in markers]
    times += [s.start for spans in rates.spans.values() for s in spans[:1]]
    start = started if started is not None else min(times, default=snapshot.taken_at - 1.0)
    end = max(max([snapshot.taken_at, *(m.at for m in markers)]), start + 0.1)
    links = list(snapshot.link_names)
    stops = [f for f in faults if f.stops]
    return Timeline(
        title=title or "pytest-wedge timeline",
        failure=failure,
        headline=diagnosis.headline() if diagnosis else "no diagnosis",
        location=diagnosis.location if diagnosis else "none",
        origin=origin,
        start=start,
        end=end,
        groups=groups,
        faults=faults,
        markers=markers,
        links=links,
        rates=rates,
        lanes={link: lane_spans(link, rates.spans.get(link, []), stops, end) for link in links},
        zero="test start" if started is not None else "first event",
        evidence=list(diagnosis.evidence) if diagnosis else [],
        red_herrings=list(diagnosis.red_herrings) if diagnosis else [],
        dropped=dropped,
    )
