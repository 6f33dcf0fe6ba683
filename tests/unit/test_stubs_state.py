"""State accounting, scheduling primitives and metrics of the stubs (no processes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pytest_wedge.stubs.config import StubConfig
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.exposition import COUNTERS, GAUGES, make_registry, render
from pytest_wedge.stubs.sched import SlotPool, ThroughputWindow
from pytest_wedge.stubs.textgen import parse_request
from pytest_wedge.stubs.worker_ledger import Entry, Ledger


def entry(origin: str = "h", room: int | None = None) -> Entry:
    return Entry(
        request_id="r",
        origin=origin,
        room=room,
        path="/generate",
        stream=True,
        prompt_tokens=10,
        max_tokens=4,
    )


async def until(condition: Callable[[], object], what: str, timeout_s: float = 2.0) -> None:
    """Let the other tasks run until ``condition()`` holds, against one deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.001)


def test_ledger_counts_states_and_tokens_by_origin() -> None:
    led = Ledger(maxlen=8)
    a, b = led.open(entry("h"), "queued"), led.open(entry("stray"), "queued")
    led.move(a, "running", "running")
    led.add_tokens(a, 3)
    led.add_tokens(b, 2)
    assert (led.count("queued"), led.count("running")) == (1, 1)
    led.move(a, "ok")
    led.move(a, "error")  # final states are sticky
    assert a.state == "ok" and {"arrived", "running", "finished"} <= set(a.t)
    assert led.active == {b} and led.tokens_by_origin == {"h": 3, "stray": 2}
    for _ in range(5):
        led.move(led.open(entry(), "queued"), "ok")
    for _ in range(3):
        led.open(entry(), "queued")
    assert len(led.entries) == 8  # bounded
    led.clear()
    assert led.tokens_total == 0 and led.active <= set(led.entries)
    assert led.count("queued") == len(led.active)


def test_the_ledger_size_bounds_the_history_from_the_command_line() -> None:
    from pytest_wedge.stubs.config import parse_args

    config = parse_args(["--role", "decode", "--port", "1", "--ledger-size", "3"])
    engine = Engine(config)
    for _ in range(5):
        engine.ledger.move(engine.ledger.open(entry(), "queued"), "ok")
    assert len(engine.ledger.entries) == 3
    assert Engine(StubConfig(role="decode", port=1)).ledger.entries.maxlen == 20_000
    with pytest.raises(SystemExit):
        parse_args(["--role", "decode", "--port", "1", "--ledger-size", "0"])


def test_slot_pool_is_fifo_and_follows_capacity() -> None:
    async def run() -> None:
        pool = SlotPool(1)
        order: list[int] = []
        assert pool.try_acquire()

        async def waiter(i: int) -> None:
            await pool.acquire()
            order.append(i)

        tasks = [asyncio.ensure_future(waiter(i)) for i in range(3)]
        await until(lambda: pool.waiting == 3, "three waiters to queue")
        tasks[1].cancel()  # a waiter that gives up leaves no hole
        await until(tasks[1].done, "the cancelled waiter to end")
        pool.release()
        await until(lambda: order, "a waiter to get the released slot")
        assert order == [0] and pool.used == 1
        pool.set_capacity(2)
        await until(lambda: len(order) == 2, "a waiter to get the added slot")
        assert order == [0, 2] and pool.used == 2 and pool.waiting == 0
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())


def test_throughput_window_covers_the_last_second() -> None:
    w = ThroughputWindow()
    for i in range(20):
        w.add(10, now=100.0 + i * 0.05)  # 200 tokens over 1 s
    assert w.rate(now=100.95) == pytest.approx(200.0)
    assert w.rate(now=102.5) == 0.0


def _families(text: bytes) -> dict[str, tuple[dict[str, str], float]]:
    out = {}
    for fam in text_string_to_metric_families(text.decode()):
        for sample in fam.samples:
            out[sample.name] = (sample.labels, sample.value)
    return out


def test_metrics_use_sglang_names_labels_and_live_state() -> None:
    async def run() -> None:
        engine = Engine(StubConfig(role="decode", port=1, model="m", max_running=4))
        info = parse_request(
            "/generate", {"text": "x" * 40, "user": "h"}, {}, default_tokens=16, limit=100
        )
        running = engine.open(info, "queued")
        engine.move(running, "running", "running")
        engine.add_tokens(running, 5)
        engine.open(info, "transfer")
        fams = _families(render(make_registry(engine)))
        for name in GAUGES:
            labels, _ = fams[f"sglang:{name}"]
            assert labels == {
                "model_name": "m",
                "engine_type": "decode",
                "tp_rank": "0",
                "pp_rank": "0",
            }
        for name in COUNTERS:
            assert f"sglang:{name}_total" in fams
        assert fams["sglang:num_running_reqs"][1] == 1
        assert fams["sglang:num_decode_transfer_queue_reqs"][1] == 1
        assert fams["sglang:num_used_tokens"][1] == 15
        assert fams["sglang:utilization"][1] == 0.25
        assert fams["sglang:gen_throughput"][1] > 0
        assert fams["sglang:generation_tokens_total"][1] == 5
        assert fams["sglang:num_requests_total"][1] == 2
        engine.finish(running, "aborted", "test")
        fams = _families(render(make_registry(engine)))
        assert fams["sglang:num_running_reqs"][1] == 0
        assert fams["sglang:num_aborted_requests_total"][1] == 1

    asyncio.run(run())


def test_prefill_metrics_report_inflight_and_negative_utilization() -> None:
    engine = Engine(StubConfig(role="prefill", port=1, model="m"))
    info = parse_request("/generate", {"text": "abcd"}, {}, default_tokens=1, limit=10)
    e = engine.open(info, "queued")
    engine.move(e, "inflight", "kv_ready")
    fams = _families(render(make_registry(engine)))
    assert fams["sglang:num_prefill_inflight_queue_reqs"][1] == 1
    assert fams["sglang:utilization"][1] == -1
    assert fams["sglang:num_running_reqs"][1] == 0


def test_watchdogs_fire_on_old_entries_only() -> None:
    engine = Engine(StubConfig(role="prefill", port=1, inflight_pin_watchdog_s=1.0))
    info = parse_request(
        "/generate", {"text": "abcd", "bootstrap_room": 7}, {}, default_tokens=1, limit=10
    )
    old, young = engine.open(info, "queued"), engine.open(info, "queued")
    engine.move(old, "inflight", "kv_ready")
    engine.move(young, "inflight", "kv_ready")
    old.t["kv_ready"] -= 5
    engine.check_watchdogs(young.t["kv_ready"] + 0.1)
    assert old.release.is_set() and not young.release.is_set()
    assert [(f["watchdog"], f["room"]) for f in engine.firings] == [("inflight_pin", 7)]
    engine.check_watchdogs(young.t["kv_ready"] + 0.1)
    assert len(engine.firings) == 1  # fires once per request
