"""The link meter and the timeline: what one meter sample costs, whether the meter slows the
harness, and how long the timeline of a ~300-request run takes to build and how big it is.

Harness runs alternate meter on/off (and which of a pair goes first), so drift on a noisy
machine falls on both sides; the figures are medians.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.common import report
from pytest_wedge.diagnostics import collect, locate
from pytest_wedge.diagnostics.timeline import write_timeline
from pytest_wedge.evidence.probe import Probe
from pytest_wedge.handle import Wedge
from pytest_wedge.links.rates import LinkMeter
from pytest_wedge.topology.running import Topology
from pytest_wedge.topology.session import WedgeSession

PAIRS = 7
SAMPLES = 40


def harness_requests_per_s(topology: Topology, meter: bool) -> float:
    """One harness run (30 agents x 10 rounds), in completed requests/s, under a probe at its
    default interval that meters the links or not: the meter's cost is its part of each tick."""
    topology.reset()
    wedge = Wedge(topology, probe_interval_s=0)
    on_sample = LinkMeter(topology).add_sample if meter else None
    probe = Probe(topology, on_sample=on_sample).start()
    try:
        started = time.perf_counter()
        harness = wedge.harness(agents=30, rounds=10, max_tokens=16)
        if not harness.wait(120):
            raise RuntimeError("the harness did not finish within 120 s")
        elapsed = time.perf_counter() - started
        ok = wedge.ledger.by_origin("harness").states()["ok"]
    finally:
        probe.stop()
        wedge.close()
    return ok / elapsed


def sample_seconds(topology: Topology) -> list[float]:
    meter = LinkMeter(topology)
    spent = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        meter.sample()
        spent.append(time.perf_counter() - started)
    return spent


def timeline_of_300(topology: Topology, out: Path) -> tuple[float, float, float, int]:
    """Build and write the timeline of 300 harness requests; (seconds, html kB, trace kB, rows)."""
    topology.reset()
    wedge = Wedge(topology)  # its probe meters the links
    try:
        wedge.harness(agents=30, rounds=10, max_tokens=16).wait(120)
        snapshot = collect(topology, wedge.ledger)
        assert wedge.link_meter is not None
        link_rates = wedge.link_meter.rates()
        started = time.perf_counter()
        page, trace = write_timeline(out, locate(snapshot), snapshot, link_rates=link_rates)
        spent = time.perf_counter() - started
    finally:
        wedge.close()
    rows = page.read_text().count('class="row"')
    return spent, page.stat().st_size / 1e3, trace.stat().st_size / 1e3, rows


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, WedgeSession(artifacts_dir=tmp) as session:
        topology = session.topology()
        harness_requests_per_s(topology, False)  # warm-up: connections, caches
        spent = sample_seconds(topology)
        off: list[float] = []
        on: list[float] = []
        for pair in range(PAIRS):
            order = [(off, False), (on, True)]
            for runs, meter in order if pair % 2 == 0 else reversed(order):
                runs.append(harness_requests_per_s(topology, meter))
        build_s, page_kb, trace_kb, rows = timeline_of_300(topology, Path(tmp) / "timeline")
    report("linkmeter_sample_ms", 1000 * statistics.median(spent))
    off_median, on_median = statistics.median(off), statistics.median(on)
    report("harness_requests_per_s_meter_off", off_median, off)
    report("harness_requests_per_s_meter_on", on_median, on)
    report("linkmeter_overhead_pct", 100.0 * (off_median - on_median) / off_median)
    report("timeline_300_build_s", build_s)
    report("timeline_300_html_kb", page_kb)
    report("timeline_300_trace_kb", trace_kb)
    report("timeline_300_rows", float(rows))
