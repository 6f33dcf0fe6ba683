"""Endurance: the catalog's faults in turn over one long-lived topology under steady load,
sampled for leaks.

One 1P+1D topology (process runtime, smg unless ``--router``) lives for the whole run; nothing
resets it. A steady 30-agent harness load runs throughout (one harness after another, sharing
one client ledger). Each cycle applies the next fault of the catalog (every distinct fault of
every scenario file, in catalog order), holds it, reverts it, leaves ``recovery_s`` for the
topology to recover, and then samples, so every sample sits at the same phase of its fault's
cycle. The samples of the first ``warmup_cycles`` (one rotation by default) are left out.

Each sample reads, for every process (router, each stub, Toxiproxy): open file descriptors
and PSS; the router's in-flight gauges and every engine's request gauges from their
``/metrics``; the connections Toxiproxy holds per link (its accepted sockets: Toxiproxy exports
no connection gauge); and the client ledger's pending count. The slope of each series per hour
comes with its interval (bench/slopes.py). A series leaks when the interval's low end is above
the series' bound (``BOUNDS``), growth shown beyond what a clean run shows, and its growth over
the sampled window is more than the load itself can move (``floors``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from bench.slopes import Slope, slope_per_hour
from pytest_wedge.evidence.parse import parse_engine_metrics, parse_router_metrics
from pytest_wedge.evidence.read_public import router_worker_names
from pytest_wedge.faults import (
    CoRestart,
    Crash,
    DecodeOnlyRestart,
    Fault,
    FaultSet,
    Kill,
    LeakSlot,
    Restart,
    Terminate,
)
from pytest_wedge.load import ClientLedger, Harness
from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.scenarios.catalog import catalog
from pytest_wedge.spec.topology import StubOptions, TopologySpec
from pytest_wedge.topology.running import Topology
from pytest_wedge.topology.session import WedgeSession

# Faults that replace a process: its descriptors, memory and gauges would start again from
# nothing at every cycle, and a leak in it would read as a saw-tooth, never a slope.
REPLACES_A_PROCESS = (Kill, Terminate, Restart, Crash, DecodeOnlyRestart, CoRestart)
AGENTS = 30
ROUNDS = 4  # per harness; an agent's history grows with its rounds, so harnesses are short
CLIENT_TIMEOUT_S = 10.0
HOLD_S = 4.0  # a fault's hold when its scenario gives none (for_s)
RECOVERY_S = 8.0
# Room for a leak to grow in view: with SGLang's 64 slots a leak saturates within minutes and
# then reads as a flat line (and the decode as a wedge).
MAX_RUNNING = 1024
# A fault's failures open the router's breakers, and smg keeps them open 60 s: the load
# would read fast 503s (no_available_workers) for most of each cycle. Half-open after 2 s,
# well within the recovery, so each sample sees the topology serving again.
BREAKER_ARGS = ("--cb-timeout-duration-secs", "2")
# Bounded caches must reach their bound within the warm-up, or their filling reads as a leak.
# A stub's ledger keeps 20,000 requests (about 30 MiB of PSS, full after 6 minutes at 60
# requests a second); 2,000 are full within the first rotation.
LEDGER_SIZE = "2000"

# The growth per hour beyond which a series leaks, per kind of series: a series fails when its
# interval's low end is above it. Set from clean 20-minute runs (docs/performance.md,
# "Endurance"): no clean series' low end came above 1.4; the widest clean intervals were
# +-40 requests, +-80 descriptors (Toxiproxy's), +-30 connections, +-15 MiB an hour.
BOUNDS: dict[str, float] = {
    "fds": 20.0,  # a descriptor every 3 minutes, for good
    "pss_mib": 30.0,  # 0.2 KiB a request at 40 requests a second; the largest clean: 2 MiB/h
    "in_flight": 20.0,  # a request every 3 minutes that never leaves the gauge
    "connections": 20.0,  # as for descriptors: a held connection is two of Toxiproxy's
    "pending": 20.0,  # a client request every 3 minutes that never ends
}
# The largest swing of a clean process's PSS after the warm-up: Toxiproxy's Go heap went from
# 33.7 to 49.2 MiB and back within two minutes as the request rate changed.
PSS_FLOOR_MIB = 16.0


@dataclass(frozen=True)
class CycleFault:
    fault: Fault
    hold_s: float
    scenario: str

    @property
    def label(self) -> str:
        return self.fault.describe()


def catalog_faults(spec: TopologySpec) -> tuple[list[CycleFault], list[str]]:
    """Every distinct fault of the catalog this topology can take, and why others are left
    out. A scenario's schedule gives the hold (its ``for_s``) when it has one."""
    known = {*spec.component_names, *spec.link_names()}
    chosen: list[CycleFault] = []
    skipped: list[str] = []
    for scenario in catalog():
        for scheduled in scenario.faults:
            fault = scheduled.fault
            hold = scheduled.for_s if scheduled.for_s is not None else HOLD_S
            if any(c.fault == fault and c.hold_s == hold for c in chosen):
                continue
            if isinstance(fault, REPLACES_A_PROCESS):
                skipped.append(f"{fault.describe()} ({scenario.name}): replaces a process")
            elif fault.target not in known:
                skipped.append(f"{fault.describe()} ({scenario.name}): no {fault.target} here")
            else:
                chosen.append(CycleFault(fault, hold, scenario.name))
    return chosen, skipped


class SteadyLoad:
    """``agents`` agents without a pause: a harness of ``ROUNDS`` rounds, then the next."""

    def __init__(self, url: str, ledger: ClientLedger, agents: int) -> None:
        self.url, self.ledger, self.agents = url, ledger, agents
        self.harnesses = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-load", daemon=True)

    def start(self) -> SteadyLoad:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                harness = Harness(
                    self.url,
                    agents=self.agents,
                    rounds=ROUNDS,
                    ledger=self.ledger,
                    client_timeout_s=CLIENT_TIMEOUT_S,
                    max_duration_s=ROUNDS * CLIENT_TIMEOUT_S * 3,
                )
                with harness:
                    self.harnesses += 1
                    while not harness.wait(0.5) and not self._stop.is_set():
                        pass
        except BaseException as exc:  # reported by the soak, which then fails
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@dataclass
class Sampler:
    """One reading of every series of the topology."""

    topology: Topology
    toxiproxy_pid: int
    ledger: ClientLedger
    pids: dict[str, int] = field(default_factory=dict)

    def processes(self) -> dict[str, int | None]:
        return {**self.topology.pids(), "toxiproxy": self.toxiproxy_pid}

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for name, pid in self.processes().items():
            values[f"{name} fds"], values[f"{name} pss_mib"] = _process(pid)
            if pid is not None:
                self.pids.setdefault(name, pid)
        values.update(self._router())
        for name in [*self.topology.spec.prefill_names, *self.topology.spec.decode_names]:
            values.update(self._engine(name))
        values.update(self._connections())
        values["client pending"] = float(len(self.ledger.view().pending()))
        return values

    def replaced(self) -> list[str]:
        """Components whose process is not the one first sampled (or is gone)."""
        now = self.processes()
        return [f"{n} (pid {p} -> {now.get(n)})" for n, p in self.pids.items() if now.get(n) != p]

    def _router(self) -> dict[str, float]:
        try:
            text = self.topology.router_metrics()
        except Exception:
            return {"router in_flight": math.nan}
        metrics = parse_router_metrics(text, router_worker_names(self.topology))
        out = {"router in_flight": metrics.get("admission_inflight", math.nan)}
        for worker, active in metrics.get("requests_active", {}).items():
            out[f"router in_flight {worker}"] = active
        return out

    def _engine(self, name: str) -> dict[str, float]:
        wanted = ENGINE_GAUGES[name.split("-")[0]]
        try:
            text = self.topology.http.get(self.topology.worker_url(name) + "/metrics").text
        except Exception:
            return {f"{name} {gauge}": math.nan for gauge in wanted}
        read = parse_engine_metrics(text)
        return {f"{name} {gauge}": read.get(gauge, math.nan) for gauge in wanted}

    def _connections(self) -> dict[str, float]:
        """Connections Toxiproxy accepted on each link's listen port (not its upstream ones)."""
        listen = {int(link.listen.rsplit(":", 1)[1]): n for n, link in self.topology.links.items()}
        counts = Counter[str]({name: 0 for name in listen.values()})
        try:
            sockets = psutil.Process(self.toxiproxy_pid).net_connections(kind="tcp")
        except psutil.Error:
            return {f"{name} connections": math.nan for name in listen.values()}
        for sock in sockets:
            if sock.status != psutil.CONN_LISTEN and sock.laddr and sock.laddr.port in listen:
                counts[listen[sock.laddr.port]] += 1
        return {f"{name} connections": float(n) for name, n in counts.items()}


ENGINE_GAUGES = {
    "prefill": (
        "num_running_reqs",
        "num_queue_reqs",
        "num_prefill_prealloc_queue_reqs",
        "num_prefill_inflight_queue_reqs",
    ),
    "decode": (
        "num_running_reqs",
        "num_queue_reqs",
        "num_decode_prealloc_queue_reqs",
        "num_decode_transfer_queue_reqs",
    ),
}


def _process(pid: int | None) -> tuple[float, float]:
    if pid is None:
        return math.nan, math.nan
    try:
        proc = psutil.Process(pid)
        return float(proc.num_fds()), proc.memory_full_info().pss / 2**20
    except psutil.Error:
        return math.nan, math.nan


def series_kind(name: str) -> str:
    if name.endswith(" fds"):
        return "fds"
    if name.endswith(" pss_mib"):
        return "pss_mib"
    if name.endswith(" connections"):
        return "connections"
    if name == "client pending":
        return "pending"
    return "in_flight"


@dataclass
class Run:
    times: list[float] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)
    fault_errors: list[str] = field(default_factory=list)
    cycles: int = 0
    load_avg: list[float] = field(default_factory=list)


def soak(args: argparse.Namespace) -> int:
    smg_like = args.router in ("smg", "sglang-router")
    spec = TopologySpec(
        router_args=(*BREAKER_ARGS, "--policy", args.policy) if smg_like else (),
        stub=StubOptions(max_running=MAX_RUNNING, extra_args=("--ledger-size", LEDGER_SIZE)),
        router=RouterSpec(kind=args.router),
    )
    faults, skipped = catalog_faults(spec)
    warmup = args.warmup_cycles if args.warmup_cycles is not None else len(faults)
    print(f"soak: {args.minutes:g} min, {len(faults)} faults in turn, {warmup} warm-up cycles")
    for line in skipped:
        print(f"  left out: {line}")
    # A folder per run: two soaks at once must not share their logs and samples.
    out = Path(args.out or f".wedge-artifacts/soak/{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    out.mkdir(parents=True, exist_ok=True)
    print(f"soak: samples and logs in {out}")
    run = Run()
    ledger = ClientLedger()
    with WedgeSession(artifacts_dir=out / "artifacts") as session:
        topology = session.topology(spec)
        (toxiproxy_pid,) = set(session.pids()) - set(filter(None, topology.pids().values()))
        sampler = Sampler(topology, toxiproxy_pid, ledger)
        fault_set = FaultSet(topology)
        if args.leak_every:
            fault_set.apply(LeakSlot("decode-0", every=args.leak_every))
            print(f"soak: planted leak: decode-0 keeps one slot of every {args.leak_every}")
        load = SteadyLoad(topology.url, ledger, args.agents).start()
        started = time.monotonic()
        try:
            _cycles(args, run, faults, warmup, fault_set, sampler, load, started)
        finally:
            load.stop()
            fault_set.revert_all()
        replaced = sampler.replaced()
        states = ledger.view().states()
        errors = Counter(
            f"{r.status} {(r.error or '')[:70]}" for r in ledger.view() if r.state != "ok"
        )
    wall_s = time.monotonic() - started
    (out / "samples.json").write_text(
        json.dumps({"times": run.times, "groups": run.groups, "samples": run.samples})
    )
    total = sum(states.values())
    print(
        f"soak: {run.cycles} cycles in {wall_s:.0f} s, {len(run.samples)} samples after the "
        f"warm-up; {total} requests ({total / max(wall_s, 1):.1f}/s): "
        + ", ".join(f"{k} {v}" for k, v in states.items() if v)
    )
    for what, count in errors.most_common(5):
        print(f"  {count} x {what}")
    if run.load_avg:
        print(
            f"soak: machine load (1-min average, {os.cpu_count()} CPUs): "
            f"min {min(run.load_avg):.1f}, mean {sum(run.load_avg) / len(run.load_avg):.1f}, "
            f"max {max(run.load_avg):.1f}"
        )
    problems = [f"fault: {e}" for e in run.fault_errors]
    problems += [f"process replaced during the soak: {r}" for r in replaced]
    if load.error is not None:
        problems.append(f"the load crashed: {load.error!r}")
    leaks = report(run, args.agents)
    for problem in problems:
        print(f"soak: FAILED: {problem}")
    if leaks:
        print(f"soak: FAILED: leak beyond its bound in {', '.join(leaks)}")
    ok = not leaks and not problems and len(run.samples) >= 3
    print(f"soak: {'passed' if ok else 'FAILED'}")
    return 0 if ok else 1


def _cycles(
    args: argparse.Namespace,
    run: Run,
    faults: list[CycleFault],
    warmup: int,
    fault_set: FaultSet,
    sampler: Sampler,
    load: SteadyLoad,
    started: float,
) -> None:
    stop = threading.Event()  # waits on it are the schedule: hold, then recovery
    deadline = started + args.minutes * 60
    while time.monotonic() < deadline and load.error is None:
        entry = faults[run.cycles % len(faults)] if faults else None
        group = "no fault"
        if entry is not None:
            fault = replace(entry.fault)  # a fresh instance: its own toxic and stub names
            hold_s = args.hold_s if args.hold_s is not None else entry.hold_s
            group = f"{entry.label} for {hold_s:g} s"
            try:
                fault_set.apply(fault)
                stop.wait(hold_s)
            except Exception as exc:
                run.fault_errors.append(f"{entry.label}: {exc}".splitlines()[0])
            finally:
                with contextlib.suppress(Exception):
                    fault_set.revert(fault)
        stop.wait(args.recovery_s)
        run.cycles += 1
        if sampler.replaced():
            break  # a process died or was replaced: what follows measures another process
        values = sampler.read()
        if run.cycles > warmup:
            run.times.append(time.monotonic() - started)
            run.groups.append(group)
            run.samples.append(values)
            run.load_avg.append(os.getloadavg()[0])
        print(
            f"cycle {run.cycles} at {time.monotonic() - started:.0f} s: "
            f"{group}" + ("" if run.cycles > warmup else " (warm-up)"),
            flush=True,
        )


def slopes(run: Run) -> dict[str, Slope | None]:
    names = sorted({name for sample in run.samples for name in sample})
    return {
        name: slope_per_hour(run.times, [s.get(name, math.nan) for s in run.samples], run.groups)
        for name in names
    }


def floors(agents: int) -> dict[str, float]:
    """How far a series may move over the sampled window with nothing leaked: a closed loop of
    ``agents`` agents holds at most that many requests, connections and sockets per hop, so a
    change of load (a busier machine) moves those series by up to that much; a process's
    memory swings with the load (a garbage-collected heap most). A leak grows past these."""
    return {kind: float(agents) for kind in BOUNDS} | {"pss_mib": PSS_FLOOR_MIB}


def report(run: Run, agents: int) -> list[str]:
    """Print every series' slope and interval; the series that leak: an interval above the
    bound, and growth over the sampled window beyond what the load itself can move."""
    fitted = slopes(run)
    window_h = (max(run.times) - min(run.times)) / 3600 if run.times else 0.0
    floor = floors(agents)
    width = max((len(n) for n in fitted), default=10)
    print(
        f"\n{'series'.ljust(width)}  {'slope/h':>9}  {'95 % interval /h':>20}  "
        f"{'n':>3}  {'n_eff':>5}  {'r1':>4}  {'bound/h':>7}  {'growth':>7}  verdict"
    )
    leaks = []
    for name, slope in fitted.items():
        kind = series_kind(name)
        if slope is None:
            print(f"{name.ljust(width)}  {'-':>9}  {'too few samples':>20}")
            continue
        growth = slope.per_hour * window_h
        leaking = slope.low > BOUNDS[kind] and growth > floor[kind]
        if leaking:
            leaks.append(name)
        interval = f"[{slope.low:+.1f}, {slope.high:+.1f}]"
        print(
            f"{name.ljust(width)}  {slope.per_hour:>+9.1f}  {interval:>20}  {slope.n:>3}  "
            f"{slope.n_effective:>5.1f}  {slope.lag1:>4.2f}  {BOUNDS[kind]:>7g}  "
            f"{growth:>+7.1f}  " + ("LEAK" if leaking else "ok")
        )
    print(
        f"(growth: the fitted change over the {window_h * 60:.1f} sampled minutes; a leak also "
        f"grows past {floor['in_flight']:g} requests, connections or descriptors, "
        f"{floor['pss_mib']:g} MiB)"
    )
    return leaks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--minutes",
        type=float,
        default=float(os.environ.get("SOAK_MINUTES") or 20),
        help="timed endurance run of this many minutes (env SOAK_MINUTES; default 20)",
    )
    parser.add_argument("--router", default="smg", help="router kind (default smg)")
    parser.add_argument("--agents", type=int, default=AGENTS, help="steady harness agents")
    parser.add_argument(
        "--policy",
        default="round_robin",
        help="smg's (and sglang-router's) --policy; with one prefill and one decode every policy "
        "picks the same workers. cache_aware, smg's default, keeps growing smg's memory "
        "(docs/performance.md, Endurance)",
    )
    parser.add_argument(
        "--warmup-cycles", type=int, help="cycles left unsampled (default: one rotation)"
    )
    parser.add_argument(
        "--hold-s", type=float, help=f"every fault's hold (default: its scenario's, or {HOLD_S})"
    )
    parser.add_argument("--recovery-s", type=float, default=RECOVERY_S)
    parser.add_argument(
        "--leak-every",
        type=int,
        default=int(os.environ.get("SOAK_LEAK_EVERY") or 0),
        help="plant a leak: decode-0 keeps one slot of every N requests (env SOAK_LEAK_EVERY)",
    )
    parser.add_argument(
        "--out", help="samples and logs (default: a folder of its own under .wedge-artifacts/soak)"
    )
