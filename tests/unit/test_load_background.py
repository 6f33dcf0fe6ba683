"""Harness, StrayRequester and Aborter in their own threads against a real socket server.

The stray requester's schedule is also checked on a virtual clock, where it is exact.
"""

from __future__ import annotations

import asyncio
import importlib.util
import selectors
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_wedge.load import Aborter, ClientLedger, Harness, StrayRequester
from pytest_wedge.load import background as background_module


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


def test_a_bounded_history_carries_the_opening_and_the_last_rounds() -> None:
    with (
        ChatServer() as server,
        Harness(server.base_url, agents=1, rounds=5, history_rounds=2, run_id="hr") as h,
    ):
        assert h.wait(20)
    by_id = {r["body"]["wedge_request_id"]: r["body"]["messages"] for r in server.requests}
    sizes = [len(by_id[f"harness-hr-a0-r{n}-t0"]) for n in range(5)]
    assert sizes == [2, 4, 6, 6, 6]
    last, before = by_id["harness-hr-a0-r4-t0"], by_id["harness-hr-a0-r3-t0"]
    assert last[:2] == before[:2]  # the opening stays
    assert last[2]["tool_calls"][0]["id"] == "call_0_2"  # rounds 0 and 1 were dropped


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


def test_concurrent_loads_get_distinct_prompt_seeds_by_default() -> None:
    from faker import Faker

    from pytest_wedge.load.harness import _script

    url = "http://127.0.0.1:9"  # never contacted: nothing here starts
    first, second = Harness(url), Harness(url)  # two harness groups of one origin
    stray = StrayRequester(url)
    assert len({first.seed, second.seed, stray.seed}) == 3
    assert _script(Faker(), first.seed, 0, 1) != _script(Faker(), second.seed, 0, 1)
    # A given seed wins; a given run id gives the same default seed again.
    assert Harness(url, seed=7).seed == 7
    assert Harness(url, run_id="r").seed == Harness(url, run_id="r").seed


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
def test_stray_rate_is_honoured_on_its_own_schedule() -> None:
    rate, duration = 20, 1.0
    interval = 1 / rate
    with ChatServer() as server:
        stray = StrayRequester(server.base_url, rate_per_s=rate, max_duration_s=duration)
        started = time.time()  # the time bound starts after this, and before the first slot
        stray.start()
        assert stray.wait(20) and stray.hit_time_bound
    view = stray.ledger.by_origin("stray-1")
    # When each request went out (its record is made once its slot comes), in order, and the
    # slots the requester kept: the schedule, as it kept it (not rebuilt from a late record).
    sent = [r.created for r in stray.records]
    slots = stray.slots
    assert len(slots) == len(sent)
    # Never ahead of the schedule (the two clocks agree to well under a millisecond), and no
    # burst: slots at least one interval apart.
    early = [n for n, (t, slot) in enumerate(zip(sent, slots, strict=True)) if t < slot - 0.0005]
    assert not early, [(n, sent[n] - slots[n]) for n in early]
    bursts = [n for n in range(1, len(slots)) if slots[n] - slots[n - 1] < interval - 0.0005]
    assert not bursts, [(n, slots[n] - slots[n - 1]) for n in bursts]
    # The schedule had room for rate * duration slots (20), less what a loop that woke late
    # cost it (the slip, 0 on a quiet machine). No slot after the time bound: at most that
    # many. Every slot before it used: at least that many, less the slots lost before the
    # first one (the requester's own start-up, measured) and the one a loop still asleep at
    # the bound loses.
    slip = slots[-1] - slots[0] - (len(sent) - 1) * interval
    room = (duration - slip) * rate
    late_start = (sent[0] - started) * rate
    assert room - late_start - 1 <= len(sent) < room + 1, (len(sent), room, late_start)
    assert len(view) == len(sent)
    assert view.pending() == []
    assert all(r.origin == "stray-1" for r in view)
    assert {r["body"]["user"] for r in server.requests} == {"stray-1"}


class _SkipAhead(selectors.DefaultSelector):
    """Where the loop would block until its next timer, move a virtual clock on to it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise RuntimeError("the loop waits for I/O, which a virtual clock cannot skip")
        self.now += max(timeout, 0.0)
        return super().select(0)


class _VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on a virtual clock: sleeps and timeouts take no real time."""

    def __init__(self) -> None:
        self.clock = _SkipAhead()
        super().__init__(self.clock)

    def time(self) -> float:
        return self.clock.now


def _stray_on_virtual_time(
    monkeypatch: pytest.MonkeyPatch, response_s: float, **options: Any
) -> tuple[StrayRequester, list[float]]:
    """Run a StrayRequester to its end on a virtual clock; each request takes ``response_s``.

    Returns the requester and when (on its own clock) each request went out.
    """
    loops: list[_VirtualTimeLoop] = []
    sent_at: list[float] = []

    def new_event_loop() -> _VirtualTimeLoop:
        loops.append(_VirtualTimeLoop())
        return loops[-1]

    async def answer(client: Any, ledger: ClientLedger, record: Any, **_: Any) -> None:
        ledger.add(record)
        sent_at.append(loops[-1].time())
        await asyncio.sleep(response_s)
        record.finish("ok")

    monkeypatch.setattr(asyncio.events, "new_event_loop", new_event_loop)
    monkeypatch.setattr(background_module, "send_chat", answer)
    stray = StrayRequester("http://127.0.0.1:9", **options).start()
    assert stray.wait(10) and len(loops) == 1
    return stray, sent_at


@pytest.mark.timeout(30)
def test_stray_sends_rate_times_duration_on_its_own_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    stray, sent_at = _stray_on_virtual_time(monkeypatch, 0.23, rate_per_s=20, max_duration_s=1.0)
    # Open loop: one request every 1/20 s although each takes 0.23 s; the 21st would be due
    # at the time bound itself.
    assert stray.hit_time_bound
    assert sent_at == pytest.approx([n / 20 for n in range(20)])
    assert stray.ledger.view().states()["ok"] == 16  # the last 4 were cut by the time bound


@pytest.mark.timeout(30)
def test_stray_schedule_slips_rather_than_bursts(monkeypatch: pytest.MonkeyPatch) -> None:
    # One slot of concurrency and 0.12 s per request: the schedule waits for the slot, then
    # goes on from there instead of sending the requests it owes in a burst.
    _, sent_at = _stray_on_virtual_time(
        monkeypatch, 0.12, rate_per_s=20, max_duration_s=1.0, max_concurrency=1
    )
    assert sent_at == pytest.approx([n * 0.12 for n in range(9)])


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
