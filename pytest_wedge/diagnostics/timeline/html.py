"""timeline.html: one self-contained page (inline CSS, SVG, a few lines of JS; nothing fetched).

The diagnosis, a time axis, a row per fault window, a lane per link with its byte rate, then a
waterfall row per request grouped by origin. Stable ``data-*`` attributes let tests find it."""

from __future__ import annotations

import html
import math
import time
from collections.abc import Iterable

from pytest_wedge.diagnostics.timeline.model import Timeline
from pytest_wedge.diagnostics.timeline.waterfall import RequestRow
from pytest_wedge.links.rates import RateSpan

HOP_COLOURS = {
    "client": "#9aa5b1",
    "router": "#4e79a7",
    "link": "#f28e2b",
    "prefill": "#59a14f",
    "decode": "#b07aa1",
}
# A big group of another origin starts folded, so the origin under test stays in view.
FOLD_ABOVE = 40
LANE_PX = 34


def hop_kind(hop: str) -> str:
    if "->" in hop:
        return "link"
    return next((k for k in ("prefill", "decode", "router") if hop.startswith(k)), "client")


def _a(value: object) -> str:
    # '>' stays literal (legal inside a quoted attribute) so data-link="a->b" greps as written.
    return str(value).replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _rate(value: float) -> str:
    for unit, size in (("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B/s"


class Scale:
    """Wall-clock seconds to a percentage of the track's width."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.span = start, max(end - start, 1e-6)

    def pct(self, t: float) -> float:
        return min(max((t - self.start) / self.span, 0.0), 1.0) * 100

    def width(self, start: float, end: float) -> float:
        return max(self.pct(end) - self.pct(start), 0.15)

    def ticks(self, target: int = 8) -> list[float]:
        raw = self.span / target
        magnitude = 10 ** math.floor(math.log10(raw))
        step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
        return [k * step for k in range(int(self.span / step) + 1)]


def _anchored(pct: float) -> str:
    """A label at ``pct`` that never runs off the chart: the ones near the right end grow
    leftwards from their point, so the last axis label is never cut off."""
    if pct > 85:
        return f"right:{100 - pct:.2f}%"
    return f"left:{pct:.2f}%"


def _axis(scale: Scale, where: str) -> str:
    ticks = "".join(
        f'<span class="tick" style="{_anchored(scale.pct(scale.start + s))}">+{s:g}s</span>'
        for s in scale.ticks()
    )
    return (
        f'<div class="lane axis {where}"><span class="label"></span><div class="track">'
        f"{ticks}</div></div>"
    )


def _faults(tl: Timeline, scale: Scale) -> str:
    rows = []
    for f in tl.faults:
        end = f.end if f.end is not None else tl.end
        left, width = scale.pct(f.start), scale.width(f.start, end)
        state = "active at the end" if f.end is None else f"{end - f.start:.1f} s"
        text = f"{f.label} ({state})"
        rows.append(
            f'<div class="lane fault-row"><span class="label">fault on {html.escape(f.target)}'
            f'</span><div class="track"><div class="fault" data-fault="{_a(f.label)}" '
            f'data-target="{_a(f.target)}" style="left:{left:.2f}%;width:{width:.2f}%">'
            f'<span class="flabel" style="{_anchored(0 if left < 60 else 100)}">'
            f"{html.escape(text)}</span></div></div></div>"
        )
    return "".join(rows)


def _marks(tl: Timeline, scale: Scale) -> tuple[str, str]:
    """The labels in their own lane, and the lines across the whole chart."""
    labels, lines = [], []
    for i, m in enumerate(tl.markers):
        pct = scale.pct(m.at)
        where = f" on {m.where}" if m.where else ""
        tip = html.escape(f"{m.label}{where} at +{m.at - tl.start:.2f}s")
        labels.append(
            f'<span class="mlabel {m.kind}" style="{_anchored(pct)};top:{(i % 3) * 14}px"'
            f' title="{tip}">{html.escape(m.label)}</span>'
        )
        extra = f' data-watchdog="{_a(m.name)}"' if m.kind == "watchdog" else ""
        lines.append(
            f'<div class="mline {m.kind}" data-mark="{_a(m.kind)}"{extra} '
            f'data-at="{m.at:.3f}" style="left:{pct:.2f}%" title="{tip}"></div>'
        )
    lane = (
        '<div class="lane marks"><span class="label">marks</span><div class="track">'
        + "".join(labels)
        + "</div></div>"
    )
    return lane, "".join(lines)


def _area(spans: Iterable[RateSpan], scale: Scale, peak: float, up: bool) -> str:
    points = []
    for s in spans:
        value = s.upstream if up else s.downstream
        y = LANE_PX - 2 - (value / peak) * (LANE_PX - 4) if peak > 0 else LANE_PX - 2
        points += [f"{scale.pct(s.start) * 10:.1f},{y:.1f}", f"{scale.pct(s.end) * 10:.1f},{y:.1f}"]
    if not points:
        return ""
    first, last = points[0].split(",")[0], points[-1].split(",")[0]
    shape = f"M{first},{LANE_PX} L" + " L".join(points) + f" L{last},{LANE_PX} Z"
    return f'<path class="{"up" if up else "down"}" d="{shape}"/>'


def _links(tl: Timeline, scale: Scale) -> str:
    out = []
    for link in tl.links:
        spans = tl.rates.spans.get(link, [])
        peak = tl.rates.peak(link)
        moving = sum(1 for s in spans if s.upstream > 0 or s.downstream > 0)
        body = _area(spans, scale, peak, True) + _area(spans, scale, peak, False)
        out.append(
            f'<div class="lane link" data-link="{_a(link)}" data-peak="{peak:.0f}" '
            f'data-moving="{moving}"><span class="label">{html.escape(link)}<small>peak '
            f'{_rate(peak)}</small></span><div class="track"><svg viewBox="0 0 1000 '
            f'{LANE_PX}" preserveAspectRatio="none">{body}</svg></div></div>'
        )
    return "".join(out)


def _row(row: RequestRow, scale: Scale) -> str:
    segs = []
    for i, s in enumerate(row.segments):
        last = i == len(row.segments) - 1 and row.state == "pending"
        tip = html.escape(f"{s.hop}: +{s.start - scale.start:.2f}s for {s.end - s.start:.2f}s")
        segs.append(
            f'<i class="seg{" open" if last else ""}" data-hop="{_a(s.hop)}" '
            f'style="left:{scale.pct(s.start):.2f}%;width:{scale.width(s.start, s.end):.2f}%;'
            f'background:{HOP_COLOURS[hop_kind(s.hop)]}" title="{tip}"></i>'
        )
    held = f" held at {row.holding}" if row.holding else ""
    tip = html.escape(
        f"{row.request_id}: {row.state}{held}" + (f" ({row.error})" if row.error else "")
    )
    wedged = ' data-wedged="1"' if row.wedged else ""
    return (
        f'<div class="row" data-request="{_a(row.request_id)}" data-origin="{_a(row.origin)}" '
        f'data-state="{_a(row.state)}"{wedged} title="{tip}"><span class="label">'
        f"{html.escape(row.request_id)} <b>{html.escape(row.state)}</b></span>"
        f'<div class="track">{"".join(segs)}</div></div>'
    )


def _groups(tl: Timeline, scale: Scale) -> str:
    out = []
    for origin, rows in tl.groups.items():
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.state] = counts.get(r.state, 0) + 1
        wedged = sum(r.wedged for r in rows)
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        fold = origin != tl.origin and not wedged and len(rows) > FOLD_ABOVE
        note = f"; {wedged} wedged" if wedged else ""
        out.append(
            f'<details class="origin" data-origin-group="{_a(origin)}"'
            f"{'' if fold else ' open'}><summary><b>{html.escape(origin)}</b>: "
            f"{len(rows)} requests ({summary}{note})</summary>"
            + "".join(_row(r, scale) for r in rows)
            + "</details>"
        )
    return "".join(out)


def render_html(tl: Timeline) -> str:
    scale = Scale(tl.start, tl.end)
    mark_lane, mark_lines = _marks(tl, scale)
    bands = "".join(
        f'<div class="band" style="left:{scale.pct(f.start):.2f}%;width:'
        f'{scale.width(f.start, f.end if f.end is not None else tl.end):.2f}%" '
        f'title="{_a(f.label)}"></div>'
        for f in tl.faults
    )
    legend = "".join(
        f'<span class="key" style="background:{c}">{k}</span>' for k, c in HOP_COLOURS.items()
    )
    failure = ""
    if tl.failure:
        failed = f"failed: {html.escape(tl.failure)}"
        failure = f'<p class="failure" data-failure="{_a(tl.failure)}">{failed}</p>'
    dropped = f"; {tl.dropped} older requests of other origins not drawn" if tl.dropped else ""
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(tl.start))
    facts = "".join(f"<li>{html.escape(f)}</li>" for f in tl.evidence)
    herrings = (
        "".join(f"<li>{html.escape(h)}</li>" for h in tl.red_herrings) or "<li>none seen</li>"
    )
    return _PAGE.format(
        title=html.escape(tl.title),
        test=_a(tl.title),
        failure=failure,
        headline=html.escape(tl.headline),
        location=_a(tl.location),
        legend=legend,
        rows=tl.rows,
        dropped=dropped,
        started=started,
        source=html.escape(tl.rates.source),
        top=_axis(scale, "top"),
        faults=_faults(tl, scale),
        marks=mark_lane,
        links=_links(tl, scale),
        groups=_groups(tl, scale),
        bands=bands,
        lines=mark_lines,
        bottom=_axis(scale, "bottom"),
        facts=facts,
        herrings=herrings,
        lane=LANE_PX,
    )


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}: pytest-wedge timeline</title>
<style>
body{{font:13px sans-serif;margin:12px;color:#222}} h1{{font-size:17px;margin:0 0 4px}}
.failure{{color:#b00;font-weight:bold;margin:2px 0}} .diagnosis{{margin:2px 0 8px}}
.key{{color:#fff;padding:1px 6px;margin-right:4px;font-size:11px}}
.chart{{position:relative;width:1400px;--label:250px;margin-top:8px}}
.lane,.row{{display:flex;align-items:stretch}}
.label{{width:var(--label);flex:none;font:11px monospace;overflow:hidden;white-space:nowrap;
  text-overflow:ellipsis;padding-right:6px;box-sizing:border-box}}
.track{{position:relative;flex:1;border-left:1px solid #ccc}}
.axis .track{{height:16px}} .tick{{position:absolute;font:10px monospace;color:#555;
  white-space:nowrap;padding:0 2px}}
.fault-row .track{{height:18px}} .fault{{position:absolute;top:2px;bottom:2px;
  background:rgba(214,39,40,.25);border:1px solid #d62728}}
.flabel{{position:absolute;top:0;white-space:nowrap;font:11px sans-serif;color:#8b0000;
  padding:0 3px}}
.marks .track{{height:44px}} .mlabel{{position:absolute;white-space:nowrap;font:11px sans-serif;
  padding:0 3px;border-radius:2px;background:#fff}}
.mlabel.failure{{color:#b00;font-weight:bold}} .mlabel.diagnosis{{color:#1f5fa8}}
.mlabel.watchdog{{color:#6a3d9a}}
.link .track{{height:{lane}px;background:#fbfbfb;border-bottom:1px solid #eee}}
.link svg{{width:100%;height:100%;display:block}} .link small{{display:block;color:#777}}
path.up{{fill:rgba(78,121,167,.45);stroke:#4e79a7;vector-effect:non-scaling-stroke}}
path.down{{fill:rgba(242,142,43,.35);stroke:#f28e2b;vector-effect:non-scaling-stroke}}
details.origin{{border-top:1px solid #ddd}} summary{{cursor:pointer;padding:3px 0}}
.row{{height:12px}} .row:nth-child(even){{background:#f7f7f7}}
.row .label{{font-size:9.5px;line-height:12px}} .row[data-wedged] .label{{color:#b00}}
.row[data-wedged]{{background:#ffecec}}
.seg{{position:absolute;top:2px;height:8px;min-width:1px}}
.seg.open{{outline:1px dashed #222}}
.row[data-state=error] .seg:last-child{{outline:1px solid #d62728}}
.row[data-state=timeout] .seg:last-child{{outline:1px solid #ff7f0e}}
.overlay{{position:absolute;top:0;bottom:0;left:var(--label);right:0;pointer-events:none}}
.band{{position:absolute;top:0;bottom:0;background:rgba(214,39,40,.07)}}
.mline{{position:absolute;top:0;bottom:0;border-left:2px solid #6a3d9a}}
.mline.failure{{border-color:#b00}}
.mline.diagnosis{{border-color:#1f5fa8;border-left-style:dashed}}
.mline.mark{{border-color:#555;border-left-style:dotted}}
</style></head><body>
<h1 data-test="{test}">{title}</h1>
{failure}
<p class="diagnosis" data-location="{location}">{headline}</p>
<div>hops: {legend} <small>rows: {rows} requests, grouped by origin
(click a group to fold it){dropped};
dashed = still pending, red = error, orange = timeout; shaded = fault window. Times from
{started} UTC. Link lanes: bytes/s, blue = towards the target, orange = back; from {source}.
The same data: timeline.trace.json (open it in ui.perfetto.dev or chrome://tracing).</small></div>
<div class="chart">
{top}{faults}{marks}{links}{groups}{bottom}
<div class="overlay">{bands}{lines}</div>
</div>
<h2>evidence</h2><ul>{facts}</ul><h2>red herrings</h2><ul>{herrings}</ul>
</body></html>
"""
