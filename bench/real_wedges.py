"""The blind locator on real wedges: random network and process faults on a 1P+1D of real vLLM
(the ``vllm`` worker kind) behind vllm-router, scored against the injected hop.

A real engine keeps no ledger, so there is no oracle: a draw is scored when its harness showed
the wedge (a request overdue, 5 s here, or failed since the fault), against the injected hop;
a draw that never showed is a ``none`` draw, counted apart, where any verdict but ``none`` said
``certain`` is certain-and-wrong. A draw whose harness showed a wedge before its fault is a
failed draw: nothing it shows after could be blamed on the fault. Failed draws count as
failures and ``unknown`` is never right, as in
``bench.wedges``. The faults: every network fault on every proxied link, ``Pause`` of each
component, ``Kill`` of each engine, and ``PauseEngineProcess`` (the EngineCore, which runs
the model, of one engine). On ``decode-0->prefill-0`` a fault reaches the NIXL handshake only,
which the engines made at bring-up: such a draw is expected not to show.

    python -m bench.real_wedges [--draws 40] [--seed S] [--router vllm-router]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import report
from bench.wedges import one_draw, wedge_shows, wilson
from pytest_wedge.diagnostics import diagnose
from pytest_wedge.faults import (
    Down,
    Fault,
    Kill,
    Latency,
    LimitData,
    Pause,
    PauseEngineProcess,
    ResetPeer,
    Slicer,
    SlowClose,
    Timeout,
)
from pytest_wedge.handle import Wedge
from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.scenarios.on_engine import (
    AGENTS,
    CLIENT_DEADLINE_S,
    HISTORY_ROUNDS,
    OVERDUE_S,
    VLLM,
)
from pytest_wedge.spec.topology import TopologySpec
from pytest_wedge.topology.session import WedgeSession
from pytest_wedge.waiting import poll, wait_for

SHOW_WITHIN_S = 10.0
LINKS = ["client->router", "router->prefill-0", "router->decode-0", "decode-0->prefill-0"]
ENGINES = ["prefill-0", "decode-0"]
# Each network fault's parameters, drawn.
NETWORK: dict[str, Any] = {
    "Latency": lambda r: {"latency_ms": r.choice([1500, 3000])},
    "Timeout": lambda r: {"timeout_ms": 0, "stream": r.choice(["upstream", "downstream"])},
    "Down": lambda r: {},
    "ResetPeer": lambda r: {"timeout_ms": 0},
    "LimitData": lambda r: {"bytes": r.choice([200, 2000])},
    "Slicer": lambda r: {
        "average_size_bytes": 8,
        "size_variation_bytes": 4,
        "delay_us": r.choice([100_000, 300_000]),
    },
    "SlowClose": lambda r: {"delay_ms": 2000},
}
PROCESS = {"Pause": ["router", *ENGINES], "Kill": ENGINES, "PauseEngineProcess": ENGINES}


@dataclass
class RealDraw:
    seed: int
    fault: str
    hop: str
    params: dict[str, Any]
    onset_s: float


def draw(seed: int) -> RealDraw:
    rnd = random.Random(seed)
    fault = rnd.choice([*NETWORK, *PROCESS])
    if fault in NETWORK:
        hop = rnd.choice(LINKS)
        params = NETWORK[fault](rnd)
    else:
        hop = rnd.choice(PROCESS[fault])
        # The model runs inside the EngineCore: the worker is that same process.
        params = {"process": "engine-core"} if fault == "PauseEngineProcess" else {}
    return RealDraw(seed, fault, hop, params, round(rnd.uniform(0.1, 1.2), 2))


def make_fault(d: RealDraw) -> Fault:
    kinds: dict[str, Any] = {
        "Latency": Latency,
        "Timeout": Timeout,
        "Down": Down,
        "ResetPeer": ResetPeer,
        "LimitData": LimitData,
        "Slicer": Slicer,
        "SlowClose": SlowClose,
        "Pause": Pause,
        "Kill": Kill,
        "PauseEngineProcess": PauseEngineProcess,
    }
    fault: Fault = kinds[d.fault](target=d.hop, **d.params)
    return fault


def spec_for(router: str) -> TopologySpec:
    return TopologySpec(
        prefill=1,
        decode=1,
        router=RouterSpec(kind=router),
        prefill_worker=VLLM,
        decode_worker=VLLM,
    )


def run_draw(session: WedgeSession, spec: TopologySpec, d: RealDraw) -> dict[str, Any]:
    row: dict[str, Any] = asdict(d)
    with one_draw(session.topology(spec), row) as wedge:
        if wedge is not None:
            _draw(wedge, d, row)
    return row


def _draw(wedge: Wedge, d: RealDraw, row: dict[str, Any]) -> None:
    harness = wedge.harness(
        agents=AGENTS,
        rounds=1000,
        history_rounds=HISTORY_ROUNDS,
        max_tokens=2,
        client_timeout_s=CLIENT_DEADLINE_S,
    )
    began = time.time()
    wait_for(lambda: harness.progress() >= 4, timeout_s=60, what="a healthy start")
    time.sleep(d.onset_s)  # the random onset, not a wait for readiness
    if wedge_shows(wedge, began, OVERDUE_S):
        # Whatever shows after the fault could not be told from what showed before it.
        raise RuntimeError(
            f"the engines were slow before any fault: a harness request overdue {OVERDUE_S:g} s "
            "or failed with no fault applied"
        )
    wedge.apply(make_fault(d))
    started = wedge.faults.windows[-1].started
    shows = poll(
        lambda: wedge_shows(wedge, started, OVERDUE_S), timeout_s=SHOW_WITHIN_S, interval_s=0.1
    )
    row["showed"] = shows.met
    t0 = time.perf_counter()
    blind = diagnose(wedge, "harness", OVERDUE_S, oracle=False)
    row["latency_s"] = round(time.perf_counter() - t0, 4)
    row |= {"blind": blind.location, "confidence": blind.confidence, "evidence": blind.evidence}
    row |= {"decided_by": blind.decided_by, "ruled_out": blind.ruled_out}


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    failed = [r for r in rows if "error" in r]
    ran = [r for r in rows if "error" not in r]
    showed = [r for r in ran if r["showed"]]
    scored = len(showed) + len(failed)
    hits = sum(1 for r in showed if r["blind"] == r["hop"] and r["confidence"] != "unknown")
    low, high = wilson(hits, scored)
    certain_wrong = sum(
        1
        for r in ran
        if r["confidence"] == "certain" and r["blind"] != (r["hop"] if r["showed"] else "none")
    )
    latencies = [r["latency_s"] for r in ran]
    return {
        "real_blind_accuracy_pct": 100 * hits / max(1, scored),
        "real_blind_accuracy_ci_low_pct": 100 * low,
        "real_blind_accuracy_ci_high_pct": 100 * high,
        "real_blind_certain_wrong": certain_wrong,
        "real_blind_unknown_pct": 100
        * sum(1 for r in showed if r["confidence"] == "unknown")
        / max(1, len(showed)),
        "real_blind_none_draws": len(ran) - len(showed),
        "real_blind_scored_draws": scored,
        "real_blind_draws_failed_pct": 100 * len(failed) / max(1, len(rows)),
        "real_diagnosis_latency_s": statistics.median(latencies) if latencies else 0.0,
    }


def _line(i: int, total: int, r: dict[str, Any]) -> str:
    shown = "showed" if r.get("showed") else "did not show"
    line = (
        f"# {i}/{total} seed={r['seed']} {r['fault']}{r['params'] or ''} on {r['hop']}: "
        f"{shown}; blind={r.get('blind')} ({r.get('confidence')})"
    )
    if "error" in r:
        line += " ERROR " + " ".join(str(r["error"]).split())
    return line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.real_wedges")
    parser.add_argument("--draws", type=int, default=40)
    fresh = random.SystemRandom().randrange(1, 1_000_000)
    parser.add_argument("--seed", type=int, default=fresh)
    parser.add_argument("--router", default="vllm-router", choices=["vllm-router", "smg"])
    parser.add_argument("--out", default=".wedge-artifacts/bench/real_wedges.json")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print(f"# seed {args.seed} (replay: python -m bench.real_wedges --seed {args.seed})")
    seeds = [args.seed * 1000 + i for i in range(args.draws)]
    spec = spec_for(args.router)
    started = time.time()
    with (
        tempfile.TemporaryDirectory() as tmp,
        WedgeSession(artifacts_dir=tmp, ready_timeout_s=600.0) as session,
    ):
        rows = []
        for i, seed in enumerate(seeds):
            rows.append(run_draw(session, spec, draw(seed)))
            print(_line(i + 1, len(seeds), rows[-1]), flush=True)
    figures = summarize(rows)
    for name, value in figures.items():
        report(name, value)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    saved = {"seed": args.seed, "figures": figures, "draws": rows}
    out.write_text(json.dumps(saved | {"wall_s": round(time.time() - started, 1)}, indent=1))
    print(f"# draws written to {out}")


if __name__ == "__main__":
    main()
