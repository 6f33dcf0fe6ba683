"""The locator table: each wedge, under the harness and a stray requester, is located truth-free.

Rows cover 1P+1D and 2P+2D; restarts and crashes of each role; link faults on each side of
each hop (Toxiproxy's upstream and downstream streams); the vLLM protocol; ledger-less workers;
and a stray requester on each role. The stray talks straight to a worker (incident 1), so that
worker always shows tokens/s: a diagnosis reading aggregate throughput would call the row
healthy.

Every row is located twice on one live wedge:
- by the blind locator alone, on a snapshot collected without any ground truth (no stub ledger,
  no toxic configuration, no runtime view, no fault list; the probe's ordinary samples give
  the earlier counters, as an operator's metrics history would), and again on the same snapshot with
  ground truth planted where a careless locator would read it (fault JSON in the log tails and
  in the client's error texts): same answer, same confidence;
- by ``diagnose``, whose oracle (the ledger walk over the ground truth) must agree.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_wedge.diagnostics import Diagnosis, diagnose, locate_blind, observe
from pytest_wedge.evidence.observed import Observed
from pytest_wedge.faults import (
    Crash,
    DecodeOnlyRestart,
    Down,
    ErrorStatus,
    Fault,
    Kill,
    Pause,
    Restart,
    Slicer,
    StallAfterTokens,
    StallBeforeFirstToken,
    Timeout,
)
from pytest_wedge.handle import Wedge
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(90)
OVERDUE_S = 1.0


@dataclass(frozen=True)
class Row:
    expected: str
    fault: Callable[[], Fault] | None
    prefill: int = 1
    decode: int = 1
    stray: str = "decode-0"
    stub: dict[str, Any] = field(default_factory=dict)
    harness: dict[str, Any] = field(default_factory=dict)
    router_args: tuple[str, ...] = ()
    # A fault whose own act breaks the requests in flight (before the wedge it models sets
    # in) goes in before the harness starts, once a warm-up has moved KV through the pair.
    fault_before_load: bool = False


def black_hole(link: str, stream: str = "downstream") -> Callable[[], Fault]:
    return lambda: Timeout(target=link, timeout_ms=0, stream=stream)


def trickle(link: str, size_bytes: int = 16) -> Callable[[], Fault]:
    """``size_bytes`` every 50 ms: each read arrives within the probes' 0.2 s, a whole answer
    does not."""
    return lambda: Slicer(target=link, average_size_bytes=size_bytes, delay_us=50_000)


VLLM = {"protocol": "vllm"}
NO_LEDGERS = {"ledger": False}
ROWS: dict[str, Row] = {
    # 1P+1D, SGLang protocol behind smg.
    "router paused": Row("router", lambda: Pause("router")),
    "router paused, stray on the prefill": Row(
        "router", lambda: Pause("router"), stray="prefill-0"
    ),
    "router restarted": Row("router", lambda: Restart("router")),
    "client->router down": Row("client->router", lambda: Down(target="client->router")),
    "client->router black hole, upstream": Row(
        "client->router", black_hole("client->router", "upstream")
    ),
    "router->prefill-0 black hole, upstream": Row(
        "router->prefill-0", black_hole("router->prefill-0", "upstream")
    ),
    "router->prefill-0 black hole, downstream": Row(
        "router->prefill-0", black_hole("router->prefill-0")
    ),
    "router->decode-0 black hole, upstream": Row(
        "router->decode-0", black_hole("router->decode-0", "upstream"), stray="prefill-0"
    ),
    "router->decode-0 black hole, downstream": Row(
        "router->decode-0", black_hole("router->decode-0"), stray="prefill-0"
    ),
    "decode-0->prefill-0 black hole, upstream": Row(
        "decode-0->prefill-0", black_hole("decode-0->prefill-0", "upstream")
    ),
    "decode-0->prefill-0 black hole, downstream": Row(
        "decode-0->prefill-0", black_hole("decode-0->prefill-0")
    ),
    "router->decode-0 trickles, downstream": Row(
        "router->decode-0", trickle("router->decode-0"), stray="prefill-0"
    ),
    "decode-0->prefill-0 trickles, downstream": Row(
        "decode-0->prefill-0", trickle("decode-0->prefill-0", 4)
    ),
    "prefill stalls before its first token": Row(
        "prefill-0", lambda: StallBeforeFirstToken(target="prefill-0")
    ),
    # Only the harness stalls, so the stray keeps decode-0 busy: the harder case.
    "decode stalls the harness after 3 tokens": Row(
        "decode-0", lambda: StallAfterTokens(target="decode-0", tokens=3, origin="harness")
    ),
    "prefill killed": Row("prefill-0", lambda: Kill("prefill-0"), stray="decode-0"),
    # The decode comes back without its prefill, which keeps transfer state for the old
    # instance: the wedge shows on the transfer link (incident 2).
    "decode restarted alone": Row(
        "decode-0->prefill-0",
        lambda: DecodeOnlyRestart(target="decode-0"),
        fault_before_load=True,
    ),
    "prefill crashes": Row("prefill-0", lambda: Crash(target="prefill-0")),
    "decode crashes": Row("decode-0", lambda: Crash(target="decode-0"), stray="prefill-0"),
    "decode killed": Row("decode-0", lambda: Kill("decode-0"), stray="prefill-0"),
    "prefill answers 503": Row("prefill-0", lambda: ErrorStatus(target="prefill-0", status=503)),
    "client pool exhausted": Row(
        "client", None, harness={"max_connections": 4, "leak_streams": True}
    ),
    # 2P+2D.
    # cache_aware may send every harness prompt to the prefill that took the first one (a
    # run saw 1 of 581 reach prefill-1), so the row would wait on smg's policy, not the wedge.
    "2P2D prefill-1 stalls": Row(
        "prefill-1",
        lambda: StallBeforeFirstToken(target="prefill-1"),
        2,
        2,
        stray="prefill-0",
        router_args=("--policy", "random"),
    ),
    "2P2D decode-1 paused": Row("decode-1", lambda: Pause("decode-1"), 2, 2, stray="decode-0"),
    # smg's default cache_aware policy picks the prefill and the decode of a request alike
    # (the same prompt prefixes, the same loads), so one cross pair may carry a request in
    # a hundred; random picks each on its own, and a quarter of them take the pair.
    "2P2D decode-1->prefill-0 black hole": Row(
        "decode-1->prefill-0",
        black_hole("decode-1->prefill-0"),
        2,
        2,
        router_args=("--policy", "random"),
    ),
    "2P2D decode-1->prefill-0 trickles": Row(
        "decode-1->prefill-0",
        trickle("decode-1->prefill-0", 4),
        2,
        2,
        router_args=("--policy", "random"),
    ),
    "2P2D router->decode-1 black hole": Row(
        "router->decode-1", black_hole("router->decode-1"), 2, 2, stray="decode-0"
    ),
    # The vLLM protocol behind smg (sequential PD, kv_transfer_params).
    "vLLM router paused": Row("router", lambda: Pause("router"), stub=VLLM),
    "vLLM prefill stalls": Row(
        "prefill-0", lambda: StallBeforeFirstToken(target="prefill-0"), stub=VLLM
    ),
    "vLLM decode-0->prefill-0 black hole": Row(
        "decode-0->prefill-0", black_hole("decode-0->prefill-0"), stub=VLLM
    ),
    # Ledger-less workers: no ledger, no control API, only public endpoints.
    "ledger-less router paused": Row("router", lambda: Pause("router"), stub=NO_LEDGERS),
    "ledger-less decode-0->prefill-0 black hole": Row(
        "decode-0->prefill-0", black_hole("decode-0->prefill-0"), stub=NO_LEDGERS
    ),
}


# A wedge shows once several of the harness's requests are held: one overdue request of 30
# agents, beside another prefill's healthy backlog, does not say which prefill holds it yet.
SHOWS_AT = 3


def wedged_now(wedge: Wedge) -> bool:
    now = time.time()
    held = sum(
        1
        for r in wedge.ledger.by_origin("harness")
        if r.overdue(OVERDUE_S, now)
        or r.held_by_client(OVERDUE_S, now)
        or r.state in ("error", "timeout", "unknown")
    )
    return held >= SHOWS_AT


def start_stray(wedge: Wedge, target: str) -> None:
    stray = wedge.stray(target, rate_per_s=5)
    wait_for(lambda: stray.progress() >= 1, timeout_s=10, what="a first stray request")


def start_harness(wedge: Wedge, **harness: object) -> None:
    options: dict[str, object] = {
        "agents": 30,
        "rounds": 20,
        "client_timeout_s": 20,
        "think_time_s": 0.05,
    }
    wedge.harness(**(options | harness))


def open_row(wedge_factory: Callable[..., Wedge], row: Row) -> Wedge:
    wedge = wedge_factory(
        prefill=row.prefill, decode=row.decode, stub=row.stub, router_args=list(row.router_args)
    )
    start_stray(wedge, row.stray)
    if row.fault is not None and row.fault_before_load:
        warm_up = wedge.harness(agents=2, rounds=1, origin="warm-up")
        wait_for(lambda: not warm_up.running, timeout_s=15, what="the warm-up")
        wedge.apply(row.fault())
    start_harness(wedge, **row.harness)
    if row.fault is not None and not row.fault_before_load:
        wedge.apply(row.fault())
    wait_for(
        lambda: wedged_now(wedge),
        timeout_s=15,
        what=f"{SHOWS_AT} overdue or failed harness requests",
    )
    return wedge


def planted(obs: Observed, wedge: Wedge) -> Observed:
    """``obs`` with the injected faults written where only a careless locator would read them."""
    faults = [
        {"kind": type(w.fault).__name__, "target": w.fault.target} for w in wedge.faults.windows
    ]
    text = f"fault added: {json.dumps(faults)}"
    logs = {name: [*lines, f"ERROR {text}"] for name, lines in obs.logs.items()}
    for name in ("router", *obs.prefill, *obs.decode):
        logs.setdefault(name, []).append(f"WARNING {text}")
    client = copy.deepcopy(obs.client)
    for record in client:
        if record.get("error"):
            record["error"] = f"{record['error']} ({text})"
    return dataclasses.replace(obs, logs=logs, client=client)


def assert_stray_is_a_red_herring(diagnosis: Diagnosis, stray_target: str) -> None:
    assert any("stray-1" in h and stray_target in h for h in diagnosis.red_herrings), (
        diagnosis.render()
    )


def assert_located(diagnosis: Diagnosis, row: Row) -> None:
    assert diagnosis.location == row.expected, diagnosis.render()
    assert diagnosis.confidence in ("certain", "likely"), diagnosis.render()
    assert diagnosis.decided_by, diagnosis.render()
    assert diagnosis.stuck.get(row.expected, {}).get("harness", 0) >= 1, diagnosis.render()
    ruled_out = {line.split(": ", 1)[0] for line in diagnosis.ruled_out}
    assert row.expected not in ruled_out, diagnosis.render()
    assert_stray_is_a_red_herring(diagnosis, row.stray)


@pytest.mark.parametrize("name", list(ROWS))
def test_the_wedged_hop_is_located_truth_free(wedge_factory: Any, name: str) -> None:
    row = ROWS[name]
    wedge = open_row(wedge_factory, row)
    snapshot = observe(wedge, "harness", OVERDUE_S)
    assert snapshot.ledgers == {} and snapshot.stub_states == {} and snapshot.components == {}
    assert all(not link.get("toxics") and "enabled" not in link for link in snapshot.links.values())
    assert snapshot.observed is not None
    blind = locate_blind(snapshot.observed, "harness", OVERDUE_S)
    assert_located(blind, row)
    careless = locate_blind(planted(snapshot.observed, wedge), "harness", OVERDUE_S)
    assert (careless.location, careless.confidence) == (blind.location, blind.confidence), (
        careless.render()
    )
    diagnosis = diagnose(wedge, origin="harness", overdue_after_s=OVERDUE_S)
    assert diagnosis.locator == "blind"
    assert_located(diagnosis, row)
    if row.stub != NO_LEDGERS:
        assert not diagnosis.disagrees(), f"the oracle disagrees:\n{diagnosis.render()}"


def test_nothing_wrong_is_none_while_the_stray_runs(wedge: Wedge) -> None:
    # think_time keeps the two cores of CI from stretching healthy requests past 1 s.
    start_stray(wedge, "decode-0")
    start_harness(wedge, think_time_s=0.2)
    wait_for(
        lambda: wedge.ledger.by_origin("harness").states()["ok"] >= 30,
        timeout_s=15,
        what="30 healthy harness requests",
    )
    for _ in range(3):
        diagnosis = diagnose(wedge, origin="harness", overdue_after_s=OVERDUE_S)
        assert diagnosis.location == "none", diagnosis.render()
        assert diagnosis.healthy and not diagnosis.stuck.get("client", {}).get("harness")
    assert_stray_is_a_red_herring(diagnosis, "decode-0")
