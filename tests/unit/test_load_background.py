"""Harness, StrayRequester and Aborter in their own threads against a real socket server."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_wedge.load import Aborter, ClientLedger, Harness, StrayRequester


def _server_module() -> ModuleType:
    name = "_wedge_load_test_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_load_server.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


ChatServer: Any = _server_module().ChatServer
wait_until: Any = _server_module().wait_until


@pytest.mark.timeout(30)
def test_harness_runs_its_rounds_and_stops_by_itself() -> None:
    with ChatServer() as server, Harness(server.base_url, agents=5, rounds=3, run_id="ok") as h:
        assert h.wait(20)
        assert h.ledger.by_origin("harness").states()["ok"] == 15 == h.progress()
        assert not h.running
    by_id = {r["body"]["wedge_request_id"]: r["body"] for r in server.requests}
    # History grows each round: system + task, then one tool call and its result per round.
    sizes = [len(by_id[f"harness-ok-a0-r{n}-t0"]["messages"]) for n in range(3)]
    assert sizes == [2, 4, 6]
    round2 = by_id["harness-ok-a0-r2-t0"]["messages"]
    assert round2[2]["tool_calls"][0]["id"] == round2[3]["tool_call_id"]


@pytest.mark.timeout(30)
def test_prompts_are_deterministic_under_seed() -> None:
    def prompts(seed: int) -> list[Any]:
        with ChatServer() as server:
            with Harness(server.base_url, agents=3, rounds=2, seed=seed) as h:
                assert h.wait(20)
            bodies = sorted(server.requests, key=lambda r: r["body"]["wedge_request_id"])
            return [r["body"]["messages"] for r in bodies]

    assert prompts(7) == prompts(7)
    assert prompts(7) != prompts(8)


@pytest.mark.timeout(30)
def test_retries_are_new_linked_records_and_bounded() -> None:
    with ChatServer(mode="status500") as server:
        h = Harness(server.base_url, agents=2, rounds=2, retries=2, run_id="rt").start()
        assert h.wait(20)
    records = h.ledger.records
    assert len(records) == h.max_requests == 12
    assert all(r.state == "error" and r.status == 500 for r in records)
    by_id = {r.request_id: r for r in records}
    assert by_id["harness-rt-a1-r1-t2"].retry_of == "harness-rt-a1-r1-t1"
    assert by_id["harness-rt-a1-r1-t0"].retry_of is None


@pytest.mark.timeout(30)
def test_pool_exhaustion_leaves_the_rest_never_sent_until_stop() -> None:
    with ChatServer(mode="hang") as server:
        h = Harness(
            server.base_url,
            agents=10,
            rounds=1,
            max_connections=4,
            leak_streams=True,
            client_timeout_s=60,
            run_id="pool",
        )
        with h:
            # Four heads back = four connections checked out for good; nothing else can move.
            wait_until(
                lambda: (
                    len(h.ledger) == 10
                    and sum(r.first_byte is not None for r in h.ledger.records) == 4
                ),
                what="4 leaked heads",
            )
            view = h.ledger.by_origin("harness")
            assert sum(r.sent is not None for r in view) == 4
            assert len(view.pending()) == 10
            assert len(view.never_sent()) == 6
            assert len(server.requests) == 4
        view = h.ledger.by_origin("harness")
        assert view.pending() == []
        assert view.states()["unknown"] == 4 and view.states()["aborted"] == 6
        assert len(view.never_sent()) == 6 and len(view.lost()) == 10
        assert all(r.cut_by_stop for r in view)


@pytest.mark.timeout(30)
def test_time_bound_stops_a_wedged_harness_with_nothing_pending() -> None:
    with ChatServer(mode="hang") as server:
        h = Harness(server.base_url, agents=3, client_timeout_s=None, max_duration_s=0.5)
        with h:
            assert h.wait(20)
            assert h.hit_time_bound
    view = h.ledger.view()
    assert len(view) == 3 and view.pending() == []
    assert view.states()["unknown"] == 3 and len(view.lost()) == 3


@pytest.mark.timeout(30)
def test_client_timeouts_end_requests_without_a_stop() -> None:
    with ChatServer(mode="hang") as server:
        h = Harness(server.base_url, agents=2, rounds=2, client_timeout_s=0.2).start()
        assert h.wait(20)
    view = h.ledger.view()
    assert view.states()["timeout"] == 4 and view.lost() == []


@pytest.mark.timeout(30)
def test_a_crashing_load_reports_on_wait() -> None:
    ledger = ClientLedger()
    with ChatServer() as server:
        with Harness(server.base_url, agents=1, rounds=1, ledger=ledger, run_id="x") as first:
            assert first.wait(20)
        second = Harness(server.base_url, agents=1, rounds=1, ledger=ledger, run_id="x")
        with pytest.raises(RuntimeError, match=r"crashed.*already in this ledger"):
            second.start().wait(20)
        second.stop()


@pytest.mark.timeout(30)
def test_stray_rate_is_roughly_honoured() -> None:
    with ChatServer() as server:
        stray = StrayRequester(server.base_url, rate_per_s=20, max_duration_s=1.0).start()
        assert stray.wait(20) and stray.hit_time_bound
    view = stray.ledger.by_origin("stray-1")
    assert 8 <= len(view) <= 30, len(view)
    assert view.pending() == []
    assert all(r.origin == "stray-1" for r in view)
    assert {r["body"]["user"] for r in server.requests} == {"stray-1"}


@pytest.mark.timeout(30)
def test_stray_is_open_loop_and_count_bounded() -> None:
    with ChatServer(mode="hang") as server:
        stray = StrayRequester(server.base_url, rate_per_s=200, max_requests=6, seed=1)
        with stray:
            # Open loop: all six go out although none of them ever finishes.
            wait_until(lambda: len(server.requests) == 6, what="six stray requests")
            assert len(stray.ledger.view().pending()) == 6
            assert stray.running
        assert stray.ledger.view().pending() == []
        assert stray.ledger.view().states()["unknown"] == 6


@pytest.mark.timeout(30)
def test_aborter_aborts_after_k_tokens_or_t_seconds() -> None:
    with ChatServer() as server:
        by_tokens = Aborter(
            server.base_url,
            count=3,
            abort_after_tokens=2,
            max_tokens=50,
            extra_body={"test_token_delay_s": 0.01},
        )
        with by_tokens:
            assert by_tokens.wait(20)
        by_time = Aborter(
            server.base_url, count=2, abort_after_s=0.2, extra_body={"test_mode": "hang"}
        )
        with by_time:
            assert by_time.wait(20)
    assert [(r.state, r.tokens) for r in by_tokens.ledger.records] == [("aborted", 2)] * 3
    assert [r.state for r in by_time.ledger.records] == ["aborted"] * 2
    assert by_time.ledger.view().lost() == []


@pytest.mark.timeout(30)
def test_pool_timeout_is_a_client_timeout_that_never_left_the_client() -> None:
    with ChatServer(mode="hang") as server:
        h = Harness(
            server.base_url,
            agents=3,
            rounds=1,
            max_connections=1,
            pool_timeout_s=0.2,
            leak_streams=True,
            run_id="pt",
        )
        with h:
            # The waiting agents time out, the leaking one already moved on: the load ends.
            assert h.wait(10)
    timeouts = [r for r in h.ledger.records if r.state == "timeout"]
    assert len(timeouts) == 2 and all(r.sent is None for r in timeouts)
    assert all(r.error is not None and r.error.startswith("PoolTimeout") for r in timeouts)
    leaked = h.ledger.view().lost()
    assert [(r.state, r.sent is not None) for r in leaked] == [("unknown", True)]
