"""A stall that is reverted (or whose window ends) releases what it held: the held requests go
on generating within one inter-token interval, as a real engine's batch does once its scheduler
unblocks. In process: aiohttp test servers over the engine objects, no subprocesses."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from pytest_wedge.metrics_text import metric_value
from pytest_wedge.stubs.config import StubConfig
from pytest_wedge.stubs.engine_faults import parse_fault
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.prefill import bootstrap_app
from pytest_wedge.stubs.server import make_app
from pytest_wedge.stubs.worker_ledger import Entry

ITL_S = 0.05
SLACK_S = 0.05  # scheduling slack of one event loop running servers and clients together


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 20))


async def eventually(condition: Callable[[], Any], what: str, timeout_s: float = 5.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.005)


def chat(tokens: int, user: str = "h", **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": True,
        "max_tokens": tokens,
        "user": user,
        "messages": [{"role": "user", "content": "stall"}],
        **extra,
    }


async def stream(session: ClientSession, url: str, body: dict[str, Any]) -> tuple[int, list[float]]:
    """POST a streamed chat; the status and the wall-clock arrival time of each token."""
    async with session.post(url, json=body) as resp:
        arrivals = []
        async for line in resp.content:
            if line.startswith(b"data: {") and b'"content"' in line:
                frame = json.loads(line[6:])
                if frame["choices"][0]["delta"].get("content"):
                    arrivals.append(time.time())
        return resp.status, arrivals


async def serve(engine: Engine, app: Any = None) -> TestServer:
    server = TestServer(app or make_app(engine), host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    return server


def removed_at(engine: Engine, name: str) -> float:
    """The stub's own clock of the revert (the fault event the control API records)."""
    [at] = [e["at"] for e in engine.fault_events if e["event"] == "removed" and e["name"] == name]
    return float(at)


def held(engine: Engine, count: int) -> Callable[[], list[Entry]]:
    def check() -> list[Entry]:
        entries = [e for e in engine.ledger.active if e.state == "running"]
        return entries if len(entries) == count else []

    return check


def test_reverting_stall_before_first_token_resumes_held_requests_within_one_itl() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, itl_ms=ITL_S * 1000))
        engine.start()
        server = await serve(engine)
        url = str(server.make_url("/v1/chat/completions"))
        async with ClientSession(str(server.make_url(""))) as s:
            fault = {"name": "st", "kind": "stall_before_first_token"}
            assert (await s.post("/control/faults", json=fault)).status == 200
            calls = [asyncio.ensure_future(stream(s, url, chat(4))) for _ in range(3)]
            entries = await eventually(held(engine, 3), "three requests held before a token")
            assert all(e.tokens == 0 and "first_token" not in e.t for e in entries)
            assert (await s.delete("/control/faults/st")).status == 200
            revert = removed_at(engine, "st")
            for status, arrivals in await asyncio.gather(*calls):
                assert status == 200 and len(arrivals) == 4
                assert arrivals[0] - revert <= ITL_S + SLACK_S, arrivals[0] - revert
            for entry in entries:
                assert entry.state == "ok" and entry.tokens == 4
                assert 0 <= entry.t["first_token"] - revert <= ITL_S + SLACK_S
            state = await (await s.get("/control/state")).json()
            assert state["faults"] == [] and state["active"] == 0
            assert [e["event"] for e in state["fault_events"]] == ["added", "removed"]
        await engine.stop()
        await server.close()

    run(body)


def test_reverting_stall_after_tokens_sends_the_next_token_within_one_itl() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, itl_ms=ITL_S * 1000))
        engine.start()
        server = await serve(engine)
        url = str(server.make_url("/v1/chat/completions"))
        async with ClientSession() as s:
            engine.add_fault(parse_fault({"name": "sa", "kind": "stall_after_tokens", "tokens": 2}))
            calls = [asyncio.ensure_future(stream(s, url, chat(5))) for _ in range(2)]
            await eventually(
                lambda: [e.tokens for e in held(engine, 2)()] == [2, 2],
                "two streams at two tokens each",
            )
            assert engine.remove_fault("sa")
            revert = removed_at(engine, "sa")
            for status, arrivals in await asyncio.gather(*calls):
                assert status == 200 and len(arrivals) == 5
                third = arrivals[2]  # the first token after the stall
                assert 0 <= third - revert <= ITL_S + SLACK_S, third - revert
        await engine.stop()
        await server.close()

    run(body)


def test_a_held_request_waits_until_no_stall_matches_its_origin() -> None:
    """Two stalls hold one origin: reverting one keeps it held, reverting both releases it."""

    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, itl_ms=ITL_S * 1000))
        engine.start()
        server = await serve(engine)
        url = str(server.make_url("/v1/chat/completions"))
        async with ClientSession() as s:
            engine.add_fault(parse_fault({"name": "all", "kind": "stall_before_first_token"}))
            engine.add_fault(
                parse_fault({"name": "mine", "kind": "stall_before_first_token", "origin": "h"})
            )
            call = asyncio.ensure_future(stream(s, url, chat(2)))
            [entry] = await eventually(held(engine, 1), "the request held")
            engine.remove_fault("all")
            # The change woke it; it re-checked and found its origin's own stall. A measured
            # window (not a wait for readiness): released, it would send a token within an ITL.
            await asyncio.sleep(3 * ITL_S)
            assert entry.state == "running" and entry.tokens == 0 and not call.done()
            engine.remove_fault("mine")
            status, arrivals = await call
            assert status == 200 and arrivals[0] - removed_at(engine, "mine") <= ITL_S + SLACK_S
        await engine.stop()
        await server.close()

    run(body)


def test_a_reset_still_aborts_a_held_request_rather_than_resuming_it() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, itl_ms=ITL_S * 1000))
        engine.start()
        server = await serve(engine)
        async with ClientSession() as s:
            engine.add_fault(parse_fault({"name": "st", "kind": "stall_before_first_token"}))
            call = asyncio.ensure_future(
                s.post(str(server.make_url("/v1/chat/completions")), json=chat(3))
            )
            [entry] = await eventually(held(engine, 1), "the request held")
            await engine.reset()  # clears the faults and releases, in one step
            assert (await call).status == 503
            assert entry.state == "aborted" and entry.tokens == 0
        await engine.stop()
        await server.close()

    run(body)


def test_reverting_a_prefill_stall_lets_the_prefill_and_its_decode_finish() -> None:
    """The prefill holds the request before computing it; the decode waits in its transfer
    queue. The revert lets the prefill compute, the KV move, and the decode stream."""

    async def body() -> None:
        p_engine = Engine(StubConfig(role="prefill", port=1, name="prefill-0"))
        d_engine = Engine(StubConfig(role="decode", port=2, name="decode-0", itl_ms=5))
        servers = [
            await serve(p_engine),
            await serve(p_engine, bootstrap_app(p_engine)),
            await serve(d_engine),
        ]
        for e in (p_engine, d_engine):
            e.start()
        p_engine.add_fault(parse_fault({"name": "st", "kind": "stall_before_first_token"}))
        req = chat(3, bootstrap_room=5, bootstrap_host="127.0.0.1", bootstrap_port=servers[1].port)
        async with ClientSession() as s:
            pre = asyncio.ensure_future(
                s.post(str(servers[0].make_url("/v1/chat/completions")), json=req)
            )
            dec = asyncio.ensure_future(
                stream(s, str(servers[2].make_url("/v1/chat/completions")), req)
            )
            await eventually(
                lambda: (
                    p_engine.ledger.count("prefilling") == 1
                    and d_engine.ledger.count("transfer") == 1
                ),
                "the prefill held and the decode waiting for its KV",
            )
            p_engine.remove_fault("st")
            status, arrivals = await dec
            assert status == 200 and len(arrivals) == 3
            assert (await pre).status == 200
            [p_entry] = list(p_engine.ledger.entries)
            assert p_entry.state == "ok" and p_entry.t["running"] < removed_at(p_engine, "st")
        for e in (p_engine, d_engine):
            await e.stop()
        for server in servers:
            await server.close()

    run(body)


def test_a_frozen_engine_loop_holds_every_request_while_health_and_metrics_answer() -> None:
    """freeze_engine_loop: running streams stop between tokens and a new request is not
    admitted, while /health answers 200 and /metrics shows them as they are held (vLLM's
    EngineCore under SIGSTOP). The revert lets all of them finish."""

    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, itl_ms=ITL_S * 1000))
        engine.start()
        server = await serve(engine)
        url = str(server.make_url("/v1/chat/completions"))
        async with ClientSession(str(server.make_url(""))) as s:
            running = [asyncio.ensure_future(stream(s, url, chat(40))) for _ in range(2)]
            await eventually(
                lambda: [e.tokens >= 2 for e in held(engine, 2)()] == [True, True],
                "two streams under way",
            )
            freeze = {"name": "fz", "kind": "freeze_engine_loop"}
            assert (await s.post("/control/faults", json=freeze)).status == 200
            late = asyncio.ensure_future(stream(s, url, chat(3, user="late")))
            await eventually(lambda: engine.ledger.count("queued") == 1, "the late one queued")
            # A measured window (not a wait for readiness): a running stream makes a token
            # every ITL, so several ITLs without one show it held.
            await asyncio.sleep(2 * ITL_S)
            tokens = [e.tokens for e in held(engine, 2)()]
            before = await (await s.get("/metrics")).text()
            await asyncio.sleep(4 * ITL_S)
            assert [e.tokens for e in held(engine, 2)()] == tokens and max(tokens) < 40
            assert (await s.get("/health")).status == 200
            # /health_generate needs a token of the engine loop: it answers only after.
            probe = asyncio.ensure_future(s.get(str(server.make_url("/health_generate"))))
            await asyncio.sleep(4 * ITL_S)  # a measured window, as above
            assert not probe.done()
            metrics = await (await s.get("/metrics")).text()
            assert metric_value(metrics, "sglang:num_running_reqs") == 2
            assert metric_value(metrics, "sglang:num_queue_reqs") == 1
            generated = "sglang:generation_tokens_total"
            assert metric_value(metrics, generated) == metric_value(before, generated) > 0
            state = await (await s.get("/control/state")).json()
            assert state["states"] == {"running": 2, "queued": 1}
            assert [f["kind"] for f in state["faults"]] == ["freeze_engine_loop"]
            assert (await s.delete("/control/faults/fz")).status == 200
            revert = removed_at(engine, "fz")
            for status, arrivals in await asyncio.gather(*running, late):
                assert status == 200 and len(arrivals) in (40, 3)
            assert (await probe).status == 200
            assert all(e.state == "ok" for e in engine.ledger.entries)
            [late_entry] = [e for e in engine.ledger.entries if e.origin == "late"]
            assert late_entry.t["running"] >= revert
        await engine.stop()
        await server.close()

    run(body)


def test_a_frozen_decode_never_fetches_the_kv_and_no_engine_deadline_fires() -> None:
    """On a frozen decode a PD request waits in the preallocation queue: the prefill keeps its
    KV, no transfer starts, and the decode's own transfer timeout stays quiet (it runs on
    the frozen loop). The revert lets the transfer, and the stream, go."""

    async def body() -> None:
        p_engine = Engine(StubConfig(role="prefill", port=1, name="prefill-0"))
        d_engine = Engine(
            StubConfig(role="decode", port=2, name="decode-0", itl_ms=5, transfer_timeout_s=0.1)
        )
        servers = [
            await serve(p_engine),
            await serve(p_engine, bootstrap_app(p_engine)),
            await serve(d_engine),
        ]
        for e in (p_engine, d_engine):
            e.start()
        d_engine.add_fault(parse_fault({"name": "fz", "kind": "freeze_engine_loop"}))
        req = chat(3, bootstrap_room=7, bootstrap_host="127.0.0.1", bootstrap_port=servers[1].port)
        async with ClientSession() as s:
            pre = asyncio.ensure_future(
                s.post(str(servers[0].make_url("/v1/chat/completions")), json=req)
            )
            dec = asyncio.ensure_future(
                stream(s, str(servers[2].make_url("/v1/chat/completions")), req)
            )
            await eventually(
                lambda: (
                    p_engine.ledger.count("inflight") == 1
                    and d_engine.ledger.count("prealloc") == 1
                ),
                "the prefill holding the KV and the decode frozen before its transfer",
            )
            # Past the decode's 0.1 s transfer timeout, measured: it must not fire.
            await asyncio.sleep(0.3)
            assert d_engine.ledger.count("prealloc") == 1 and not d_engine.firings
            assert not p_engine.rooms[7].fetch_seen
            # Its deadline passed while frozen: the thawed loop's first check would fire it,
            # racing the transfer. Turned off, what the revert releases is what is tested.
            d_engine.set_watchdogs(transfer_timeout_s=None)
            d_engine.remove_fault("fz")
            status, arrivals = await dec
            assert status == 200 and len(arrivals) == 3
            assert (await pre).status == 200
        for e in (p_engine, d_engine):
            await e.stop()
        for server in servers:
            await server.close()

    run(body)
