"""A seeded, randomized wedge benchmark: the blind locator scored against an independent oracle.

Each draw picks a fault from the whole vocabulary (network, component, engine) on a random hop
of a 1P+1D or 2P+2D topology, with or without a stray requester on a random worker, and a
random onset. The blind locator answers from what an operator observes, with nothing of the
ground truth (no fault window); the oracle (diagnostics/oracle.py) gives the reference location
from the stub ledgers and the injected fault. Every draw where the two references differ (the
oracle and the injected hop) is classified: did not manifest, wedged elsewhere (documented), or
oracle wrong.

Scoring: failed draws (and draws the oracle could not score) count as failures; draws with no
wedge to locate (the oracle says ``none``) are counted apart and left out of accuracy; an
``unknown`` verdict is never right; a ``certain`` verdict away from the oracle's location is
counted on every scored draw, a ``none`` draw included. Accuracy comes with a Wilson 95 %
interval; blind-vs-injected scores the draws whose harness showed the wedge against the
injected hop (or its documented exception), without the oracle.

One draw in ``HELDOUT_EVERY`` is reserved for the held-out family, which no rule may be tuned
on: every fault on the 1P+3D shape, which the main draws, the catalog and the tests never use.
It is scored apart and left out of the main figures. A family is spent once its draws are read
to fix the locator, and its faults join the main draws: Slicer and Bandwidth on 2P+2D transfer
links (77.8 % at seed 755773, 53.8 % at 98044), then every fault on 2P+1D (89.1 % to 100 %
over 13 runs, spent at 746000 for the router restart that breaks streams).

    python -m bench.wedges [--draws 400] [--seed S] [--out PATH] [--replay DRAW_SEED ...] [--heavy]

``--heavy`` runs it under the heavy recipe: the catalog looping under ``-n 4`` beside three
busy loops, as on a loaded CI runner (``loadavg_1min_median`` says how loaded it was).

Every run draws a fresh seed unless given one, and prints it first; ``--seed S --draws N``
replays a run, ``--replay <draw seed>`` one draw. One topology per shape is reused; each draw
resets it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import report
from bench.neighbours import catalog_load
from pytest_wedge.diagnostics import diagnose
from pytest_wedge.diagnostics.hops import UNREAD
from pytest_wedge.diagnostics.oracle import InjectedFault, elsewhere, injected_faults, locate
from pytest_wedge.evidence.snapshot import Snapshot, collect
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
    Slicer,
    SlowClose,
    SlowTokens,
    StallAfterTokens,
    StallBeforeFirstToken,
    Timeout,
)
from pytest_wedge.handle import Wedge
from pytest_wedge.load import Harness
from pytest_wedge.spec.topology import TopologySpec
from pytest_wedge.topology.session import WedgeSession
from pytest_wedge.waiting import wait_for

OVERDUE_S = 1.0
SHOW_WITHIN_S = 4.0
# The heavy recipe (--heavy): the catalog looping under -n 4 beside three busy loops, bounded
# in rounds (about 40 s each there) well past a 400-draw run.
HEAVY = {"workers": 4, "rounds": 200, "busy": 3}
# A decode-only restart first drops what the decode held; the wedge it models (its transfers)
# shows on requests sent after the decode is back, a second overdue and more.
TRANSFER_WEDGE_WITHIN_S = 8.0
DRAWS_PER_SEED = 100_000  # a draw's seed: run seed * DRAWS_PER_SEED + index
HELDOUT_EVERY = 6  # one draw in 6 is from the held-out family: 66 of 400
MAIN_SHAPES = ["1P1D", "2P2D", "2P1D"]
HELDOUT_SHAPE = "1P3D"
SHAPES = {
    "1P1D": TopologySpec(prefill=1, decode=1),
    "2P2D": TopologySpec(prefill=2, decode=2),
    "2P1D": TopologySpec(prefill=2, decode=1),
    HELDOUT_SHAPE: TopologySpec(prefill=1, decode=3),
}
NETWORK = [
    "Latency",
    "Timeout",
    "Down",
    "ResetPeer",
    "LimitData",
    "Bandwidth",
    "Slicer",
    "SlowClose",
]
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
    heldout: bool = False


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


def transfer_links(spec: TopologySpec) -> list[str]:
    return [f"{d}->{p}" for d in spec.decode_names for p in spec.prefill_names]


def in_heldout_family(shape: str) -> bool:
    """Every fault on the held-out shape."""
    return shape == HELDOUT_SHAPE


def draw(seed: int) -> Draw:
    """The draw of ``seed``; its index in the run (``seed % DRAWS_PER_SEED``) says whether it
    is one reserved for the held-out family."""
    rnd = random.Random(seed)
    reserved = seed % DRAWS_PER_SEED % HELDOUT_EVERY == HELDOUT_EVERY - 1
    shape = HELDOUT_SHAPE if reserved else rnd.choice(MAIN_SHAPES)
    spec = SHAPES[shape]
    fault = rnd.choice([*NETWORK, *COMPONENT, *ENGINE])
    table: dict[str, dict[str, Any]] = {
        "Latency": {"latency_ms": rnd.choice([1500, 3000])},
        "Timeout": {"timeout_ms": 0, "stream": rnd.choice(["upstream", "downstream"])},
        "ResetPeer": {"timeout_ms": 0},
        "LimitData": {"bytes": rnd.choice([200, 2000])},
        "Bandwidth": {"rate_kb_per_s": 1},
        "Slicer": {
            "average_size_bytes": (size := rnd.choice([4, 8, 16])),
            "size_variation_bytes": size // 2,
            "delay_us": rnd.choice([50_000, 100_000, 300_000]),
            "stream": rnd.choice(["upstream", "downstream"]),
        },
        "SlowClose": {"delay_ms": 2000},
        "StallAfterTokens": {"tokens": 3},
        "ErrorStatus": {"status": rnd.choice([500, 503])},
        "SlowTokens": {"itl_ms": 300.0},
    }
    params = table.get(fault, {})
    workers = [*spec.prefill_names, *spec.decode_names]
    stray = rnd.choice(workers) if rnd.random() < 0.5 else None
    hop = rnd.choice(hops_for(fault, spec))
    onset_s = round(rnd.uniform(0.1, 1.2), 2)
    return Draw(seed, shape, fault, hop, params, stray, onset_s, in_heldout_family(shape))


def make_fault(d: Draw) -> Fault:
    kinds: dict[str, Any] = {
        "Latency": Latency,
        "Timeout": Timeout,
        "Down": Down,
        "ResetPeer": ResetPeer,
        "LimitData": LimitData,
        "Bandwidth": Bandwidth,
        "Slicer": Slicer,
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


def expected_hops(d: Draw) -> set[str]:
    """Where the injection alone says the wedge is: the fault's hop, or where a documented
    exception says it wedges (the blind-vs-injected figure, which needs no oracle)."""
    fault = InjectedFault(d.fault, d.hop, 0.0)
    links = transfer_links(SHAPES[d.shape])
    return {
        d.hop,
        *(link for link in links if elsewhere(fault, link, SHAPES[d.shape].prefill_names)),
    }


def mismatch(d: Draw, oracle: str, *, client_left_them: bool = False) -> str | None:
    """Why the oracle's location differs from the injected hop; None when it does not.
    ``client_left_them``: every request the oracle holds at the client is one a decode had
    finished a while before and our own client had not read (the bench's load has no pool
    bound, so nothing else holds a request there)."""
    if oracle == d.hop:
        return None
    if oracle == "none":
        return "did not manifest"
    if oracle == "client" and client_left_them and not d.hop.startswith("client"):
        return "held by our client (it had not read what the decodes finished)"
    why = elsewhere(InjectedFault(d.fault, d.hop, 0.0), oracle, SHAPES[d.shape].prefill_names)
    return f"wedged elsewhere (documented: {why})" if why else "oracle wrong"


def wedge_shows(wedge: Wedge, since: float, overdue_s: float = OVERDUE_S) -> bool:
    """A harness request is overdue (or held by its pool), or one failed since ``since``."""
    now = time.time()
    return any(
        r.overdue(overdue_s, now)
        or r.held_by_client(overdue_s, now)
        or (r.state in ("error", "timeout", "unknown") and (r.finished or 0) >= since)
        for r in wedge.ledger.by_origin("harness")
    )


def _transfer_wedge_shows(wedge: Wedge, back: float) -> bool:
    """A request sent after the restarted decode was back is overdue."""
    now = time.time()
    return any(
        r.sent is not None and r.sent >= back and r.overdue(OVERDUE_S, now)
        for r in wedge.ledger.by_origin("harness")
    )


def _wait_for_the_wedge(wedge: Wedge, d: Draw, started: float) -> bool:
    """Whether the harness shows the wedge (the bench's own look at its client, never given
    to either locator)."""
    back = time.time()
    try:
        if d.fault == "DecodeOnlyRestart":
            wait_for(
                lambda: _transfer_wedge_shows(wedge, back),
                timeout_s=TRANSFER_WEDGE_WITHIN_S,
                what="the transfer wedge",
            )
        else:
            wait_for(lambda: wedge_shows(wedge, started), timeout_s=SHOW_WITHIN_S, what="the wedge")
        return True
    except Exception:
        return False


def reset_topology(topology: Any) -> None:
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


@contextlib.contextmanager
def one_draw(topology: Any, row: dict[str, Any]) -> Iterator[Wedge | None]:
    """A fresh :class:`Wedge` on ``topology`` for one draw (None when the reset failed). What
    fails in the draw, its reset or its close is kept in ``row["error"]``, never raised: a
    draw that cannot run is recorded, not fatal."""
    try:
        reset_topology(topology)
    except Exception as exc:
        row["error"] = f"reset: {type(exc).__name__}: {exc}"[:300]
        yield None
        return
    wedge = Wedge(topology)
    try:
        yield wedge
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        try:
            # Faults first: Toxiproxy stalls its API for a minute removing a latency toxic
            # whose connections were closed under it (it flushes the held chunks one by one).
            wedge.faults.revert_all()
            wedge.close()
        except Exception as exc:
            row.setdefault("error", f"close: {type(exc).__name__}: {exc}"[:300])


def oracle_case(d: Draw, truth: Snapshot, faults: list[InjectedFault], at: float) -> dict[str, Any]:
    """A draw the oracle got wrong, as a tests/unit/oracle_cases/ file: the snapshot trimmed to
    the requests that did not end well or were still open at ``at``, with their ledger entries
    and without the toxics, and the moment the blind locator observed (``at``); set
    ``expected`` to the right answer once it is understood."""
    snapshot = truth.to_dict()
    # A request that ended well after ``at`` was still open when the blind locator looked, and
    # one that ended just before it may still be on its way back to the client.
    client = [
        r
        for r in truth.client
        if r.get("state") != "ok" or (r.get("finished") or at) >= at - OVERDUE_S
    ]
    ids = {r.get("request_id") for r in client}
    ledgers = {
        name: [e for e in entries if e.get("request_id") in ids]
        for name, entries in truth.ledgers.items()
    }
    links = {name: {"bytes": link.get("bytes", {})} for name, link in truth.links.items()}
    snapshot |= {"client": client, "ledgers": ledgers, "links": links, "stub_states_before": {}}
    if isinstance(observed := snapshot.get("observed"), dict):
        kept = ("format", "taken_at", "prefill", "decode", "link_names", "client", "started")
        wanted = (*kept, "processes", "client_at")
        snapshot["observed"] = {k: observed[k] for k in wanted if k in observed}
    draw_fields = {k: v for k, v in asdict(d).items() if k in ("seed", "shape", "fault", "hop")}
    faults_data = [asdict(f) for f in faults]
    case = {"draw": draw_fields, "expected": d.hop, "faults": faults_data, "at": at}
    return case | {"snapshot": snapshot}


def _harness(wedge: Wedge) -> Harness:
    return wedge.harness(agents=30, rounds=1000, client_timeout_s=30, think_time_s=0.05)


def run_draw(session: WedgeSession, d: Draw) -> dict[str, Any]:
    spec = SHAPES[d.shape]
    topology = session.topology(spec)
    row: dict[str, Any] = asdict(d)
    with one_draw(topology, row) as wedge:
        if wedge is not None:
            _draw(wedge, topology, d, row)
    return row


def _draw(wedge: Wedge, topology: Any, d: Draw, row: dict[str, Any]) -> None:
    """One draw on a fresh ``wedge``: the fault, the blind diagnosis, then the oracle."""
    if d.stray:
        wedge.stray(d.stray, rate_per_s=5)
    harness = _harness(wedge)
    wait_for(lambda: harness.progress() >= 10, timeout_s=15, what="a healthy start")
    time.sleep(d.onset_s)
    if d.fault == "DecodeOnlyRestart":
        # The incident: the decode restarts between the harness's requests, so nothing it
        # drops opens the router's breakers, and the wedge is the new requests' transfers.
        harness.stop()
        wedge.apply(make_fault(d))
        _harness(wedge)
    else:
        wedge.apply(make_fault(d))
    row["showed"] = _wait_for_the_wedge(wedge, d, wedge.faults.windows[-1].started)
    # The blind diagnosis gets nothing of the ground truth: no fault window, no oracle.
    t0 = time.perf_counter()
    blind = diagnose(wedge, "harness", OVERDUE_S, oracle=False)
    row["latency_s"] = round(time.perf_counter() - t0, 4)
    row |= {
        "blind": blind.location,
        "confidence": blind.confidence,
        "decided_by": blind.decided_by[:3],
        "in_flight": sum(1 for r in wedge.ledger.records if r.state == "pending"),
    }
    # The oracle, apart: the stub ledgers and the injected faults, read right after.
    truth = collect(topology, wedge.ledger, truth=True)
    if truth.ledgerless or not truth.components or not truth.ledgers:
        row["unscored"] = "the ground truth could not be read (no ledgers or states)"
    else:
        faults = injected_faults(wedge.faults.windows)
        # Judged at the blind's moment: a request 0.8 s old then may be overdue by now.
        oracle = locate(truth, "harness", OVERDUE_S, faults=faults, at=blind.taken_at)
        row["oracle"] = oracle.location
        left = [r for r in oracle.requests if r.holding == "client"]
        unread = bool(left) and all(UNREAD in r.note for r in left)
        row["mismatch"] = mismatch(d, oracle.location, client_left_them=unread)
        if oracle.location != blind.location:
            # What the blind locator saw of the client, to tell a moment gap from a rule.
            row["blind_evidence"] = blind.evidence[:3]
        if row["mismatch"] == "oracle wrong":  # kept: it becomes a case of test_oracle.py
            row["oracle_evidence"] = oracle.evidence[:8]
            row["fixture"] = oracle_case(d, truth, faults, blind.taken_at)


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


def wilson(right: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of ``right`` of ``n`` (95 % for z = 1.96), as fractions."""
    if n == 0:
        return 0.0, 0.0
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def failed(row: dict[str, Any]) -> bool:
    """A draw that did not run, or that the oracle could not score."""
    return "error" in row or row.get("oracle") is None


def right(row: dict[str, Any]) -> bool:
    """The blind locator named the oracle's location, and did not say ``unknown``."""
    return bool(row["blind"] == row["oracle"] and row["confidence"] != "unknown")


def _accuracy(rows: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(right, unknown, n) over the draws with a wedge to locate, failed draws counted wrong."""
    counted = [r for r in rows if failed(r) or r["oracle"] != "none"]
    hits = sum(1 for r in counted if not failed(r) and right(r))
    unknown = sum(1 for r in counted if not failed(r) and r["confidence"] == "unknown")
    return hits, unknown, len(counted)


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The figures of a run (percentages over the draws each names; see the module doc)."""
    main = [r for r in rows if not r.get("heldout")]
    heldout = [r for r in rows if r.get("heldout")]
    hits, unknown, n = _accuracy(main)
    low, high = wilson(hits, n)
    held_hits, _, held_n = _accuracy(heldout)
    scored = [r for r in rows if not failed(r)]
    showed = [r for r in main if failed(r) or r.get("showed")]
    as_injected = sum(
        1
        for r in showed
        if not failed(r)
        and r["blind"] in expected_hops(draw_of(r))
        and r["confidence"] != "unknown"
    )
    manifested = [r for r in scored if r["oracle"] != "none"]
    latencies = [r["latency_s"] for r in rows if "latency_s" in r]
    return {
        "draws": len(rows),
        "draws_failed": sum(1 for r in rows if failed(r)),
        "blind_draws_failed_pct": 100 * sum(1 for r in rows if failed(r)) / max(1, len(rows)),
        "blind_none_draws": sum(1 for r in scored if r["oracle"] == "none"),
        "blind_scored_draws": n,
        "blind_accuracy_pct": 100 * hits / max(1, n),
        "blind_accuracy_ci_low_pct": 100 * low,
        "blind_accuracy_ci_high_pct": 100 * high,
        "blind_unknown_pct": 100 * unknown / max(1, n),
        "blind_certain_wrong": sum(
            1 for r in scored if r["blind"] != r["oracle"] and r["confidence"] == "certain"
        ),
        "blind_vs_injected_accuracy_pct": 100 * as_injected / max(1, len(showed)),
        "blind_heldout_draws": held_n,
        "heldout_family_draws": len(heldout),
        "blind_heldout_accuracy_pct": 100 * held_hits / max(1, held_n),
        "oracle_wrong": sum(1 for r in scored if r.get("mismatch") == "oracle wrong"),
        "oracle_at_injected_hop_pct": 100
        * sum(1 for r in manifested if r["oracle"] == r["hop"])
        / max(1, len(manifested)),
        "diagnosis_latency_s": statistics.median(latencies) if latencies else 0.0,
    }


def draw_of(row: dict[str, Any]) -> Draw:
    fields = Draw.__dataclass_fields__
    return Draw(**{k: v for k, v in row.items() if k in fields})


FIGURES = [
    "blind_accuracy_pct",
    "blind_accuracy_ci_low_pct",
    "blind_accuracy_ci_high_pct",
    "blind_certain_wrong",
    "blind_unknown_pct",
    "blind_draws_failed_pct",
    "blind_none_draws",
    "blind_scored_draws",
    "blind_vs_injected_accuracy_pct",
    "blind_heldout_accuracy_pct",
    "blind_heldout_draws",
    "heldout_family_draws",
    "oracle_wrong",
    "oracle_at_injected_hop_pct",
    "diagnosis_latency_s",
]


def _row_line(i: int, total: int, r: dict[str, Any]) -> str:
    held = " [held-out]" if r.get("heldout") else ""
    line = (
        f"# {i}/{total} seed={r['seed']} {r['shape']} {r['fault']} on {r['hop']}{held}: "
        f"oracle={r.get('oracle')} blind={r.get('blind')} ({r.get('confidence')})"
    )
    if r.get("mismatch"):
        line += f" [{r['mismatch']}]"
    if "error" in r or "unscored" in r:
        line += " ERROR " + " ".join(str(r.get("error") or r.get("unscored")).split())
    return line


def _save(
    out: Path, seed: int, figures: dict[str, float], rows: list[dict[str, Any]], started: float
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    wall_s = round(time.time() - started, 1)
    saved = {"seed": seed, "figures": figures, "draws": rows, "wall_s": wall_s}
    out.write_text(json.dumps(saved, indent=1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.wedges")
    parser.add_argument("--draws", type=int, default=int(os.environ.get("WEDGE_BENCH_DRAWS", 400)))
    fresh = random.SystemRandom().randrange(1, 1_000_000)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("WEDGE_BENCH_SEED", fresh)))
    parser.add_argument(
        "--out", default=os.environ.get("WEDGE_BENCH_OUT", ".wedge-artifacts/bench/wedges.json")
    )
    parser.add_argument("--replay", type=int, nargs="*", default=[])
    parser.add_argument(
        "--heavy",
        action="store_true",
        help="run beside the catalog looping under -n 4 and 3 busy loops (a loaded CI runner)",
    )
    args = parser.parse_args(argv if argv is not None else [])
    if args.draws > DRAWS_PER_SEED:
        parser.error(f"--draws must be at most {DRAWS_PER_SEED}")
    seeds = args.replay or [args.seed * DRAWS_PER_SEED + i for i in range(args.draws)]
    if not args.replay:
        print(
            f"# seed {args.seed} (replay: python -m bench.wedges --seed {args.seed} "
            f"--draws {args.draws})",
            flush=True,
        )
    started = time.time()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    neighbours = (
        catalog_load(out.with_suffix(".catalog.log"), **HEAVY)
        if args.heavy
        else contextlib.nullcontext()
    )
    loadavg: list[float] = []
    with (
        neighbours,
        tempfile.TemporaryDirectory() as tmp,
        WedgeSession(artifacts_dir=tmp) as session,
    ):
        rows = []
        for i, seed in enumerate(seeds):
            rows.append(run_draw(session, draw(seed)))
            loadavg.append(os.getloadavg()[0])
            print(_row_line(i + 1, len(seeds), rows[-1]), flush=True)
        figures = summarize(rows)
        figures["loadavg_1min_median"] = statistics.median(loadavg) if loadavg else 0.0
        _save(out, args.seed, figures, rows, started)  # kept should the latency run fail
        big = latency_1000_in_flight(session) if not args.replay else []
    report("loadavg_1min_median", figures["loadavg_1min_median"])
    for name in FIGURES:
        report(name, figures[name])
    if big:
        figures["diagnosis_latency_1000_inflight_s"] = statistics.median(big)
        report("diagnosis_latency_1000_inflight_s", statistics.median(big), big)
    report("wedge_draws", figures["draws"])
    _save(out, args.seed, figures, rows, started)
    print(f"# draws written to {out} (replay one: python -m bench.wedges --replay <seed>)")


if __name__ == "__main__":
    main(sys.argv[1:])
