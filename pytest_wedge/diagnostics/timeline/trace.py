"""timeline.trace.json: the timeline as Chrome trace events, for Perfetto's UI and chrome://tracing.

The format is the JSON "Trace Event Format" (``{"traceEvents": [...]}``). The layout mirrors
the page: one process per origin with one thread per request (its hops as complete ``X``
slices), a ``links`` process with one counter per link (bytes/s per direction), and a
``faults and marks`` process with a thread per fault window and global instant events for the
watchdog firings, the diagnosis and the failure. Times are microseconds from the timeline's
start; ``otherData.start_unix_s`` says when that was.

Slices on one thread must nest, or Perfetto drops them. A request's hops can overlap (the
prefill still runs while the decode waits for its KV), so overlapping hops go to a second
thread of the same request, named ``<request> (overlap)``.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_wedge.diagnostics.timeline.model import Timeline
from pytest_wedge.diagnostics.timeline.waterfall import RequestRow, Segment

TRACE_FORMAT = "pytest-wedge/timeline-trace"
FAULTS_PID, LINKS_PID, FIRST_ORIGIN_PID = 1, 2, 10


def _us(tl: Timeline, t: float) -> int:
    # Whole microseconds: float sums of ts + dur would make back-to-back hops overlap by 1e-10.
    return round((t - tl.start) * 1e6)


def _dur(tl: Timeline, start: float, end: float) -> int:
    return max(_us(tl, end) - _us(tl, start), 0)


def _meta(kind: str, pid: int, tid: int | None, **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"name": kind, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


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


def _request(tl: Timeline, row: RequestRow, pid: int, tid: int) -> tuple[list[dict[str, Any]], int]:
    events: list[dict[str, Any]] = []
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
        for seg in lane:
            events.append(
                {
                    "name": seg.hop,
                    "cat": "hop",
                    "ph": "X",
                    "ts": _us(tl, seg.start),
                    "dur": _dur(tl, seg.start, seg.end),
                    "pid": pid,
                    "tid": tid,
                    "args": args,
                }
            )
        tid += 1
    return events, tid


def _faults_and_marks(tl: Timeline) -> list[dict[str, Any]]:
    events = [
        _meta("process_name", FAULTS_PID, None, name="faults and marks"),
        _meta("process_sort_index", FAULTS_PID, None, sort_index=0),
    ]
    for tid, f in enumerate(tl.faults, start=1):
        end = f.end if f.end is not None else tl.end
        events.append(_meta("thread_name", FAULTS_PID, tid, name=f"fault on {f.target}"))
        events.append(
            {
                "name": f.label,
                "cat": "fault",
                "ph": "X",
                "ts": _us(tl, f.start),
                "dur": _dur(tl, f.start, end),
                "pid": FAULTS_PID,
                "tid": tid,
                "args": {"target": f.target, "active at the end": f.end is None},
            }
        )
    for m in tl.moments:
        events.append(
            {
                "name": m.label,
                "cat": m.kind,
                "ph": "i",
                "s": "g",
                "ts": _us(tl, m.at),
                "pid": FAULTS_PID,
                "tid": 0,
                "args": {"where": m.where},
            }
        )
    return events


def _links(tl: Timeline) -> list[dict[str, Any]]:
    events = [
        _meta("process_name", LINKS_PID, None, name=f"links (bytes/s; {tl.rates.source})"),
        _meta("process_sort_index", LINKS_PID, None, sort_index=1),
    ]
    for link in tl.links:
        spans = tl.rates.spans.get(link, [])
        for s in spans:
            events.append(
                {
                    "name": link,
                    "cat": "link",
                    "ph": "C",
                    "ts": _us(tl, s.start),
                    "pid": LINKS_PID,
                    "args": {
                        "upstream": round(s.upstream, 1),
                        "downstream": round(s.downstream, 1),
                    },
                }
            )
        if spans:  # close the last step, so the counter ends where the samples end
            events.append(
                {
                    "name": link,
                    "cat": "link",
                    "ph": "C",
                    "ts": _us(tl, spans[-1].end),
                    "pid": LINKS_PID,
                    "args": {"upstream": 0.0, "downstream": 0.0},
                }
            )
    return events


def trace_events(tl: Timeline) -> dict[str, Any]:
    """The whole trace as one JSON-ready dict."""
    events = _faults_and_marks(tl) + _links(tl)
    for index, (origin, rows) in enumerate(tl.groups.items()):
        pid = FIRST_ORIGIN_PID + index
        events.append(_meta("process_name", pid, None, name=f"origin {origin}"))
        events.append(_meta("process_sort_index", pid, None, sort_index=2 + index))
        tid = 1
        for row in rows:
            more, tid = _request(tl, row, pid, tid)
            events += more
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "format": TRACE_FORMAT,
            "title": tl.title,
            "failure": tl.failure,
            "diagnosis": tl.headline,
            "start_unix_s": tl.start,
        },
    }


def render_trace(tl: Timeline) -> str:
    return json.dumps(trace_events(tl), separators=(",", ":"))
