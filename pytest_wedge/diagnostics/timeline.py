"""timeline.html: one self-contained page (inline CSS, SVG and a little JS; nothing fetched).

One lane per hop, in the order a request crosses them. A request is drawn as bars in the
lanes where it waited: coloured by origin, outlined by final state. Fault windows are shaded
on their target's lane; watchdog firings are ticks. Stable attributes (``data-lane``,
``data-fault``, ``data-watchdog``, ``data-request``) let tests and tools find things.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Iterable, Sequence
from typing import Any

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.diagnostics.hops import hop_order
from pytest_wedge.evidence.snapshot import Snapshot

MAX_BARS = 2000
LANE_H, LABEL_W, WIDTH = 26, 190, 1180
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")
STATE_STROKE = {"ok": "none", "error": "#d62728", "timeout": "#ff7f0e", "pending": "#222",
                "unknown": "#7f7f7f", "aborted": "#8c564b"}  # fmt: skip
Bar = tuple[str, float, float, dict[str, Any]]  # lane, start, end, record


def origin_colour(origin: str) -> str:
    if origin == "harness":
        return PALETTE[0]
    return PALETTE[1 + int(hashlib.md5(origin.encode()).hexdigest(), 16) % (len(PALETTE) - 1)]


def fault_dict(window: Any) -> dict[str, Any]:
    """A FaultWindow (or an already plain dict) as {description, target, started, ended}."""
    if isinstance(window, dict):
        return window
    fault = window.fault
    return {"description": fault.describe(), "target": fault.target,
            "started": window.started, "ended": window.ended}  # fmt: skip


def _latest(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    return max(entries, key=lambda e: (e.get("t") or {}).get("arrived", 0.0)) if entries else None


def request_bars(snapshot: Snapshot, diagnosis: Diagnosis | None) -> list[Bar]:
    """Where each request waited, as (lane, start, end, record) segments."""
    now = snapshot.taken_at
    held = {r.request_id: r.holding for r in (diagnosis.requests if diagnosis else [])}
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for component, entries in snapshot.ledgers.items():
        for e in entries:
            found.setdefault(str(e.get("request_id")), {}).setdefault(component, []).append(e)
    first_prefill = snapshot.prefill[0] if snapshot.prefill else "prefill-0"
    bars: list[Bar] = []
    for r in snapshot.client:
        rid, created = str(r.get("request_id")), float(r.get("created") or now)
        end = float(r.get("finished") or now)
        sent = r.get("sent")
        mine: list[Bar] = [("client", created, float(sent) if sent else end, r)]
        seen = {c: last for c, es in found.get(rid, {}).items()
                if (last := _latest(es)) is not None}  # fmt: skip
        arrivals = [float((e.get("t") or {}).get("arrived", end)) for e in seen.values()]
        direct = all(c in snapshot.decode and e.get("room") is None for c, e in seen.items())
        if sent and not (seen and direct):
            mine.append(("router", float(sent), min(arrivals, default=end), r))
        prefill = next((c for c in seen if c in snapshot.prefill), first_prefill)
        for component, e in seen.items():
            t = e.get("t") or {}
            stop = float(t.get("finished", now))
            start = float(t.get("arrived", stop))
            if component in snapshot.decode and e.get("room") is not None:
                kv = float(t.get("kv_received", stop))
                mine.append((f"{component}->{prefill}", start, kv, r))
                start = kv
            mine.append((component, start, stop, r))
        lane = held.get(rid)
        if lane and "->" in lane and sent and lane not in {b[0] for b in mine}:
            # A link holding the request has no ledger of its own: draw the hold there.
            mine.append((lane, float(sent), end, r))
        bars += mine
    # Requests no client ledger of ours knows (another process's load): worker side only.
    known = {str(r.get("request_id")) for r in snapshot.client}
    for rid, by_component in found.items():
        if rid in known:
            continue
        for component, entries in by_component.items():
            for e in entries:
                t = e.get("t") or {}
                stop = float(t.get("finished", now))
                bars.append((component, float(t.get("arrived", stop)), stop, e))
    return bars


def _pick(bars: list[Bar], origin: str, wedged: set[str], cap: int) -> list[Bar]:
    # The origin under test and its wedged requests first; then the newest of the rest.
    def rank(bar: Bar) -> tuple[int, float]:
        rid = str(bar[3].get("request_id"))
        return (0 if rid in wedged else 1 if bar[3].get("origin") == origin else 2, -bar[2])

    return sorted(bars, key=rank)[:cap]


def _attr(value: object) -> str:
    # '>' stays literal (legal inside a quoted attribute) so data-lane="a->b" greps as written.
    return str(value).replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def render_timeline(
    diagnosis: Diagnosis | None,
    snapshot: Snapshot,
    fault_windows: Iterable[Any] = (),
    watchdogs: Sequence[dict[str, Any]] = (),
    samples: Sequence[Snapshot] = (),
    *,
    max_bars: int = MAX_BARS,
) -> str:
    lanes = hop_order(snapshot)
    faults = [fault_dict(w) for w in fault_windows]
    origin = diagnosis.origin if diagnosis else "harness"
    wedged = {r.request_id for r in diagnosis.requests} if diagnosis else set()
    bars = _pick(request_bars(snapshot, diagnosis), origin, wedged, max_bars)
    marks = [*(diagnosis.watchdogs if diagnosis else []), *watchdogs]
    times = [b[1] for b in bars] + [float(f["started"]) for f in faults]
    times += [float(s.taken_at) for s in samples[:1]]
    t0, t1 = min(times, default=snapshot.taken_at - 1), snapshot.taken_at
    t1 = max(t1, t0 + 0.1)
    span = WIDTH - LABEL_W - 10

    def x(t: float) -> float:
        return LABEL_W + (min(max(t, t0), t1) - t0) / (t1 - t0) * span

    row = {lane: i for i, lane in enumerate(lanes)}

    def band(lane: object) -> tuple[int, int]:
        # A target without a lane of its own (e.g. "toxiproxy") spans every lane.
        i = row.get(str(lane))
        return (i * LANE_H, LANE_H) if i is not None else (0, LANE_H * len(lanes))

    height = LANE_H * len(lanes) + 30
    svg: list[str] = []
    for lane, i in row.items():
        y = i * LANE_H
        mark = ' class="hold"' if diagnosis and lane == diagnosis.location else ""
        svg.append(f'<g data-lane="{_attr(lane)}"{mark}><rect class="lane" x="0" y="{y}" '
                   f'width="{WIDTH}" height="{LANE_H}"/><text x="6" y="{y + 17}">'
                   f"{html.escape(lane)}</text></g>")  # fmt: skip
    for f in faults:
        start, end = float(f["started"]), float(f["ended"]) if f.get("ended") else t1
        y, h = band(f.get("target"))
        width = max(2.0, x(end) - x(start))
        desc = str(f["description"])
        svg.append(f'<g data-fault="{_attr(desc)}" data-target="{_attr(f["target"])}">'
                   f'<rect class="fault" x="{x(start):.1f}" y="{y}" width="{width:.1f}" '
                   f'height="{h}"/><title>{html.escape(desc)}</title></g>')  # fmt: skip
    for lane, start, end, r in bars:
        if lane not in row:
            continue
        state, rid, who = str(r.get("state")), str(r.get("request_id")), str(r.get("origin"))
        tip = f"{rid} {state} ({lane}, {end - start:.2f} s)"
        svg.append(f'<rect class="bar" data-request="{_attr(rid)}" data-origin="{_attr(who)}" '
                   f'data-state="{_attr(state)}" x="{x(start):.1f}" y="{row[lane] * LANE_H + 5}" '
                   f'width="{max(1.0, x(end) - x(start)):.1f}" height="{LANE_H - 10}" '
                   f'fill="{origin_colour(who)}" stroke="{STATE_STROKE.get(state, "#000")}">'
                   f"<title>{html.escape(tip)}</title></rect>")  # fmt: skip
    for w in marks:
        if w.get("at") is None:
            continue
        at, name = x(float(w["at"])), str(w.get("watchdog") or w.get("name"))
        y, h = band(w.get("component") or w.get("lane"))
        svg.append(f'<line class="watchdog" data-watchdog="{_attr(name)}" x1="{at:.1f}" '
                   f'x2="{at:.1f}" y1="{y}" y2="{y + h}"><title>watchdog '
                   f"{html.escape(name)} fired</title></line>")  # fmt: skip
    axis = LANE_H * len(lanes) + 16
    ticks = "".join(f'<text class="tick" x="{x(t0 + k * (t1 - t0) / 5):.1f}" y="{axis}">'
                    f"+{k * (t1 - t0) / 5:.1f}s</text>" for k in range(6))  # fmt: skip
    origins = sorted({str(b[3].get("origin")) for b in bars})
    legend = "".join(f'<span class="key" data-origin="{_attr(o)}" style="background:'
                     f'{origin_colour(o)}">{html.escape(o)}</span>' for o in origins)  # fmt: skip
    head = html.escape(diagnosis.headline()) if diagnosis else "timeline"
    facts = "".join(f"<li>{html.escape(f)}</li>" for f in (diagnosis.evidence if diagnosis else []))
    herrings = "".join(f"<li>{html.escape(h)}</li>"
                       for h in (diagnosis.red_herrings if diagnosis else []))  # fmt: skip
    return _PAGE.format(
        title=head, location=_attr(diagnosis.location if diagnosis else "none"), facts=facts,
        herrings=herrings or "<li>none seen</li>", legend=legend, width=WIDTH, height=height,
        svg="".join(svg) + ticks, shown=len(bars),
    )  # fmt: skip


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>pytest-wedge timeline</title>
<style>
body{{font:13px sans-serif;margin:12px;color:#222}} h1{{font-size:16px}}
svg text{{font:11px monospace;fill:#333}} .lane{{fill:#fafafa;stroke:#ddd}}
g.hold .lane{{fill:#fff0f0}} .fault{{fill:#d62728;opacity:.18}}
.bar{{stroke-width:1.5;opacity:.85}} .bar[data-state=pending]{{stroke-dasharray:3 2}}
.watchdog{{stroke:#9467bd;stroke-width:2}}
.key{{color:#fff;padding:1px 6px;margin-right:4px;cursor:pointer}}
.off{{opacity:.3}}
</style></head><body>
<h1 data-location="{location}">{title}</h1>
<div>origins: {legend} <small>(click to hide; dashed outline = pending, red = error,
orange = timeout; shaded = fault window; purple tick = watchdog fired; {shown} bars)</small></div>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">{svg}</svg>
<h2>evidence</h2><ul>{facts}</ul><h2>red herrings</h2><ul>{herrings}</ul>
<script>
document.querySelectorAll('.key').forEach(function (k) {{
  k.onclick = function () {{
    k.classList.toggle('off');
    var hide = k.classList.contains('off');
    document.querySelectorAll('.bar[data-origin="' + k.dataset.origin + '"]')
      .forEach(function (b) {{ b.style.display = hide ? 'none' : ''; }});
  }};
}});
</script></body></html>
"""
