"""Probe overhead: harness throughput with the probe sampling (every 0.1 s, the default) versus
off, measured side by side on one topology in one run.

Each run is a 30-agent x 40-round harness through the router, with a fresh ``Wedge`` (so a
probe-on run also pays for starting the probe's sampler process). Runs alternate on/off over
``PAIRS`` pairs, and which of a pair goes first alternates too, so drift on a noisy machine
falls on both sides; the figure is the relative drop of the medians (target <= 2 %).
"""

from __future__ import annotations

import statistics
import tempfile
import time

from bench.common import report
from pytest_wedge.glue.config import SETTINGS
from pytest_wedge.handle import Wedge
from pytest_wedge.topology.running import Topology
from pytest_wedge.topology.session import WedgeSession

PAIRS = 10
AGENTS, ROUNDS = 30, 40
PROBE_INTERVAL_S = float(SETTINGS["wedge_probe_interval"].default)


def harness_requests_per_s(topology: Topology, probe_interval_s: float) -> float:
    """One harness run (``AGENTS`` x ``ROUNDS``) through the router, in completed requests/s."""
    topology.reset()
    wedge = Wedge(topology, probe_interval_s=probe_interval_s)
    try:
        started = time.perf_counter()
        harness = wedge.harness(agents=AGENTS, rounds=ROUNDS, max_tokens=16)
        if not harness.wait(300):
            raise RuntimeError("the harness did not finish within 300 s")
        elapsed = time.perf_counter() - started
        ok = wedge.ledger.by_origin("harness").states()["ok"]
    finally:
        wedge.close()
    if ok != harness.max_requests:
        raise RuntimeError(f"only {ok} of {harness.max_requests} harness requests ended ok")
    return ok / elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, WedgeSession(artifacts_dir=tmp) as session:
        topology = session.topology()
        harness_requests_per_s(topology, 0.0)  # warm-up: connections, caches
        off: list[float] = []
        on: list[float] = []
        for pair in range(PAIRS):
            order = [(off, 0.0), (on, PROBE_INTERVAL_S)]
            for runs, interval in order if pair % 2 == 0 else reversed(order):
                runs.append(harness_requests_per_s(topology, interval))
    off_median, on_median = statistics.median(off), statistics.median(on)
    report("harness_requests_per_s_probe_off", off_median, off)
    report("harness_requests_per_s_probe_on", on_median, on)
    report("probe_overhead_pct", 100.0 * (off_median - on_median) / off_median)
