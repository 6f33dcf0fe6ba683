"""The engine model through the real router: a stall that ends releases what it held, and a
decode's preallocation slots follow their policy when the KV link fails (stubs/admission.py).

Times are the stub's own: a fault's removal stamp (``/control/state`` ``fault_events``) against
the ledger's ``first_token`` and ``finished`` stamps, all on the stub's clock.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from pytest_wedge.faults import Down, StallAfterTokens, StallBeforeFirstToken
from pytest_wedge.waiting import observe, wait_for

pytestmark = pytest.mark.timeout(60)

ITL_MS = 50.0
ITL_S = ITL_MS / 1000.0
SLACK_S = 0.1  # scheduling slack: the stub's event loop, and the probe sampling it
KV_LINK = "decode-0->prefill-0"
PREALLOC = "sglang:num_decode_prealloc_queue_reqs"
TRANSFER = "sglang:num_decode_transfer_queue_reqs"


def removed_at(wedge: Any, fault: Any) -> float:
    """When the stub removed ``fault``, on the stub's own clock."""
    events = wedge.stub(fault.target).state()["fault_events"]
    [at] = [e["at"] for e in events if e["event"] == "removed" and e["name"] == fault.fault_name]
    return float(at)


def decode_entries(wedge: Any) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = wedge.stub("decode-0").ledger(origin="harness")["entries"]
    return entries


def held(wedge: Any, count: int, tokens: int) -> list[dict[str, Any]] | None:
    entries = decode_entries(wedge)
    if len(entries) == count and all(
        e["state"] == "running" and e["tokens"] == tokens for e in entries
    ):
        return entries
    return None


def chat(wedge: Any, timeout: float = 20.0) -> httpx.Response:
    body = {
        "model": "stub-model",
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "fidelity"}],
    }
    return httpx.post(wedge.url + "/v1/chat/completions", json=body, timeout=timeout)


# -- a stall that ends heals --------------------------------------------------------------------


@pytest.mark.wedge(stub={"itl_ms": ITL_MS})
def test_a_reverted_stall_releases_its_held_requests_within_one_itl(wedge):
    fault = wedge.apply(StallBeforeFirstToken("decode-0"))
    harness = wedge.harness(agents=3, rounds=1, max_tokens=6, client_timeout_s=30)
    wait_for(
        lambda: held(wedge, 3, tokens=0),
        timeout_s=10,
        what="3 harness requests held before their first token",
    )
    wedge.revert(fault)
    revert = removed_at(wedge, fault)
    assert harness.wait(20)
    wedge.assert_nothing_lost("harness")
    assert all(r.state == "ok" for r in wedge.ledger.by_origin("harness"))
    for entry in decode_entries(wedge):
        assert entry["state"] == "ok" and entry["tokens"] == 6
        resumed = entry["t"]["first_token"] - revert
        assert 0 <= resumed <= ITL_S + SLACK_S, (entry["request_id"], resumed)
    state = wedge.stub("decode-0").state()
    assert state["faults"] == [] and state["active"] == 0


@pytest.mark.wedge(stub={"itl_ms": ITL_MS})
def test_a_stall_whose_window_ends_lets_its_streams_finish(wedge):
    """StallAfterTokens for a 1.5 s window: the streams stop at 2 tokens, and when the window
    ends the next token comes within one ITL and the rest at the usual pace."""
    stall = StallAfterTokens("decode-0", tokens=2)
    wedge.faults.schedule(stall, at_s=0.0, for_s=1.5)
    wait_for(lambda: wedge.stub("decode-0").faults(), timeout_s=5, what="the stall applied")
    harness = wedge.harness(agents=3, rounds=1, max_tokens=6, client_timeout_s=30)
    wait_for(
        lambda: held(wedge, 3, tokens=2), timeout_s=10, what="3 harness streams held at 2 tokens"
    )
    assert harness.wait(20)
    assert wedge.faults.wait_scheduled(timeout_s=5)
    wedge.assert_nothing_lost("harness")
    revert = removed_at(wedge, stall)
    for entry in decode_entries(wedge):
        assert entry["state"] == "ok" and entry["tokens"] == 6
        # The 3rd token at once, then 3 more one ITL apart: 4 tokens within 4 ITLs.
        finished = entry["t"]["finished"] - revert
        assert 3 * ITL_S - 0.01 <= finished <= 4 * ITL_S + SLACK_S, (entry["request_id"], finished)


# -- preallocation slots when the KV link goes down -----------------------------------------------


@pytest.mark.wedge(
    stub={"extra_args": ["--prealloc-slots", "2", "--slot-on-transfer-failure", "leaked"]}
)
def test_leaked_slots_keep_the_decode_wedged_after_the_kv_link_heals(wedge):
    link = wedge.apply(Down(KV_LINK))
    harness = wedge.harness(agents=3, rounds=1, max_tokens=4, client_timeout_s=40)
    wait_for(
        lambda: wedge.metric("decode-0", TRANSFER) == 2 and wedge.metric("decode-0", PREALLOC) >= 1,
        timeout_s=15,
        what="both slots leaked and a request waiting for one",
    )
    decode = wedge.stub("decode-0")
    assert decode.state()["counters"]["bootstrap_failed"] == 2  # only two transfers ever ran
    wedge.revert(link)
    # The link is healthy again, yet nothing moves: the slots never come back.
    samples = observe(
        lambda: (
            wedge.metric("decode-0", PREALLOC),
            wedge.metric("decode-0", TRANSFER),
            wedge.metric("decode-0", "sglang:num_running_reqs"),
        ),
        for_s=1.0,
    )
    assert all(
        prealloc >= 1 and transfer == 2 and running == 0 for prealloc, transfer, running in samples
    ), samples
    slots = decode.state()["prealloc_slots"]
    assert (slots["leaked"], slots["used"], slots["capacity"]) == (2, 2, 2)
    assert decode.state()["states"].get("transfer", 0) == 0  # nothing is actually transferring
    assert all(r.state == "pending" for r in wedge.ledger.by_origin("harness"))
    harness.stop()


@pytest.mark.wedge(
    stub={"extra_args": ["--prealloc-slots", "2", "--slot-on-transfer-failure", "released"]}
)
def test_released_slots_let_the_decode_recover_when_the_kv_link_heals(wedge):
    link = wedge.apply(Down(KV_LINK))
    assert chat(wedge).status_code >= 500  # smg's retries all fail on the down link
    decode = wedge.stub("decode-0")
    assert decode.state()["counters"]["bootstrap_failed"] > 2  # more failures than slots
    assert (wedge.metric("decode-0", PREALLOC), wedge.metric("decode-0", TRANSFER)) == (0, 0)
    wedge.revert(link)
    assert chat(wedge).status_code == 200
    assert decode.state()["prealloc_slots"]["used"] == 0


def test_slots_released_after_the_transfer_timeout_come_back_only_then(wedge):
    """Set through the control API: each failed attempt's slot stays counted in the transfer
    queue until the transfer timeout has passed since that transfer started."""
    decode = wedge.stub("decode-0")
    timeout_s = 3.0
    decode.set_admission(slot_on_transfer_failure="released_after_timeout")
    decode.set_watchdogs(transfer_timeout_s=timeout_s)
    wedge.apply(Down(KV_LINK))
    assert chat(wedge).status_code >= 500
    slots = decode.state()["prealloc_slots"]
    assert slots["policy"] == "released_after_timeout" and slots["orphaned"] >= 1
    assert wedge.metric("decode-0", TRANSFER) == slots["orphaned"]
    for orphan in slots["orphans"]:
        assert orphan["release_at"] - orphan["since"] == pytest.approx(timeout_s)
    wait_for(
        lambda: wedge.metric("decode-0", TRANSFER) == 0,
        timeout_s=timeout_s + 2,
        what="the held slots to come back after the transfer timeout",
    )
    assert decode.state()["states"].get("transfer", 0) == 0
    assert time.time() >= max(o["release_at"] for o in slots["orphans"])


@pytest.mark.wedge(stub={"keepalive_timeout_s": 1.0})
def test_a_generation_request_on_a_connection_idle_past_the_keepalive_is_reset(wedge):
    """The engine server's keep-alive: a POST on a connection idle 1 s or longer is reset with
    no answer, a GET after the same gap is answered, and a fresh connection serves again."""
    from pytest_wedge.loopback import loopback_client

    url = wedge.stub("decode-0").base_url
    body = {"model": "stub-model", "messages": [{"role": "user", "content": "hi"}]}
    with loopback_client(base_url=url, timeout=5) as client:
        assert client.post("/v1/chat/completions", json={**body, "max_tokens": 2}).is_success
        time.sleep(1.2)  # the idle gap itself: past the server's keep-alive
        assert client.get("/health").is_success
        time.sleep(1.2)
        with pytest.raises(httpx.TransportError):
            client.post("/v1/chat/completions", json={**body, "max_tokens": 2})
        assert client.post("/v1/chat/completions", json={**body, "max_tokens": 2}).is_success
