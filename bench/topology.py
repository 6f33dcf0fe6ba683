"""Topology figures: cold start, per-test reset, memory, decode stub throughput."""

from __future__ import annotations

import statistics
import tempfile
import time

import psutil

from bench.common import median_of, report, tree_rss_mb
from bench.stub_driver import measure_decode_tokens_per_s
from pytest_wedge.spec.topology import StubOptions, TopologySpec
from pytest_wedge.topology.session import WedgeSession


def cold_start_s() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        with WedgeSession(artifacts_dir=tmp) as session:
            session.topology()
            return time.monotonic() - started


def session_memory_mb() -> dict[str, float]:
    """Memory of every process this bench started (Toxiproxy, the stub fork server and its
    workers, the router), summed three ways. PSS is the honest total: a page shared by n
    processes (copy-on-write pages of the fork server, shared libraries) counts 1/n in each.
    The RSS sum counts every shared page once per process that maps it."""
    totals = {"pss": 0.0, "uss": 0.0, "rss": 0.0}
    for proc in psutil.Process().children(recursive=True):
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for key in totals:
            totals[key] += getattr(info, key) / 1e6
    return totals


def cpu_s() -> float:
    """CPU seconds used so far by this process, its reaped children and every live
    descendant: what a bring-up costs whatever else the machine is doing."""
    me = psutil.Process()
    own = me.cpu_times()
    total = own.user + own.system + own.children_user + own.children_system
    for proc in me.children(recursive=True):
        try:
            times = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += times.user + times.system
    return total


def cold_start_8p8d(runs: int = 5) -> None:
    """``cold_start_8p8d_s`` (session + topology, as topology_cold_start_s) and
    ``rss_8p8d_mb`` (the PSS sum, read right after the topology is ready)."""
    seconds: list[float] = []
    cpu: list[float] = []
    memory: list[dict[str, float]] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            cpu_before = cpu_s()
            started = time.monotonic()
            with WedgeSession(artifacts_dir=tmp) as session:
                session.topology(TopologySpec(prefill=8, decode=8))
                seconds.append(time.monotonic() - started)
                cpu.append(cpu_s() - cpu_before)
                memory.append(session_memory_mb())
    report("cold_start_8p8d_s", statistics.median(seconds), seconds)
    report("cold_start_8p8d_cpu_s", statistics.median(cpu), cpu)
    pss = [m["pss"] for m in memory]
    report("rss_8p8d_mb", statistics.median(pss), pss)
    print("# rss_8p8d_mb is the sum of PSS over every process of the 8P+8D session", flush=True)
    report("rss_8p8d_uss_sum_mb", statistics.median(m["uss"] for m in memory))
    report("rss_8p8d_rss_sum_mb", statistics.median(m["rss"] for m in memory))


def main() -> None:
    value, runs = median_of(cold_start_s)
    report("topology_cold_start_s", value, runs)
    cold_start_8p8d()
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
