"""The timeline's data, once: the HTML page and the Chrome trace are two renderings of it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.diagnostics.timeline.waterfall import RequestRow, request_rows
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.evidence.truth import FaultRecord, FaultWindow, window_record
from pytest_wedge.links.rates import LinkRates, rates_from_samples

# Rows beyond this are dropped (the origin under test and wedged requests never are): a page of
# 3000 rows is no longer read, and the trace JSON keeps every request anyway.
MAX_ROWS = 600
Mark = tuple[float, str]  # (wall-clock time, label)


@dataclass(frozen=True)
class FaultSpan:
    label: str
    target: str
    start: float
    end: float | None  # None: still active when the timeline was made


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
) -> Timeline:
    origin = diagnosis.origin if diagnosis else "harness"
    rows, dropped = _keep(request_rows(snapshot, diagnosis), origin, max_rows)
    groups: dict[str, list[RequestRow]] = {}
    # The origin under test first, then the others by name.
    for row in sorted(rows, key=lambda r: (r.origin != origin, r.origin)):
        groups.setdefault(row.origin, []).append(row)
    faults = [
        FaultSpan(f["description"], f["target"], f["started"], f["ended"] or None)
        for f in map(window_record, fault_windows)
    ]
    markers = _markers(diagnosis, watchdogs, snapshot, marks, failure)
    rates = link_rates if link_rates is not None else rates_from_samples(samples)
    times = [r.start for r in rows] + [f.start for f in faults] + [m.at for m in markers]
    times += [s.start for spans in rates.spans.values() for s in spans[:1]]
    start = min(times, default=snapshot.taken_at - 1.0)
    end = max([snapshot.taken_at, *(m.at for m in markers)])
    return Timeline(
        title=title or "pytest-wedge timeline",
        failure=failure,
        headline=diagnosis.headline() if diagnosis else "no diagnosis",
        location=diagnosis.location if diagnosis else "none",
        origin=origin,
        start=start,
        end=max(end, start + 0.1),
        groups=groups,
        faults=faults,
        markers=markers,
        links=list(snapshot.link_names),
        rates=rates,
        evidence=list(diagnosis.evidence) if diagnosis else [],
        red_herrings=list(diagnosis.red_herrings) if diagnosis else [],
        dropped=dropped,
    )
