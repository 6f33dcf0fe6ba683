"""The timeline of a test: ``timeline.html`` to read, ``timeline.trace.json`` to zoom, both
renderings of one :class:`~.model.Timeline` (``waterfall`` draws each request's hops)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import ParamSpec

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.diagnostics.timeline.html import render_html
from pytest_wedge.diagnostics.timeline.model import MAX_ROWS, Mark, Timeline, build_timeline
from pytest_wedge.diagnostics.timeline.trace import render_trace, trace_events
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.evidence.truth import FaultRecord, FaultWindow
from pytest_wedge.links.rates import LinkRates

__all__ = [
    "MAX_ROWS",
    "Mark",
    "build_timeline",
    "render_timeline",
    "trace_events",
    "write_timeline",
]
P = ParamSpec("P")


def _page(build: Callable[P, Timeline]) -> Callable[P, str]:
    def render(*args: P.args, **kwargs: P.kwargs) -> str:
        return render_html(build(*args, **kwargs))

    return render


render_timeline = _page(build_timeline)
"""timeline.html as text; the arguments are :func:`build_timeline`'s."""


def write_timeline(
    directory: str | Path,
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
) -> tuple[Path, Path]:
    """Write timeline.html (at most ``max_rows`` rows) and timeline.trace.json (every
    request) into ``directory``; returns both paths. ``started``: the test's start, time 0."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    build = partial(
        build_timeline,
        diagnosis,
        snapshot,
        list(fault_windows),
        watchdogs,
        samples,
        title=title,
        failure=failure,
        marks=list(marks),
        link_rates=link_rates,
        started=started,
    )
    page, trace = out / "timeline.html", out / "timeline.trace.json"
    page.write_text(render_html(build(max_rows=max_rows)))
    trace.write_text(render_trace(build(max_rows=10**9)))
    return page, trace
