"""The stubs' HTTP surface, in process (aiohttp test servers, no subprocesses)."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from pytest_wedge.evidence.parse import parse_engine_metrics
from pytest_wedge.stubs.config import StubConfig
from pytest_wedge.stubs.engine_faults import parse_fault
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.prefill import bootstrap_app
from pytest_wedge.stubs.server import make_app


async def start(engine: Engine, app: Any = None) -> TestServer:
    server = TestServer(app or make_app(engine), host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    return server


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 20))


async def eventually(condition: Callable[[], Any], what: str, timeout_s: float = 5.0) -> Any:
    """Poll ``condition`` (sync or async) against one deadline; return its first truthy value."""
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
        await asyncio.sleep(0.01)


def chat(tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": True,
        "max_tokens": tokens,
        "user": "h",
        "messages": [{"role": "user", "content": "hi there"}],
        **extra,
    }


def contents(sse: str) -> list[str]:
    frames = [json.loads(x[6:]) for x in sse.split("\n\n") if x.startswith("data: {")]
    return [
        c["delta"]["content"]
        for f in frames
        for c in f.get("choices", [])
        if c.get("delta", {}).get("content")
    ]


def test_identity_endpoints_look_like_sglang() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, model="m"))
        server = await start(engine)
        async with ClientSession(str(server.make_url(""))) as s:
            models = await (await s.get("/v1/models")).json()
            assert models["data"][0]["owned_by"] == "sglang" and models["data"][0]["id"] == "m"
            for path in ("/server_info", "/get_server_info"):
                info = await (await s.get(path)).json()
                assert info["disaggregation_mode"] == "decode" and info["tp_size"] == 1
            assert (await s.get("/get_model_info")).status == 200
            assert (await s.get("/version")).status == 404  # would make smg say vLLM
            assert (await s.get("/health")).status == 200
        await server.close()

    run(body)


def test_direct_stream_bad_request_and_ledger() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, model="m", itl_ms=0))
        engine.start()
        server = await start(engine)
        async with ClientSession(str(server.make_url(""))) as s:
            resp = await s.post("/v1/chat/completions", data=b"{nope")
            assert resp.status == 400
            resp = await s.post(
                "/v1/chat/completions", json=chat(5), headers={"X-Request-ID": "abc"}
            )
            text = await resp.text()
            assert len(contents(text)) == 5 and text.endswith("data: [DONE]\n\n")
            resp = await s.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            assert (await resp.json())["object"] == "text_completion"
            ledger = await (await s.get("/ledger?origin=h")).json()
            [e] = ledger["entries"]
            assert (e["request_id"], e["state"], e["tokens"], e["room"]) == ("abc", "ok", 5, None)
            state = await (await s.get("/control/state")).json()
            assert state["tokens_by_origin"] == {"h": 5, "unknown": 2}
        await engine.stop()
        await server.close()

    run(body)


def test_error_status_fault_is_chunked_and_reset_clears_it() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1))
        server = await start(engine)
        async with ClientSession(str(server.make_url(""))) as s:
            bad = await s.post("/control/faults", json={"name": "x", "kind": "bogus"})
            assert bad.status == 400 and "unknown fault kind" in (await bad.json())["error"]
            await s.post(
                "/control/faults",
                json={"name": "e", "kind": "error_status", "status": 503, "message": "boom"},
            )
            resp = await s.post("/v1/chat/completions", json=chat(2))
            assert resp.status == 503 and resp.headers["Transfer-Encoding"] == "chunked"
            assert (await resp.json())["message"] == "boom"
            assert (await s.delete("/control/faults/e")).status == 200
            assert (await s.delete("/control/faults/e")).status == 200  # idempotent
            wd = await s.post("/control/watchdogs", json={"transfer_timeout_s": 2})
            assert (await wd.json())["transfer_timeout_s"] == 2.0
            state = await (await s.post("/control/reset")).json()
            assert state["watchdogs"]["transfer_timeout_s"] is None
            assert state["counters"]["requests"] == 0 and state["faults"] == []
        await server.close()

    run(body)


def test_serialize_fault_queues_and_reset_releases_stalls() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, itl_ms=1))
        engine.start()
        server = await start(engine)
        async with ClientSession(str(server.make_url(""))) as s:
            await s.post("/control/faults", json={"name": "s", "kind": "serialize"})
            await s.post(
                "/control/faults", json={"name": "st", "kind": "stall_after_tokens", "tokens": 1}
            )
            reqs = [
                asyncio.ensure_future(s.post("/v1/chat/completions", json=chat(3)))
                for _ in range(3)
            ]

            async def two_queued() -> dict[str, Any] | None:
                state = await (await s.get("/control/state")).json()
                return state if state["queued"] == 2 else None

            state = await eventually(two_queued, "two requests queued behind the running one")
            assert (state["running"], state["queued"], state["slots"]["capacity"]) == (1, 2, 1)
            await s.post("/control/reset")
            for r in reqs:
                await (await r).read()  # every stalled or queued stream has ended
            state = await (await s.get("/control/state")).json()
            assert state["active"] == 0 and state["slots"]["used"] == 0
        await engine.stop()
        await server.close()

    run(body)


def test_leak_slot_keeps_one_answered_request_running_in_every_n_until_a_reset() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, itl_ms=0))
        engine.start()
        server = await start(engine)
        async with ClientSession(str(server.make_url(""))) as s:
            await s.post("/control/faults", json={"name": "l", "kind": "leak_slot", "every": 3})
            for _ in range(7):  # every answer is complete: the leak is the engine's alone
                resp = await s.post("/v1/chat/completions", json=chat(2))
                text = await resp.text()
                assert len(contents(text)) == 2 and text.endswith("data: [DONE]\n\n")
            state = await (await s.get("/control/state")).json()
            assert (state["running"], state["slots"]["used"]) == (2, 2)  # the 3rd and the 6th
            metrics = await (await s.get("/metrics")).text()
            assert "sglang:num_running_reqs" in metrics
            assert parse_engine_metrics(metrics)["num_running_reqs"] == 2
            [fault] = state["faults"]
            assert (fault["matched"], fault["fired"]) == (7, 2)
            await s.delete("/control/faults/l")  # a revert stops the leaking, not the leak
            await (await s.post("/v1/chat/completions", json=chat(1))).read()
            state = await (await s.get("/control/state")).json()
            assert state["slots"]["used"] == 2
            state = await (await s.post("/control/reset")).json()
            assert state["slots"]["used"] == 0 and state["active"] == 0
        await engine.stop()
        await server.close()

    run(body)


def test_pd_transfer_and_stale_peer_in_process() -> None:
    async def body() -> None:
        p_engine = Engine(StubConfig(role="prefill", port=1, name="prefill-0"))
        d_cfg = dict(role="decode", port=2, name="decode-0", itl_ms=0)
        d1 = Engine(StubConfig(**d_cfg, instance_id="one"))  # type: ignore[arg-type]
        d2 = Engine(StubConfig(**d_cfg, instance_id="two"))  # type: ignore[arg-type]
        servers = [
            await start(p_engine),
            await start(p_engine, bootstrap_app(p_engine)),
            await start(d1),
            await start(d2),
        ]
        for e in (p_engine, d1, d2):
            e.start()
        p, _, s1, s2 = (str(x.make_url("/")) for x in servers)
        boot = {"bootstrap_host": "127.0.0.1", "bootstrap_port": servers[1].port}

        async def pd(decode_url: str, room: int) -> tuple[int, str]:
            async with ClientSession() as s:
                req = chat(3, bootstrap_room=room, **boot)
                pre = asyncio.ensure_future(s.post(p + "v1/chat/completions", json=req))
                dec = await s.post(decode_url + "v1/chat/completions", json=req)
                await (await pre).read()
                return dec.status, await dec.text()

        status, text = await pd(s1, 11)
        assert status == 200 and len(contents(text)) == 3
        assert p_engine.peers == {"decode-0": "one"}
        # Same decode name, new instance: the prefill keeps the KV, the fetch never completes.
        wedged = asyncio.ensure_future(pd(s2, 12))
        await eventually(
            lambda: d2.ledger.count("transfer") == 1 and p_engine.ledger.count("inflight") == 1,
            "the new decode to wait on a transfer the prefill holds for the old one",
        )
        await p_engine.reset()
        status, text = await wedged
        assert "error" in text and p_engine.peers == {}
        status, text = await pd(s2, 13)
        assert status == 200 and len(contents(text)) == 3
        assert p_engine.peers == {"decode-0": "two"}
        for e in (p_engine, d1, d2):
            await e.stop()
        for server in servers:
            await server.close()

    run(body)


def test_prefill_stall_is_cleared_by_decode_transfer_timeout() -> None:
    async def body() -> None:
        p_engine = Engine(StubConfig(role="prefill", port=1, name="prefill-0"))
        d_engine = Engine(
            StubConfig(role="decode", port=2, name="decode-0", transfer_timeout_s=0.2, itl_ms=0)
        )
        servers = [
            await start(p_engine),
            await start(p_engine, bootstrap_app(p_engine)),
            await start(d_engine),
        ]
        for e in (p_engine, d_engine):
            e.start()
        p_engine.faults.add(parse_fault({"name": "s", "kind": "stall_before_first_token"}))
        req = chat(
            3,
            stream=False,
            bootstrap_room=9,
            bootstrap_host="127.0.0.1",
            bootstrap_port=servers[1].port,
        )
        async with ClientSession() as s:
            pre = asyncio.ensure_future(
                s.post(str(servers[0].make_url("/v1/chat/completions")), json=req)
            )
            dec = await s.post(str(servers[2].make_url("/v1/chat/completions")), json=req)
            assert dec.status == 500 and "transfer timeout" in await dec.text()
            assert [f["watchdog"] for f in d_engine.firings] == ["transfer_timeout"]
            assert d_engine.counters.transfer_failed == 1
            assert p_engine.ledger.count("prefilling") == 1  # the stall itself stays
            await p_engine.reset()
            assert (await pre).status == 503
        for e in (p_engine, d_engine):
            await e.stop()
        for server in servers:
            await server.close()

    run(body)


def test_slow_tokens_and_stall_before_first_token_on_decode() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, itl_ms=0))
        engine.start()
        server = await start(engine)
        async with ClientSession(str(server.make_url(""))) as s:
            engine.faults.add(parse_fault({"name": "slow", "kind": "slow_tokens", "itl_ms": 50}))
            t0 = asyncio.get_running_loop().time()
            await (await s.post("/v1/chat/completions", json=chat(5))).read()
            assert asyncio.get_running_loop().time() - t0 >= 0.2
            engine.faults.add(
                parse_fault({"name": "st", "kind": "stall_before_first_token", "origin": "h"})
            )
            stalled = asyncio.ensure_future(s.post("/v1/chat/completions", json=chat(2)))
            other = await s.post("/v1/chat/completions", json=chat(1, user="stray"))
            assert len(contents(await other.text())) == 1  # origin filter spares others
            await eventually(
                lambda: engine.ledger.count("running") == 1, "the stalled request to be admitted"
            )
            assert not stalled.done()  # held before its first token; the 503 below proves it
            await engine.reset()
            resp = await stalled
            assert resp.status == 503  # head never went out, so the end is an error status
        await engine.stop()
        await server.close()

    run(body)
