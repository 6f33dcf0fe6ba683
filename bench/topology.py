"""Topology figures: cold start, per-test reset, memory, decode stub throughput."""

from __future__ import annotations

import tempfile
import time

from bench.common import median_of, report, tree_rss_mb
from bench.stub_driver import measure_decode_tokens_per_s
from pytest_wedge.topology.session import WedgeSession
from pytest_wedge.topology.spec import StubOptions, TopologySpec


def cold_start_s() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        with WedgeSession(artifacts_dir=tmp) as session:
            session.topology()
            return time.monotonic() - started


def main() -> None:
    value, runs = median_of(cold_start_s)
    report("topology_cold_start_s", value, runs)
    with tempfile.TemporaryDirectory() as tmp, WedgeSession(artifacts_dir=tmp) as session:
        topo = session.topology()

        def reset_s() -> float:
            started = time.perf_counter()
            topo.reset()
            return time.perf_counter() - started

        def toxiproxy_reset_s() -> float:
            started = time.perf_counter()
            topo.toxiproxy.reset()
            return time.perf_counter() - started

        value, runs = median_of(reset_s, runs=21)
        baseline, _ = median_of(toxiproxy_reset_s, runs=21)
        report("topology_reset_s", value)
        report("topology_reset_vs_bare_toxiproxy_reset_ratio", value / baseline)
        rss = [tree_rss_mb(session.pids()) for _ in range(5)]
        report("topology_rss_mb", sorted(rss)[2])

        fast = session.topology(TopologySpec(stub=StubOptions(itl_ms=0)))
        port = int(fast.worker_url("decode-0").rsplit(":", 1)[1])
        value, runs = median_of(lambda: measure_decode_tokens_per_s(port, clients=64, tokens=256))
        report("decode_stub_tokens_per_s", value, runs)
