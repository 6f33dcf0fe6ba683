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
LANE_PX = 40


def hop_kind(hop: str) -> str:
    if "->" in hop:
        return "link"
    return next((k for k in ("prefill", "decode", "router") if hop.startswith(k)), "client")


def _a(value: object) -> str:
    # '>' stays literal (legal inside a quoted attribute) so data-link="a->b" greps as written.
    return str(value).replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def _size(value: float) -> str:
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{value:.0f} B"


def _rate(value: float) -> str:
    return f"{_size(value)}/s"


class Scale:
    """Wall-clock seconds to a percentage of the track's width."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.span = start, max(end - start, 1e-6)

    def pct(self, t: float) -> float:
        return min(max((t - self.start) / self.span, 0.0), 1.0) * 100

    def width(self, start: float, end: float) -> float:
        return max(self.pct(end) - self.pct(start), 0.15)

    def ticks(self, target: int = 8) -> list[float]:
        step = round_up(self.span / target)
        return [k * step for k in range(int(self.span / step) + 1)]


def round_up(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above ``value`` (> 0)."""
    magnitude = 10.0 ** math.floor(math.log10(value))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= value)


def _anchored(pct: float) -> str:
    """A label at ``pct`` that never runs off the chart: the ones near the right end grow
    leftwards from their point, so the last axis label is never cut off."""
    if pct > 85:
        return f"right:{100 - pct:.2f}%"
    return f"left:{pct:.2f}%"


def _axis(scale: Scale, where: str, zero: str) -> str:
    ticks = "".join(
        f'<span class="tick" style="{_anchored(scale.pct(scale.start + s))}">+{s:g}s</span>'
        for s in scale.ticks()
    )
    return (
        f'<div class="lane axis {where}" data-zero="{_a(zero)}"><span class="label">'
        f'seconds since the {html.escape(zero)}</span><div class="track">{ticks}</div></div>'
    )


def _faults(tl: Timeline, scale: Scale) -> str:
    rows = []
    for f in tl.faults:
        end = f.end if f.end is not None else tl.end
        left, width = scale.pct(f.start), scale.width(f.start, end)
        state = "active at the end" if f.end is None else f"{end - f.start:.1f} s"
        until = "on" if f.end is None else f"to +{end - tl.start:.2f}s"
        text = f"{f.label} ({state}): +{f.start - tl.start:.2f}s {until}"
        rows.append(
            f'<div class="lane fault-row"><span class="label">fault on {html.escape(f.target)}'
            f'</span><div class="track"><div class="fault" data-fault="{_a(f.label)}" '
            f'data-since="{f.start - tl.start:.3f}" '
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


def _area(spans: Iterable[RateSpan], scale: Scale, top: float, up: bool) -> str:
    """A step line per run of adjoining spans: a gap (a stop's part of a step) stays empty."""
    runs: list[list[RateSpan]] = []
    for s in spans:
        if not runs or s.start > runs[-1][-1].end + 1e-6:
            runs.append([])
        runs[-1].append(s)

    def x(t: float) -> str:
        return f"{scale.pct(t) * 10:.1f}"

    def y(s: RateSpan) -> str:
        return f"{LANE_PX - 1 - (s.upstream if up else s.downstream) / top * (LANE_PX - 2):.1f}"

    shape = " ".join(
        f"M{x(run[0].start)},{LANE_PX} "
        + " ".join(f"L{x(s.start)},{y(s)} L{x(s.end)},{y(s)}" for s in run)
        + f" L{x(run[-1].end)},{LANE_PX} Z"
        for run in runs
    )
    return f'<path class="{"up" if up else "down"}" d="{shape}"/>' if runs else ""


def _stopped(spans: list[RateSpan], scale: Scale, top: float) -> tuple[str, str]:
    """Steps all inside a stop of a link end whose bytes moved anyway: grey, and a note that
    says why (a stopped process itself moves nothing)."""
    if not spans:
        return "", ""
    rects = []
    for s in spans:
        height = max(s.upstream, s.downstream) / top * (LANE_PX - 2)
        x, width = scale.pct(s.start) * 10, (scale.pct(s.end) - scale.pct(s.start)) * 10
        rects.append(
            f'<rect class="stopped" x="{x:.1f}" width="{width:.1f}" '
            f'y="{LANE_PX - 1 - height:.1f}" height="{height:.1f}"/>'
        )
    total = sum((s.upstream + s.downstream) * (s.end - s.start) for s in spans)
    who = spans[0].while_stopped
    text = html.escape(
        f"{_size(total)} moved while {who} was stopped (grey), not by it: into its kernel's "
        "socket buffers, or a diagnosis's /health through every link"
    )
    # Over the grey steps, wrapped within them; the whole text is its tooltip too.
    where = f"left:{scale.pct(spans[0].start):.2f}%;right:{100 - scale.pct(spans[-1].end):.2f}%"
    why = (
        f'<span class="why" data-while-stopped="{_a(who)}" data-bytes="{total:.0f}" '
        f'style="{where}" title="{text}">{text}</span>'
    )
    return "".join(rects), why


def _links(tl: Timeline, scale: Scale) -> str:
    out = []
    for link in tl.links:
        lane = tl.lanes.get(link, [])
        drawn = [s for s in lane if not s.while_stopped]
        peak = max((max(s.upstream, s.downstream) for s in lane), default=0.0)
        top = round_up(peak) if peak > 0 else 1.0
        moving = sum(1 for s in drawn if s.upstream > 0 or s.downstream > 0)
        rects, why = _stopped([s for s in lane if s.while_stopped], scale, top)
        body = _area(drawn, scale, top, True) + _area(drawn, scale, top, False) + rects
        yaxis = (
            f'<span class="yaxis" data-ymax="{top:.0f}"><b class="ytop">{_rate(top)}</b>'
            '<b class="ybottom">0</b></span>'
        )
        label = ""
        if peak > 0:
            at = next(s for s in lane if max(s.upstream, s.downstream) == peak)
            pct = scale.pct((at.start + at.end) / 2)
            label = (
                f'<span class="peak" data-peak-at="{(at.start + at.end) / 2 - tl.start:.2f}" '
                f'style="{_anchored(pct)};top:{(1 - peak / top) * (LANE_PX - 2):.0f}px">'
                f"&#9650; {_rate(peak)}</span>"
            )
        out.append(
            f'<div class="lane link" data-link="{_a(link)}" data-peak="{peak:.0f}" '
            f'data-moving="{moving}"><span class="label">{html.escape(link)}<small>peak '
            f'{_rate(peak)}</small></span><div class="track">{yaxis}{label}{why}'
            f'<svg viewBox="0 0 1000 {LANE_PX}" preserveAspectRatio="none">{body}</svg></div></div>'
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
        zero=html.escape(tl.zero),
        top=_axis(scale, "top", tl.zero),
        faults=_faults(tl, scale),
        marks=mark_lane,
        links=_links(tl, scale),
        groups=_groups(tl, scale),
        bands=bands,
        lines=mark_lines,
        bottom=_axis(scale, "bottom", tl.zero),
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
.why{{position:absolute;bottom:1px;max-height:{lane}px;overflow:hidden;font:9px/10px sans-serif;
  color:#444;padding:0 3px}}
.yaxis{{position:absolute;left:0;top:0;bottom:0;width:100%;border-top:1px dotted #ccc;
  pointer-events:none}} .yaxis b{{position:absolute;left:2px;font:9px monospace;color:#777}}
.ytop{{top:0}} .ybottom{{bottom:0}}
.peak{{position:absolute;z-index:1;font:9px monospace;color:#333;white-space:nowrap;
  padding:0 2px;background:rgba(255,255,255,.85)}}
rect.stopped{{fill:rgba(120,120,120,.5)}}
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
{started} UTC (0 = the {zero}). Link lanes: bytes/s on each lane's own scale (its top at the
left), blue = towards the target, orange = back, grey = moved while a link end was stopped;
from {source}.
The same data: timeline.trace.json (open it in ui.perfetto.dev or chrome://tracing).</small></div>
<div class="chart">
{top}{faults}{marks}{links}{groups}{bottom}
<div class="overlay">{bands}{lines}</div>
</div>
<h2>evidence</h2><ul>{facts}</ul><h2>red herrings</h2><ul>{herrings}</ul>
</body></html>
"""
