"""timeline.trace.json: the timeline as Chrome trace events (Perfetto, chrome://tracing). Slices
on one thread must nest or Perfetto drops them: overlapping hops go to ``<request> (overlap)``."""

from __future__ import annotations

import json

from pytest_wedge.diagnostics.timeline.model import Timeline
from pytest_wedge.diagnostics.timeline.waterfall import RequestRow, Segment
from pytest_wedge.links.rates import RateSpan

TRACE_FORMAT = "pytest-wedge/timeline-trace"
Event = dict[str, object]  # one Trace Event Format event, as JSON
FAULTS_PID, LINKS_PID, FIRST_ORIGIN_PID = 1, 2, 10


def _us(tl: Timeline, t: float) -> int:
    # Whole microseconds: float sums of ts + dur would make back-to-back hops overlap by 1e-10.
    # Time 0 is the test's start; anything from before it starts there.
    return max(0, round((t - tl.start) * 1e6))


def _meta(kind: str, pid: int, tid: int | None, **args: object) -> Event:
    event: Event = {"name": kind, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _process(pid: int, name: str, sort_index: int) -> list[Event]:
    return [
        _meta("process_name", pid, None, name=name),
        _meta("process_sort_index", pid, None, sort_index=sort_index),
    ]


def _slice(
    tl: Timeline, name: str, cat: str, start: float, end: float, pid: int, tid: int, args: object
) -> Event:
    ts = _us(tl, start)
    dur = max(_us(tl, end) - ts, 0)
    return dict(name=name, cat=cat, ph="X", ts=ts, dur=dur, pid=pid, tid=tid, args=args)


def pack(segments: list[Segment]) -> list[list[Segment]]:
    """Segments into as few lanes as needed so that none overlaps another in its lane."""
    lanes: list[list[Segment]] = []
    for seg in sorted(segments, key=lambda s: (s.start, s.end)):
        lane = next((ln for ln in lanes if ln[-1].end <= seg.start), None)
        if lane is None:
            lanes.append([seg])
        else:
            lane.append(seg)
    return lanes


def _request(tl: Timeline, row: RequestRow, pid: int, tid: int) -> tuple[list[Event], int]:
    events: list[Event] = []
    args = {
        "request_id": row.request_id,
        "origin": row.origin,
        "state": row.state,
        "wedged": row.wedged,
        "held at": row.holding,
        "error": row.error,
    }
    for depth, lane in enumerate(pack(row.segments)):
        name = row.request_id if depth == 0 else f"{row.request_id} (overlap)"
        events.append(_meta("thread_name", pid, tid, name=f"{name} [{row.state}]"))
        events.append(_meta("thread_sort_index", pid, tid, sort_index=tid))
        events += [_slice(tl, s.hop, "hop", s.start, s.end, pid, tid, args) for s in lane]
        tid += 1
    return events, tid


def _faults_and_marks(tl: Timeline) -> list[Event]:
    events = _process(FAULTS_PID, "faults and marks", 0)
    for tid, f in enumerate(tl.faults, start=1):
        end = f.end if f.end is not None else tl.end
        args = {"target": f.target, "active at the end": f.end is None}
        events.append(_meta("thread_name", FAULTS_PID, tid, name=f"fault on {f.target}"))
        events.append(_slice(tl, f.label, "fault", f.start, end, FAULTS_PID, tid, args))
    for m in tl.markers:
        mark = dict(name=m.label, cat=m.kind, ph="i", s="g", ts=_us(tl, m.at), pid=FAULTS_PID)
        events.append(mark | {"tid": 0, "args": {"where": m.where}})
    return events


def _counter(tl: Timeline, link: str, at: float, upstream: float, downstream: float) -> Event:
    args = {"upstream": round(upstream, 1), "downstream": round(downstream, 1)}
    return dict(name=link, cat="link", ph="C", ts=_us(tl, at), pid=LINKS_PID, args=args)


def _links(tl: Timeline) -> list[Event]:
    events = _process(LINKS_PID, f"links (bytes/s; {tl.rates.source})", 1)
    for link in tl.links:
        series: dict[str, list[RateSpan]] = {}
        for s in tl.lanes.get(link, []):
            name = f"{link} while {s.while_stopped} stopped" if s.while_stopped else link
            series.setdefault(name, []).append(s)
        for name, spans in series.items():
            last = None
            for s in spans:
                if last is not None and s.start > last.end + 1e-6:  # a gap: the line drops
                    events.append(_counter(tl, name, last.end, 0.0, 0.0))
                events.append(_counter(tl, name, s.start, s.upstream, s.downstream))
                last = s
            if last is not None:  # close the last step, so the counter ends where it ends
                events.append(_counter(tl, name, last.end, 0.0, 0.0))
    return events


def trace_events(tl: Timeline) -> dict[str, object]:
    """The whole trace as one JSON-ready dict."""
    events = _faults_and_marks(tl) + _links(tl)
    for index, (origin, rows) in enumerate(tl.groups.items()):
        pid = FIRST_ORIGIN_PID + index
        events += _process(pid, f"origin {origin}", 2 + index)
        tid = 1
        for row in rows:
            more, tid = _request(tl, row, pid, tid)
            events += more
    other: Event = dict(format=TRACE_FORMAT, title=tl.title, failure=tl.failure)
    other |= {"diagnosis": tl.headline, "start_unix_s": tl.start}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def render_trace(tl: Timeline) -> str:
    return json.dumps(trace_events(tl), separators=(",", ":"))
