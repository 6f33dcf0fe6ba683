"""The locator on synthetic snapshots: one per row of the diagnosis table, plus attribution."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_wedge.diagnostics import Diagnosis, Snapshot, locate
from pytest_wedge.diagnostics.oracle import InjectedFault
from pytest_wedge.evidence.observed import Observed
from pytest_wedge.evidence.parse import parse_link_bytes, parse_router_metrics

NOW = 1_000_000.0
LINKS = ["client->router", "router->prefill-0", "router->decode-0", "decode-0->prefill-0"]


def record(n: int, *, origin: str = "harness", age: float = 2.0, **fields: Any) -> dict[str, Any]:
    created = NOW - age
    base = {
        "request_id": f"{origin}-x-{n}",
        "origin": origin,
        "created": created,
        "sent": created + 0.001,
        "first_byte": None,
        "finished": None,
        "tokens": 0,
        "state": "pending",
        "error": None,
        "cut_by_stop": False,
    }
    return base | fields


def entry(
    rid: str,
    state: str,
    *,
    origin: str = "harness",
    room: int | None = 7,
    tokens: int = 0,
    **stamps: float,
) -> dict[str, Any]:
    t = {"arrived": NOW - 1.9} | {k: NOW - v for k, v in stamps.items()}
    return {
        "request_id": rid,
        "origin": origin,
        "room": room,
        "state": state,
        "tokens": tokens,
        "error": None,
        "t": t,
    }


def stray_entries(count: int = 5) -> list[dict[str, Any]]:
    # Direct-to-decode requests (no room), one still running: the red herring.
    done = [
        entry(
            f"stray-1-x-{i}",
            "ok",
            origin="stray-1",
            room=None,
            tokens=64,
            first_token=0.4 - 0.05 * i,
            finished=0.2 - 0.05 * i,
        )
        for i in range(count)
    ]
    live = entry("stray-1-x-99", "running", origin="stray-1", room=None, tokens=20, first_token=0.3)
    return [*done, live]


def snapshot(
    client: list[dict[str, Any]],
    prefill: list[dict[str, Any]] | None = None,
    decode: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> Snapshot:
    links = {name: {"enabled": True, "toxics": [], "bytes": {}} for name in LINKS}
    links.update(extra.pop("links", {}))
    components = {"router": "running", "prefill-0": "running", "decode-0": "running"}
    components.update(extra.pop("components", {}))
    ledgers = {"prefill-0": prefill or [], "decode-0": [*(decode or []), *stray_entries()]}
    for silent in extra.pop("silent", []):
        ledgers.pop(silent)
    return Snapshot(
        taken_at=NOW,
        prefill=["prefill-0"],
        decode=["decode-0"],
        link_names=LINKS,
        client=client,
        ledgers=ledgers,
        links=links,
        components=components,
        **extra,
    )


def ids(n: int = 30) -> list[str]:
    return [f"harness-x-{i}" for i in range(n)]


def injected(kind: str, target: str, age: float = 5.0) -> list[InjectedFault]:
    return [InjectedFault(kind, target, NOW - age)]


def assert_located(
    snap: Snapshot, expected: str, faults: list[InjectedFault] | None = None
) -> Diagnosis:
    diagnosis = locate(snap, origin="harness", overdue_after_s=1.0, faults=faults or [])
    assert diagnosis.location == expected, diagnosis.render()
    assert any("stray-1" in h and "decode-0" in h for h in diagnosis.red_herrings), (
        diagnosis.render()
    )
    return diagnosis


def test_router_paused() -> None:
    snap = snapshot(
        [record(i) for i in range(30)],
        components={"router": "paused"},
        unanswered={"router metrics": "did not answer within 0.20 s"},
    )
    diagnosis = assert_located(snap, "router")
    assert diagnosis.stuck == {"router": {"harness": 30}}
    assert any("0 of them reached prefill-0 or decode-0" in f for f in diagnosis.evidence)
    assert any("router process paused" in f for f in diagnosis.evidence)


def test_router_saturated_without_any_link_or_process_evidence() -> None:
    assert_located(snapshot([record(i) for i in range(30)]), "router")


def test_client_to_router_down_fails_fast_with_connect_errors() -> None:
    failed = [
        record(
            i,
            age=0.5,
            sent=None,
            state="error",
            finished=NOW - 0.4,
            error="ConnectError: All connection attempts failed",
        )
        for i in range(30)
    ]
    snap = snapshot(failed)
    diagnosis = assert_located(snap, "client->router", injected("Down", "client->router"))
    assert "injected: Down on client->router" in diagnosis.evidence


def test_connections_cut_mid_request_blame_the_cut_not_where_the_legs_were() -> None:
    # Down drops open connections: the router then aborts both legs wherever they were.
    cut = [
        record(
            i, state="unknown", finished=NOW - 0.2, error="RemoteProtocolError: Server disconnected"
        )
        for i in range(10)
    ]
    prefill = [entry(r, "aborted", running=1.8, kv_ready=1.7, transfer_start=1.6) for r in ids(10)]
    decode = [entry(r, "aborted", transfer_start=1.8) for r in ids(10)]
    snap = snapshot(cut, prefill, decode)
    assert_located(snap, "client->router", injected("Down", "client->router"))


def test_a_cut_on_a_down_link_is_the_link_s_though_the_router_restarted_just_before() -> None:
    # The router came back (a reset after an earlier test) a second before these were sent:
    # its restart was over, the disabled link is what broke their connections.
    cut = [
        record(
            i, state="unknown", finished=NOW - 0.2, error="ReadError: Can not write request body"
        )
        for i in range(10)
    ]
    snap = snapshot(cut)
    snap.observed = Observed(
        taken_at=NOW,
        prefill=["prefill-0"],
        decode=["decode-0"],
        link_names=LINKS,
        started={"router": NOW - 3.0},
    )
    assert_located(snap, "client->router", injected("Down", "client->router", age=0.5))


def test_old_failures_are_outside_the_window() -> None:
    old = [
        record(
            i, age=60, sent=None, state="error", finished=NOW - 50, error="ConnectError: refused"
        )
        for i in range(5)
    ]
    assert_located(snapshot(old), "none")


def test_prefill_stall() -> None:
    prefill = [entry(r, "prefilling", queued=1.9, running=1.85) for r in ids()]
    decode = [entry(r, "transfer", transfer_start=1.85) for r in ids()]
    diagnosis = assert_located(
        snapshot([record(i) for i in range(30)], prefill, decode), "prefill-0"
    )
    assert diagnosis.requests[0].furthest == "prefill-0 (prefilling)"


def test_kv_transfer_black_hole() -> None:
    prefill = [
        entry(r, "ok", running=1.85, kv_ready=1.8, transfer_start=1.7, finished=1.7) for r in ids()
    ]
    decode = [entry(r, "transfer", transfer_start=1.85) for r in ids()]
    snap = snapshot([record(i) for i in range(30)], prefill, decode)
    diagnosis = assert_located(
        snap, "decode-0->prefill-0", injected("Timeout", "decode-0->prefill-0")
    )
    assert "injected: Timeout on decode-0->prefill-0" in diagnosis.evidence


def test_kv_held_by_prefill_waiting_for_a_decode_that_never_fetches() -> None:
    prefill = [entry(r, "inflight", running=1.85, kv_ready=1.8) for r in ids()]
    decode = [entry(r, "transfer", transfer_start=1.85) for r in ids()]
    assert_located(snapshot([record(i) for i in range(30)], prefill, decode), "decode-0->prefill-0")


def test_decode_stall_after_three_tokens() -> None:
    prefill = [entry(r, "ok", kv_ready=1.8, transfer_start=1.7, finished=1.7) for r in ids()]
    decode = [
        entry(
            r,
            "running",
            tokens=3,
            transfer_start=1.85,
            kv_received=1.7,
            running=1.7,
            first_token=1.69,
        )
        for r in ids()
    ]
    client = [record(i, first_byte=NOW - 1.69, tokens=3) for i in range(30)]
    diagnosis = assert_located(snapshot(client, prefill, decode), "decode-0")
    assert "3 tokens" in diagnosis.requests[0].furthest


def test_router_to_decode_black_hole_on_the_way_back() -> None:
    prefill = [entry(r, "ok", kv_ready=1.8, transfer_start=1.7, finished=1.7) for r in ids()]
    decode = [
        entry(r, "ok", tokens=16, kv_received=1.7, running=1.7, first_token=1.69, finished=1.6)
        for r in ids()
    ]
    snap = snapshot([record(i) for i in range(30)], prefill, decode)
    assert_located(snap, "router->decode-0", injected("Timeout", "router->decode-0"))


def test_paused_prefill_is_named_though_its_ledger_is_silent() -> None:
    decode = [entry(r, "transfer", transfer_start=1.85) for r in ids()]
    snap = snapshot(
        [record(i) for i in range(30)],
        None,
        decode,
        silent=["prefill-0"],
        components={"prefill-0": "paused"},
        unanswered={"prefill-0 ledger": "did not answer"},
    )
    assert_located(snap, "prefill-0")


def test_client_pool_exhausted_by_leaked_streams() -> None:
    leaked = [record(i, first_byte=NOW - 1.9, pool_limit=4, pool_in_use=i) for i in range(4)]
    waiting = [record(i, sent=None, pool_limit=4, pool_in_use=4) for i in range(4, 30)]
    prefill = [entry(r, "ok", kv_ready=1.8, transfer_start=1.7, finished=1.7) for r in ids(4)]
    decode = [
        entry(r, "ok", tokens=16, kv_received=1.7, first_token=1.69, finished=1.6) for r in ids(4)
    ]
    diagnosis = assert_located(snapshot(leaked + waiting, prefill, decode), "client")
    assert diagnosis.stuck == {"client": {"harness": 30}}
    assert any("26 never left the client" in f for f in diagnosis.evidence)


def test_nothing_wrong_is_none_and_the_stray_still_named() -> None:
    done = [record(i, state="ok", finished=NOW - 1.5, tokens=16) for i in range(30)]
    young = [record(i, age=0.2) for i in range(30, 40)]
    diagnosis = assert_located(snapshot(done + young), "none")
    assert diagnosis.healthy and diagnosis.wedged == 0 and not diagnosis.requests
    assert "no wedge" in diagnosis.render()


def test_red_herring_rates_come_from_two_samples_of_per_origin_counters() -> None:
    snap = snapshot([record(i) for i in range(30)], components={"router": "paused"})
    snap.stub_states_before = {"decode-0": {"tokens_by_origin": {"stray-1": 1000, "harness": 80}}}
    snap.stub_states = {"decode-0": {"tokens_by_origin": {"stray-1": 1053, "harness": 80}}}
    snap.before_at = NOW - 1.0
    diagnosis = assert_located(snap, "router")
    herring = next(h for h in diagnosis.red_herrings if h.startswith("decode-0"))
    assert "decode-0 generating 53 tok/s, 100 % stray-1 (harness: 0 tok/s)" in herring


def test_red_herring_rates_are_timed_by_when_the_stub_took_its_states() -> None:
    # Streamed states can be an interval older than the samples that carry them: the stub's
    # own "at" times the rate (53 tokens in 0.5 s), not the samples' moments (1 s apart).
    snap = snapshot([record(i) for i in range(30)], components={"router": "paused"})
    snap.stub_states_before = {"decode-0": {"at": NOW - 0.6, "tokens_by_origin": {"stray-1": 1000}}}
    snap.stub_states = {"decode-0": {"at": NOW - 0.1, "tokens_by_origin": {"stray-1": 1053}}}
    snap.before_at = NOW - 1.0
    herring = next(
        h for h in assert_located(snap, "router").red_herrings if h.startswith("decode-0")
    )
    assert "decode-0 generating 106 tok/s, 100 % stray-1" in herring


def test_other_origins_stuck_are_counted_but_do_not_move_the_location() -> None:
    stray_stuck = [record(i, origin="stray-1") for i in range(50)]
    snap = snapshot([record(i) for i in range(3)] + stray_stuck, components={"router": "paused"})
    diagnosis = locate(snap, origin="harness")
    assert diagnosis.location == "router"
    assert diagnosis.stuck["router"] == {"harness": 3, "stray-1": 50}
    assert diagnosis.total == 3


def test_ties_go_to_the_upstream_hop() -> None:
    held = {"sent": None, "pool_limit": 2, "pool_in_use": 2}
    client = [record(i) for i in range(2)] + [record(2, **held), record(3, **held)]
    assert locate(snapshot(client)).location == "client"


def test_requests_not_sent_yet_are_no_wedge_without_an_exhausted_pool() -> None:
    # CPU starvation: the client has not got round to sending them. No pool limit, no wedge.
    slow_start = [record(i, sent=None) for i in range(30)]
    diagnosis = locate(snapshot(slow_start))
    assert diagnosis.location == "none", diagnosis.render()


def test_failures_before_the_window_start_do_not_count() -> None:
    old = [
        record(
            i,
            age=3,
            state="error",
            finished=NOW - 2.5,
            error="ConnectError: All connection attempts failed",
            sent=None,
        )
        for i in range(30)
    ]
    snap = snapshot(old)
    assert locate(snap).location == "client->router"
    assert locate(snap, since=NOW - 1.0).location == "none"


@pytest.mark.parametrize("fmt", ["json", "dict"])
def test_diagnosis_round_trips(fmt: str) -> None:
    snap = snapshot([record(i) for i in range(30)], components={"router": "paused"})
    diagnosis = locate(snap)
    again = (
        Diagnosis.from_json(diagnosis.to_json())
        if fmt == "json"
        else Diagnosis.from_dict(diagnosis.to_dict())
    )
    assert again == diagnosis
    assert again.render() == diagnosis.render()


def test_snapshot_round_trips_and_relocates_identically() -> None:
    snap = snapshot([record(i) for i in range(30)], components={"router": "paused"})
    again = Snapshot.from_json(snap.to_json())
    assert again == snap
    assert locate(again) == locate(snap)
    with pytest.raises(ValueError, match="not a pytest-wedge/snapshot"):
        Snapshot.from_json('{"format": "other"}')


def test_router_metrics_are_mapped_to_worker_names() -> None:
    text = """# TYPE smg_worker_requests_active gauge
smg_worker_requests_active{worker="http://127.0.0.1:4001"} 30
smg_worker_requests_active{worker="http://127.0.0.1:4002"} 29
# TYPE smg_http_responses_total counter
smg_http_responses_total{path="/v1/chat/completions",status_code="502",error_code="x"} 3
smg_http_responses_total{path="/readiness",status_code="200",error_code=""} 9
"""
    parsed = parse_router_metrics(
        text, {"http://127.0.0.1:4001": "prefill-0", "http://127.0.0.1:4002": "decode-0"}
    )
    assert parsed["requests_active"] == {"prefill-0": 30.0, "decode-0": 29.0}
    assert parsed["responses"] == {"502": 3.0}


def test_toxiproxy_counters_show_bytes_in_without_bytes_out() -> None:
    text = """# TYPE toxiproxy_proxy_received_bytes_total counter
toxiproxy_proxy_received_bytes_total{direction="downstream",listener="l",proxy="t0_a",upstream="u"} 500
# TYPE toxiproxy_proxy_sent_bytes_total counter
toxiproxy_proxy_sent_bytes_total{direction="downstream",listener="l",proxy="t0_a",upstream="u"} 100
"""
    assert parse_link_bytes(text, {"t0_a": "decode-0->prefill-0"}) == {
        "decode-0->prefill-0": {"downstream_in": 500.0, "downstream_out": 100.0}
    }


def refused_after_bootstrap_refusals(prefill_faults: list[dict[str, Any]]) -> Snapshot:
    """Every request's last attempt was refused by the router (its breakers opened); each
    earlier attempt failed at decode-0 because prefill-0's bootstrap server refused the KV."""
    refused = [
        record(
            i,
            age=0.5,
            state="error",
            status=503,
            finished=NOW - 0.3,
            error="HTTP 503: no_available_workers",
        )
        for i in range(30)
    ]
    prefill = [entry(rid, "released", kv_ready=1.5) for rid in ids()]
    decode = [entry(rid, "error", transfer_start=1.4) for rid in ids()]
    states = {"prefill-0": {"faults": prefill_faults}, "decode-0": {"faults": []}}
    return snapshot(refused, prefill, decode, stub_states=states)


def test_refused_by_open_breakers_while_the_prefill_still_refuses_is_the_prefill() -> None:
    still = refused_after_bootstrap_refusals([{"name": "f1", "kind": "refuse_bootstrap"}])
    assert_located(still, "prefill-0")


def test_refused_by_open_breakers_after_the_prefill_recovered_is_the_router() -> None:
    assert_located(refused_after_bootstrap_refusals([]), "router")


def test_refused_at_once_while_the_prefill_that_opened_the_breakers_still_refuses() -> None:
    # The refused requests never reached a worker; other requests' attempts in the window
    # failed at decode-0 because prefill-0's bootstrap server refused the KV, and still does.
    refused = [
        record(
            100 + i,
            age=0.5,
            state="error",
            status=503,
            finished=NOW - 0.3,
            error="HTTP 503: no_available_workers",
        )
        for i in range(3)
    ]
    earlier = [f"harness-x-{i}" for i in range(5)]
    pending = [record(i, age=0.3) for i in range(5)]
    prefill = [entry(rid, "aborted", kv_ready=0.2) for rid in earlier]
    decode = [entry(rid, "error", arrived=0.25, transfer_start=0.2) for rid in earlier]
    states = {
        "prefill-0": {"faults": [{"name": "f1", "kind": "refuse_bootstrap"}]},
        "decode-0": {"faults": []},
    }
    snap = snapshot([*refused, *pending], prefill, decode, stub_states=states)
    diagnosis = locate(snap, origin="harness", overdue_after_s=1.0, since=NOW - 0.4)
    assert diagnosis.location == "prefill-0", diagnosis.render()


def test_a_decode_that_finished_after_the_client_view_was_copied_still_held_it() -> None:
    # The client ledger is copied first and the worker ledgers last: a stream the client saw
    # pending, which decode-0 finished in between, was held by decode-0 (not leaked).
    streams = [record(i, first_byte=NOW - 1.5, tokens=3) for i in range(10)]
    decode = [entry(rid, "ok", tokens=16, first_token=1.5, finished=0.05) for rid in ids(10)]
    prefill = [entry(rid, "ok", kv_ready=1.8, transfer_start=1.7) for rid in ids(10)]
    snap = snapshot(streams, prefill, decode)
    snap.observed = Observed(
        taken_at=NOW,
        prefill=["prefill-0"],
        decode=["decode-0"],
        link_names=LINKS,
        client_at=NOW - 0.2,
    )
    assert_located(snap, "decode-0")


def test_a_request_whose_prefill_restarted_under_it_is_held_by_that_prefill() -> None:
    # The new prefill process has no ledger entry for it; the decode still waits for its KV.
    waiting = [record(0, age=1.5)]
    decode = [entry("harness-x-0", "transfer", arrived=1.4)]
    snap = snapshot(waiting, [], decode)
    snap.observed = Observed(
        taken_at=NOW,
        prefill=["prefill-0"],
        decode=["decode-0"],
        link_names=LINKS,
        started={"prefill-0": NOW - 1.0},
    )
    diagnosis = locate(snap, origin="harness", overdue_after_s=1.0, since=NOW - 1.2)
    assert diagnosis.location == "prefill-0", diagnosis.render()
