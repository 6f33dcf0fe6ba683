"""A seeded, randomized wedge benchmark: the blind locator scored by the oracle.

Each draw picks a fault from the whole vocabulary (network, component, engine) on a random hop
of a 1P+1D or 2P+2D topology, with or without a stray requester on a random worker, and a
random onset. The oracle (the ledger walk over the ground truth) gives the true location; the
blind locator answers from what an operator observes. Both run on the same snapshot.

    python -m bench.wedges [--draws 200] [--seed 11] [--out PATH] [--replay DRAW_SEED ...]

Every draw is written to the JSON artifact with its own seed; ``--replay <seed>`` runs that
draw again alone. One topology per shape is reused; each draw resets it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import report
from pytest_wedge.diagnostics import diagnose
from pytest_wedge.faults import (
    Bandwidth,
    Crash,
    DecodeOnlyRestart,
    Down,
    ErrorStatus,
    Fault,
    Kill,
    Latency,
    LimitData,
    Pause,
    RefuseBootstrap,
    ResetPeer,
    Restart,
    Serialize,
    SlowClose,
    SlowTokens,
    StallAfterTokens,
    StallBeforeFirstToken,
    Timeout,
)
from pytest_wedge.handle import Wedge
from pytest_wedge.spec.topology import TopologySpec
from pytest_wedge.topology.session import WedgeSession
from pytest_wedge.waiting import wait_for

OVERDUE_S = 1.0
SHOW_WITHIN_S = 4.0
SHAPES = {"1P1D": TopologySpec(prefill=1, decode=1), "2P2D": TopologySpec(prefill=2, decode=2)}
NETWORK = ["Latency", "Timeout", "Down", "ResetPeer", "LimitData", "Bandwidth", "SlowClose"]
COMPONENT = ["Pause", "Kill", "Restart", "DecodeOnlyRestart"]
ENGINE = [
    "StallBeforeFirstToken",
    "StallAfterTokens",
    "Serialize",
    "ErrorStatus",
    "SlowTokens",
    "Crash",
    "RefuseBootstrap",
]


@dataclass
class Draw:
    seed: int
    shape: str
    fault: str
    hop: str
    params: dict[str, Any]
    stray: str | None
    onset_s: float


def hops_for(kind: str, spec: TopologySpec) -> list[str]:
    p, d = spec.prefill_names, spec.decode_names
    links = [
        "client->router",
        *(f"router->{w}" for w in [*p, *d]),
        *(f"{dd}->{pp}" for dd in d for pp in p),
    ]
    return {
        "network": links,
        "Pause": ["router", *p, *d],
        "Kill": ["router", *p, *d],
        "Restart": ["router", *p, *d],
        "DecodeOnlyRestart": d,
        "StallBeforeFirstToken": [*p, *d],
        "StallAfterTokens": d,
        "Serialize": d,
        "ErrorStatus": [*p, *d],
        "SlowTokens": d,
        "Crash": [*p, *d],
        "RefuseBootstrap": p,
    }["network" if kind in NETWORK else kind]


def draw(seed: int) -> Draw:
    rnd = random.Random(seed)
    shape = rnd.choice(list(SHAPES))
    spec = SHAPES[shape]
    fault = rnd.choice([*NETWORK, *COMPONENT, *ENGINE])
    params: dict[str, Any] = {
        "Latency": {"latency_ms": rnd.choice([1500, 3000])},
        "Timeout": {"timeout_ms": 0, "stream": rnd.choice(["upstream", "downstream"])},
        "ResetPeer": {"timeout_ms": 0},
        "LimitData": {"bytes": rnd.choice([200, 2000])},
        "Bandwidth": {"rate_kb_per_s": 1},
        "SlowClose": {"delay_ms": 2000},
        "StallAfterTokens": {"tokens": 3},
        "ErrorStatus": {"status": rnd.choice([500, 503])},
        "SlowTokens": {"itl_ms": 300.0},
    }.get(fault, {})
    workers = [*spec.prefill_names, *spec.decode_names]
    stray = rnd.choice(workers) if rnd.random() < 0.5 else None
    return Draw(
        seed,
        shape,
        fault,
        rnd.choice(hops_for(fault, spec)),
        params,
        stray,
        round(rnd.uniform(0.1, 1.2), 2),
    )


def make_fault(d: Draw) -> Fault:
    kinds: dict[str, Any] = {
        "Latency": Latency,
        "Timeout": Timeout,
        "Down": Down,
        "ResetPeer": ResetPeer,
        "LimitData": LimitData,
        "Bandwidth": Bandwidth,
        "SlowClose": SlowClose,
        "Pause": Pause,
        "Kill": Kill,
        "Restart": Restart,
        "DecodeOnlyRestart": DecodeOnlyRestart,
        "StallBeforeFirstToken": StallBeforeFirstToken,
        "StallAfterTokens": StallAfterTokens,
        "Serialize": Serialize,
        "ErrorStatus": ErrorStatus,
        "SlowTokens": SlowTokens,
        "Crash": Crash,
        "RefuseBootstrap": RefuseBootstrap,
    }
    fault: Fault = kinds[d.fault](target=d.hop, **d.params)
    return fault


def injected(d: Draw, spec: TopologySpec) -> set[str]:
    """Where the injection alone says the wedge is (the oracle's own sanity figure)."""
    if d.fault == "DecodeOnlyRestart":
        return {f"{d.hop}->{p}" for p in spec.prefill_names}
    return {d.hop}


def _shows(wedge: Wedge, since: float) -> bool:
    now = time.time()
    return any(
        r.overdue(OVERDUE_S, now)
        or r.held_by_client(OVERDUE_S, now)
        or (r.state in ("error", "timeout", "unknown") and (r.finished or 0) >= since)
        for r in wedge.ledger.by_origin("harness")
    )


def _reset(topology: Any) -> None:
    # Toxiproxy's API can stall removing a toxic under traffic (Shopify/toxiproxy#412): the
    # loads are stopped by then, so a second try a moment later goes through.
    for attempt in range(3):
        try:
            topology.reset()
            return
        except Exception:
            if attempt == 2:
                raise
            time.sleep(2.0)


def run_draw(session: WedgeSession, d: Draw) -> dict[str, Any]:
    spec = SHAPES[d.shape]
    topology = session.topology(spec)
    row: dict[str, Any] = asdict(d)
    try:
        _reset(topology)
    except Exception as exc:
        row["error"] = f"reset: {type(exc).__name__}: {exc}"[:300]
        return row
    wedge = Wedge(topology)
    try:
        if d.stray:
            wedge.stray(d.stray, rate_per_s=5)
        harness = wedge.harness(agents=30, rounds=1000, client_timeout_s=30, think_time_s=0.05)
        wait_for(lambda: harness.progress() >= 10, timeout_s=15, what="a healthy start")
        time.sleep(d.onset_s)
        wedge.apply(make_fault(d))
        started = wedge.faults.windows[-1].started  # the window opens on the probe's mark
        try:
            wait_for(lambda: _shows(wedge, started), timeout_s=SHOW_WITHIN_S, what="the wedge")
            row["showed"] = True
        except Exception:
            row["showed"] = False
        diagnosis = diagnose(wedge, "harness", OVERDUE_S, since=started)
        t0 = time.perf_counter()
        diagnose(wedge, "harness", OVERDUE_S, since=started, oracle=False)
        row["latency_s"] = round(time.perf_counter() - t0, 4)
        oracle = (diagnosis.oracle or {}).get("location", diagnosis.location)
        row |= {
            "blind": diagnosis.location,
            "confidence": diagnosis.confidence,
            "oracle": oracle,
            "injected": sorted(injected(d, spec)),
            "in_flight": sum(1 for r in wedge.ledger.records if r.state == "pending"),
            "decided_by": diagnosis.decided_by[:3],
        }
    except Exception as exc:  # a draw that cannot run is recorded, not fatal
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        try:
            # Faults first: Toxiproxy stalls its API for a minute removing a latency toxic
            # whose connections were closed under it (it flushes the held chunks one by one).
            wedge.faults.revert_all()
            wedge.close()
        except Exception as exc:
            row.setdefault("error", f"close: {type(exc).__name__}: {exc}"[:300])
    return row


def latency_1000_in_flight(session: WedgeSession, runs: int = 5) -> list[float]:
    """A paused router with 1000 harness requests in flight: the blind diagnosis' wall time."""
    topology = session.topology(SHAPES["1P1D"])
    topology.reset()
    wedge = Wedge(topology)
    try:
        wedge.apply(Pause("router"))
        wedge.harness(agents=1000, rounds=1, client_timeout_s=60)
        wait_for(
            lambda: len(wedge.ledger.by_origin("harness").overdue(OVERDUE_S)) >= 1000,
            timeout_s=60,
            what="1000 overdue requests",
        )
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            found = diagnose(wedge, "harness", OVERDUE_S, oracle=False).location
            out.append(time.perf_counter() - t0)
            assert found == "router", found
        return out
    finally:
        wedge.close()
        topology.reset()


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    ok = [r for r in rows if "error" not in r]
    n = max(1, len(ok))
    right = sum(1 for r in ok if r["blind"] == r["oracle"])
    wrong_sure = sum(1 for r in ok if r["blind"] != r["oracle"] and r["confidence"] == "certain")
    unknown = sum(1 for r in ok if r["confidence"] == "unknown")
    agrees = sum(1 for r in ok if r["oracle"] in r["injected"])
    return {
        "draws": len(rows),
        "draws_failed": len(rows) - len(ok),
        "blind_accuracy_pct": 100 * right / n,
        "blind_certain_wrong": wrong_sure,
        "blind_unknown_pct": 100 * unknown / n,
        "oracle_agrees_with_injected_pct": 100 * agrees / n,
        "diagnosis_latency_s": statistics.median(r["latency_s"] for r in ok) if ok else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.wedges")
    parser.add_argument("--draws", type=int, default=int(os.environ.get("WEDGE_BENCH_DRAWS", 200)))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("WEDGE_BENCH_SEED", 11)))
    parser.add_argument(
        "--out", default=os.environ.get("WEDGE_BENCH_OUT", ".wedge-artifacts/bench/wedges.json")
    )
    parser.add_argument("--replay", type=int, nargs="*", default=[])
    args = parser.parse_args(argv if argv is not None else [])
    seeds = args.replay or [args.seed * 100_000 + i for i in range(args.draws)]
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp, WedgeSession(artifacts_dir=tmp) as session:
        rows = []
        for i, seed in enumerate(seeds):
            rows.append(run_draw(session, draw(seed)))
            r = rows[-1]
            print(
                f"# {i + 1}/{len(seeds)} seed={seed} {r['shape']} {r['fault']} on {r['hop']}: "
                f"oracle={r.get('oracle')} blind={r.get('blind')} ({r.get('confidence')})"
                + (f" ERROR {r['error']}" if "error" in r else ""),
                flush=True,
            )
        big = latency_1000_in_flight(session) if not args.replay else []
    figures = summarize(rows)
    for name in (
        "blind_accuracy_pct",
        "blind_certain_wrong",
        "blind_unknown_pct",
        "oracle_agrees_with_injected_pct",
        "diagnosis_latency_s",
    ):
        report(name, figures[name])
    if big:
        figures["diagnosis_latency_1000_inflight_s"] = statistics.median(big)
        report("diagnosis_latency_1000_inflight_s", statistics.median(big), big)
    report("wedge_draws", figures["draws"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "seed": args.seed,
                "figures": figures,
                "draws": rows,
                "wall_s": round(time.time() - started, 1),
            },
            indent=1,
        )
    )
    print(f"# draws written to {out} (replay one: python -m bench.wedges --replay <seed>)")


if __name__ == "__main__":
    main(sys.argv[1:])
