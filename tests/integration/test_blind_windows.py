"""The mislocations of issue 11, reproduced on the real router and shown fixed (blind locator).

- Both breakers open after prefill 500s: the router then refuses every request at once with
  503 ``no_available_workers`` while the prefill (fault lifted) and the decode are healthy. The
  diagnosis says ``router``, and its evidence names the open breakers.
- Two back-to-back fault windows on different hops: requests that failed fast in the first
  window must not outvote the requests stuck now in the second; each window is located at its
  own hop. No window start is handed in: the locator infers the onset from the client's ledger.
"""

from __future__ import annotations

import time

import pytest

from pytest_wedge.diagnostics import diagnose
from pytest_wedge.faults import BlockingBootstrapCall, Down, ErrorStatus, Timeout
from pytest_wedge.handle import Wedge
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


def breakers_open(wedge: Wedge) -> bool:
    return wedge.metric("router", "smg_worker_cb_state") >= 2  # prefill-0 and decode-0 open


def refused_since(wedge: Wedge, since: float) -> int:
    return sum(
        1
        for r in wedge.ledger.by_origin("harness")
        if (r.finished or 0.0) >= since and "no_available_workers" in (r.error or "")
    )


def test_both_breakers_open_after_prefill_500s_is_the_router(wedge: Wedge) -> None:
    fault = wedge.apply(ErrorStatus(target="prefill-0", status=500))
    wedge.harness(agents=10, rounds=500, client_timeout_s=20, think_time_s=0.1)
    wait_for(lambda: breakers_open(wedge), timeout_s=20, what="both breakers to open")
    opened = time.time()
    wedge.revert(fault)  # the prefill is healthy again; the breakers stay open (60 s)
    reverted = time.time()  # the fault window's end: the oracle's to know, never the locator's
    since = time.time()
    wait_for(
        lambda: refused_since(wedge, since) >= 10,
        timeout_s=20,
        what="requests refused after the prefill recovered",
    )
    # The failures that opened the breakers (the router counted them against prefill-0; the
    # client saw only refusals) are in the episode, and whether the prefill would fail again
    # cannot be seen while the breakers keep traffic off it: the router or the prefill, likely.
    diagnosis = diagnose(wedge, origin="harness")
    assert diagnosis.location in ("router", "prefill-0"), diagnosis.render()
    assert diagnosis.confidence == "likely", diagnosis.render()
    assert "open breakers: prefill-0, decode-0 (smg_worker_cb_state=1)" in diagnosis.decided_by
    # Once the breakers opened before the episode (window_s of refusals), nothing failed in it.
    wait_for(
        lambda: time.time() - opened > 11.0,
        timeout_s=15,
        what="the failures that opened the breakers to leave the episode",
    )
    diagnosis = diagnose(wedge, origin="harness", since=reverted)
    assert diagnosis.location == "router", diagnosis.render()
    assert diagnosis.confidence == "certain", diagnosis.render()
    assert "router refuses (breakers open) while decode-0 is healthy" in diagnosis.decided_by


def test_back_to_back_windows_are_each_located_at_their_own_hop(wedge: Wedge) -> None:
    wedge.stray("decode-0", rate_per_s=5)
    harness = wedge.harness(agents=20, rounds=1000, client_timeout_s=30, think_time_s=0.2)
    wait_for(lambda: harness.progress() >= 20, timeout_s=15, what="a healthy start")
    # Window 1: the front link is down; requests fail fast with refused connections.
    down = wedge.apply(Down(target="client->router"))
    first = time.time()
    wait_for(
        lambda: (
            sum(
                1
                for r in wedge.ledger.by_origin("harness")
                if r.state == "error" and (r.finished or 0) >= first
            )
            >= 40
        ),
        timeout_s=15,
        what="40 fast failures in the first window",
    )
    diagnosis = diagnose(wedge, origin="harness", since=first)  # since: the oracle's alone
    assert diagnosis.location == "client->router", diagnosis.render()
    # Window 2: the front is back, and a black hole on the KV link strands what is sent now.
    wedge.revert(down)
    wedge.apply(Timeout(target="decode-0->prefill-0", timeout_ms=0))
    second = time.time()
    wait_for(
        lambda: len(wedge.ledger.by_origin("harness").overdue(1.0)) >= 15,
        timeout_s=15,
        what="requests stuck in the second window",
    )
    failed_before = sum(
        1
        for r in wedge.ledger.by_origin("harness")
        if r.state == "error" and first <= (r.finished or 0) < second
    )
    stuck = len(wedge.ledger.by_origin("harness").overdue(1.0))
    assert failed_before > stuck  # the earlier failures would outvote the stuck ones
    diagnosis = diagnose(wedge, origin="harness", since=second)
    assert diagnosis.location == "decode-0->prefill-0", diagnosis.render()
    assert diagnosis.stuck.get("client->router", {}).get("harness", 0) == 0
    assert not diagnosis.disagrees(), diagnosis.render()


@pytest.mark.wedge(
    prefill=2,
    router_args=["--policy", "round_robin", "--disable-circuit-breaker"],
    stub={"itl_ms": 20.0},
)
def test_streams_a_frozen_decode_loop_held_stay_the_decodes_after_its_calls_fail(
    wedge: Wedge,
) -> None:
    """sglang pull request #34865: decode-0 fetches prefill-1's parallel info on its loop
    through a black-holed link. While the calls run, every stream on decode-0 stops, and the
    wedge is the decode's. Once the calls are spent their requests fail their bootstrap over
    that link (the router asks again), and the streams the freeze held go on, late: those
    have their heads, so their KV, and stay the decode's; no failed transfer holds them."""
    wedge.apply(BlockingBootstrapCall("decode-0", timeout_ms=800, retries=3))
    wedge.apply(Timeout("decode-0->prefill-1", timeout_ms=0))
    wedge.harness(agents=8, rounds=1, max_tokens=200, client_timeout_s=30)

    def overdue() -> bool:
        sent = [r.sent for r in wedge.ledger.by_origin("harness") if r.sent is not None]
        return len(sent) == 8 and time.time() - min(sent) > 0.3

    wait_for(overdue, timeout_s=10, what="the harness's requests to be overdue")
    frozen = wedge.diagnose(origin="harness", overdue_after_s=0.3)
    assert frozen.location == "decode-0", frozen.render()
    wait_for(
        lambda: wedge.stub("decode-0").state()["counters"]["bootstrap_failed"] >= 1,
        timeout_s=10,
        what="the calls to prefill-1 to be spent",
    )
    spent = wedge.diagnose(origin="harness", overdue_after_s=0.3)
    streams = [r for r in spent.requests if r.furthest in ("streaming slowly", "stream stalled")]
    assert streams, spent.render()
    assert all(r.holding == "decode-0" for r in streams), spent.render()
