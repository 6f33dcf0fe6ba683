"""The timeline of a test: ``timeline.html`` to read, ``timeline.trace.json`` to zoom and search.

Both come from one :class:`~pytest_wedge.diagnostics.timeline.model.Timeline`:
``model`` gathers it (``waterfall`` draws each request across the hops it reached), ``html``
renders the page and ``trace`` the Chrome trace events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.diagnostics.timeline.html import render_html
from pytest_wedge.diagnostics.timeline.model import (
    MAX_ROWS,
    Mark,
    Timeline,
    build_timeline,
    fault_dict,
)
from pytest_wedge.diagnostics.timeline.trace import render_trace, trace_events
from pytest_wedge.diagnostics.timeline.waterfall import RequestRow, Segment, request_rows
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.links.rates import LinkRates

MAX_BARS = MAX_ROWS  # the old name: the cap is on rows now (one per request)
PAGE, TRACE = "timeline.html", "timeline.trace.json"

__all__ = [
    "MAX_BARS",
    "MAX_ROWS",
    "PAGE",
    "TRACE",
    "Mark",
    "RequestRow",
    "Segment",
    "Timeline",
    "build_timeline",
    "fault_dict",
    "render_timeline",
    "request_rows",
    "trace_events",
    "write_timeline",
]


def render_timeline(
    diagnosis: Diagnosis | None,
    snapshot: Snapshot,
    fault_windows: Iterable[Any] = (),
    watchdogs: Sequence[dict[str, Any]] = (),
    samples: Sequence[Snapshot] = (),
    *,
    title: str | None = None,
    failure: str | None = None,
    marks: Iterable[Mark] = (),
    link_rates: LinkRates | None = None,
    max_rows: int = MAX_ROWS,
    max_bars: int | None = None,
) -> str:
    """timeline.html as text. ``title``: the test (its node id); ``failure``: its failure
    headline; ``marks``: (time.time(), label) moments to draw, where a label starting with
    "fail" is the failure's moment; ``link_rates``: a :class:`LinkMeter`'s rates (else the
    probe ``samples``' Toxiproxy counters)."""
    tl = build_timeline(
        diagnosis,
        snapshot,
        fault_windows,
        watchdogs,
        samples,
        title=title,
        failure=failure,
        marks=marks,
        link_rates=link_rates,
        max_rows=max_bars if max_bars is not None else max_rows,
    )
    return render_html(tl)


def write_timeline(
    directory: str | Path,
    diagnosis: Diagnosis | None,
    snapshot: Snapshot,
    fault_windows: Iterable[Any] = (),
    watchdogs: Sequence[dict[str, Any]] = (),
    samples: Sequence[Snapshot] = (),
    *,
    title: str | None = None,
    failure: str | None = None,
    marks: Iterable[Mark] = (),
    link_rates: LinkRates | None = None,
    max_rows: int = MAX_ROWS,
) -> tuple[Path, Path]:
    """Write timeline.html and timeline.trace.json (every request, uncapped) into
    ``directory``; returns both paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    marks, fault_windows = list(marks), list(fault_windows)
    kwargs: dict[str, Any] = {
        "title": title,
        "failure": failure,
        "marks": marks,
        "link_rates": link_rates,
    }
    page = build_timeline(
        diagnosis, snapshot, fault_windows, watchdogs, samples, max_rows=max_rows, **kwargs
    )
    whole = build_timeline(
        diagnosis, snapshot, fault_windows, watchdogs, samples, max_rows=10**9, **kwargs
    )
    (out / PAGE).write_text(render_html(page))
    (out / TRACE).write_text(render_trace(whole))
    return out / PAGE, out / TRACE
