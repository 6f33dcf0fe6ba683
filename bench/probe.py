"""Probe overhead: harness throughput with the probe sampling (once a second, the default)
versus off, measured side by side on one topology in one run.

Each run is a 30-agent x 40-round harness through the router, with a fresh ``Wedge`` (so a
probe-on run also pays for starting its thread, which also meters the links). Runs alternate
on/off over ``PAIRS`` pairs, and which of a pair goes first alternates too.

The figure, ``probe_overhead_pct``, is the median over the pairs of each pair's relative drop
(target <= 2 %). A shared VM's speed drifts by a quarter within tens of seconds, far more than
the probe costs; the two runs of a pair are adjacent in time, so a drift falls on both, and the
median sets aside the pairs a step in speed cut in two. ``probe_overhead_pct_of_medians`` is
the drop of the on and off medians, the same figure without pairing, for comparison.
``probe_overhead_pct_stderr`` is the figure's standard error.

Because the pairs' spread hides a cost of 1-2 %, the same drop is also measured amplified:
``AMPLIFIED`` probes at once (each a full probe, metering the links too) against none, over
``AMPLIFIED_PAIRS`` pairs. ``probe_overhead_pct_per_probe_amplified`` is that median drop
divided by ``AMPLIFIED``: the signal grows with the number of probes while the machine's noise
does not, so it resolves what one probe costs about four times as finely.

Each run's CPU time is also measured: this process, every process under it (stubs, router,
Toxiproxy) and the children this process reaped. ``probe_cpu_s_per_run`` is the difference of
the on and off medians: what the probe costs in CPU-seconds, whoever pays it.
``probe_own_cpu_s_per_run`` is the probe's own share, read directly: its threads and the
``ss`` runs it reaped (the servers' answers to it are in the first figure only).
"""

from __future__ import annotations

import math
import resource
import statistics
import tempfile
import threading
import time

import psutil

from bench.common import report
from pytest_wedge.evidence.probe import Probe
from pytest_wedge.handle import Wedge
from pytest_wedge.links.rates import LinkMeter
from pytest_wedge.plugin.settings import SETTINGS
from pytest_wedge.topology.running import Topology
from pytest_wedge.topology.session import WedgeSession

PAIRS = 30
AMPLIFIED, AMPLIFIED_PAIRS = 4, 10
AGENTS, ROUNDS = 30, 40
PROBE_INTERVAL_S = float(SETTINGS["wedge_probe_interval"].default)


def tree_cpu_s() -> dict[int | str, float]:
    """CPU-seconds so far of this process, of each process under it (with the children each
    reaped), and of the children this process reaped; keyed by PID so that a difference of two
    readings counts only processes seen in both or started in between."""
    me = psutil.Process()
    times = me.cpu_times()
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    out: dict[int | str, float] = {
        "self": times.user + times.system,
        "reaped": reaped.ru_utime + reaped.ru_stime,
    }
    for proc in me.children(recursive=True):
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        out[proc.pid] = t.user + t.system + t.children_user + t.children_system
    return out


def cpu_between(before: dict[int | str, float], after: dict[int | str, float]) -> float:
    return sum(value - before.get(key, 0.0) for key, value in after.items())


def reaped_cpu_s() -> float:
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return reaped.ru_utime + reaped.ru_stime


def probe_threads_cpu_s() -> float:
    """CPU-seconds so far of the probe's threads in this process (its sampling thread, which
    also meters the links, and its fetch pool)."""
    ours = {t.native_id for t in threading.enumerate() if t.name.startswith("wedge-probe")}
    return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id in ours)


def harness_run(
    topology: Topology, probe_interval_s: float, extra_probes: int = 0
) -> tuple[float, float, float]:
    """One harness run (``AGENTS`` x ``ROUNDS``) through the router: completed requests/s, the
    CPU-seconds the whole process tree spent on it (the Wedge's start to its close), and the
    probe's own CPU-seconds. ``extra_probes``: that many more probes run beside the Wedge's."""
    topology.reset()
    cpu_before = tree_cpu_s()
    # The children this process reaps during a run are the probe's ss runs.
    reaped_before = reaped_cpu_s()
    wedge = Wedge(topology, probe_interval_s=probe_interval_s)
    extra = [
        Probe(topology, PROBE_INTERVAL_S, on_sample=LinkMeter(topology).add_sample).start()
        for _ in range(extra_probes)
    ]
    try:
        started = time.perf_counter()
        harness = wedge.harness(agents=AGENTS, rounds=ROUNDS, max_tokens=16)
        if not harness.wait(300):
            raise RuntimeError("the harness did not finish within 300 s")
        elapsed = time.perf_counter() - started
        ok = wedge.ledger.by_origin("harness").states()["ok"]
        own_s = probe_threads_cpu_s() + reaped_cpu_s() - reaped_before
    finally:
        for probe in extra:
            probe.stop()
        wedge.close()
    cpu_s = cpu_between(cpu_before, tree_cpu_s())
    if ok != harness.max_requests:
        raise RuntimeError(f"only {ok} of {harness.max_requests} harness requests ended ok")
    return ok / elapsed, cpu_s, own_s


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, WedgeSession(artifacts_dir=tmp) as session:
        topology = session.topology()
        harness_run(topology, 0.0)  # warm-up: connections, caches
        off: list[tuple[float, float, float]] = []
        on: list[tuple[float, float, float]] = []
        for pair in range(PAIRS):
            order = [(off, 0.0), (on, PROBE_INTERVAL_S)]
            for runs, interval in order if pair % 2 == 0 else reversed(order):
                runs.append(harness_run(topology, interval))
        amplified_drops = []
        for pair in range(AMPLIFIED_PAIRS):
            rates: dict[int, float] = {}
            for extra in (0, AMPLIFIED) if pair % 2 == 0 else (AMPLIFIED, 0):
                rates[extra] = harness_run(topology, 0.0, extra_probes=extra)[0]
            amplified_drops.append(100.0 * (rates[0] - rates[AMPLIFIED]) / rates[0])
    off_rates, on_rates = [r for r, _, _ in off], [r for r, _, _ in on]
    off_cpu, on_cpu = [c for _, c, _ in off], [c for _, c, _ in on]
    own = [o for _, _, o in on]
    off_median, on_median = statistics.median(off_rates), statistics.median(on_rates)
    pairs = zip(off_rates, on_rates, strict=True)
    drops = [100.0 * (r_off - r_on) / r_off for r_off, r_on in pairs]
    report("harness_requests_per_s_probe_off", off_median, off_rates)
    report("harness_requests_per_s_probe_on", on_median, on_rates)
    report("probe_overhead_pct", statistics.median(drops), drops)
    # Its resolution: the standard error of a median of n normal draws is about 1.25 SD/sqrt(n).
    report("probe_overhead_pct_stderr", 1.2533 * statistics.stdev(drops) / math.sqrt(len(drops)))
    report("probe_overhead_pct_of_medians", 100.0 * (off_median - on_median) / off_median)
    per_probe = [drop / AMPLIFIED for drop in amplified_drops]
    report("probe_overhead_pct_per_probe_amplified", statistics.median(per_probe), per_probe)
    report(
        "probe_overhead_pct_per_probe_amplified_stderr",
        1.2533 * statistics.stdev(per_probe) / math.sqrt(len(per_probe)),
    )
    report("harness_cpu_s_probe_off", statistics.median(off_cpu), off_cpu)
    report("harness_cpu_s_probe_on", statistics.median(on_cpu), on_cpu)
    report("probe_cpu_s_per_run", statistics.median(on_cpu) - statistics.median(off_cpu))
    report("probe_own_cpu_s_per_run", statistics.median(own), own)
    # The probe's own share of each probe-on run's CPU, read within the run: a drift of the
    # machine's speed falls on both terms, so this needs no pairing.
    shares = [100.0 * o / c for o, c in zip(own, on_cpu, strict=True)]
    report("probe_own_cpu_share_pct", statistics.median(shares), shares)
