"""The engine behaviours behind the field-incident scenarios, in process (no subprocesses):
an error after the KV hand-over (sglang #34572), a decode that never bootstraps (#39367), a KV
transfer that never completes while /health answers (#23342), the prefill's bootstrap deadline
from arrival and without progress (smg #2463), and a preallocation slot held for the whole
request (#11809)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import ClientResponse, ClientSession
from aiohttp.test_utils import TestServer

from pytest_wedge.stubs.config import StubConfig, parse_args
from pytest_wedge.stubs.engine_faults import FaultError, parse_fault
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.prefill import bootstrap_app
from pytest_wedge.stubs.server import make_app

pytestmark = pytest.mark.timeout(30)


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 20))


async def eventually(condition: Callable[[], Any], what: str, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.01)


@dataclass
class Pair:
    prefill: Engine
    decode: Engine
    urls: dict[str, str]
    boot_port: int
    session: ClientSession

    def body(self, room: int, tokens: int = 3) -> dict[str, Any]:
        return {
            "model": "m",
            "stream": True,
            "max_tokens": tokens,
            "user": "h",
            "messages": [{"role": "user", "content": "hi"}],
            "bootstrap_room": room,
            "bootstrap_host": "127.0.0.1",
            "bootstrap_port": self.boot_port,
        }

    def post(self, role: str, room: int, tokens: int = 3) -> asyncio.Future[ClientResponse]:
        url = self.urls[role] + "/v1/chat/completions"
        return asyncio.ensure_future(self.session.post(url, json=self.body(room, tokens)))

    async def both(self, room: int, tokens: int = 3) -> tuple[ClientResponse, ClientResponse]:
        """The two legs of one attempt, as smg sends them: concurrently, same room."""
        p, d = self.post("prefill", room, tokens), self.post("decode", room, tokens)
        pre, dec = await asyncio.gather(p, d)
        await asyncio.gather(pre.read(), dec.read())
        return pre, dec

    def fault(self, role: str, **body: Any) -> None:
        engine = self.prefill if role == "prefill" else self.decode
        engine.add_fault(parse_fault({"name": body["kind"], **body}))


@asynccontextmanager
async def pair(
    prefill: dict[str, Any] | None = None, decode: dict[str, Any] | None = None
) -> AsyncIterator[Pair]:
    p = Engine(StubConfig(role="prefill", port=1, name="prefill-0", **(prefill or {})))
    d = Engine(
        StubConfig(role="decode", port=2, name="decode-0", **{"itl_ms": 0, **(decode or {})})
    )
    servers = [
        TestServer(app, host="127.0.0.1", handler_cancellation=True)
        for app in (make_app(p), bootstrap_app(p), make_app(d))
    ]
    for server in servers:
        await server.start_server()
    for engine in (p, d):
        engine.start()
    urls = {
        "prefill": str(servers[0].make_url("")).rstrip("/"),
        "decode": str(servers[2].make_url("")).rstrip("/"),
    }
    async with ClientSession() as session:
        try:
            yield Pair(p, d, urls, servers[1].port, session)
        finally:
            for engine in (p, d):
                await engine.stop()
            for server in servers:
                await server.close()


def one(engine: Engine, room: int) -> dict[str, Any]:
    (found,) = [e.to_json() for e in engine.ledger.entries if e.room == room]
    return found


def test_error_after_kv_taken_holds_the_head_until_the_decode_took_the_kv() -> None:
    async def body() -> None:
        async with pair() as pd:
            pd.fault("prefill", kind="error_status", status=500, after_kv_taken=True, delay_ms=50)
            pre, dec = await pd.both(room=1, tokens=3)
            assert pre.status == 500 and dec.status == 200  # the decode ran it all the same
            prefill, decode = one(pd.prefill, 1), one(pd.decode, 1)
            assert prefill["state"] == "error" and "after the KV hand-over" in prefill["error"]
            assert "transfer_start" in prefill["t"]
            assert decode["state"] == "ok" and decode["tokens"] == 3
            assert decode["t"]["finished"] <= prefill["t"]["finished"]  # ran before the error
            # At arrival (the default), nothing runs: the prefill answers before any KV exists.
            pd.fault("prefill", kind="error_status", status=503)
            pre = await pd.post("prefill", 2)
            assert pre.status == 503 and "kv_ready" not in one(pd.prefill, 2)["t"]

    run(body)


def test_error_status_parameters_are_checked() -> None:
    base = {"name": "e", "kind": "error_status"}
    assert parse_fault({**base, "after_kv_taken": True, "delay_ms": 5}).delay_ms == 5.0
    with pytest.raises(FaultError, match="after_kv_taken must be true or false"):
        parse_fault({**base, "after_kv_taken": 1})
    with pytest.raises(FaultError, match=r"delay_ms must be a number within 0\.\.600000"):
        parse_fault({**base, "delay_ms": -1})
    listed = parse_fault(base).to_json()  # limits at their defaults stay out of the listing
    assert "after_kv_taken" not in listed and "delay_ms" not in listed


def test_a_decode_that_never_bootstraps_leaves_the_prefill_unbootstrapped_until_reverted() -> None:
    async def body() -> None:
        async with pair() as pd:
            pd.fault("decode", kind="stall_bootstrap", origin="h")
            pre, dec = pd.post("prefill", 3), pd.post("decode", 3)
            await eventually(lambda: pd.prefill.ledger.count("inflight") == 1, "the KV ready")
            await asyncio.sleep(0.2)  # a stall that lets go would show within this
            assert pd.decode.ledger.count("prealloc") == 1  # it never took a slot
            assert pd.prefill.prefill_prealloc() == 1  # no decode came for the room
            assert "transfer_start" not in one(pd.prefill, 3)["t"]
            pd.decode.remove_fault("stall_bootstrap")  # a stall that ends heals
            assert (await dec).status == 200 and (await pre).status == 200
            await (await dec).read()
            assert one(pd.decode, 3)["state"] == "ok"

    run(body)


def test_a_kv_transfer_that_never_completes_while_every_health_answers() -> None:
    async def body() -> None:
        async with pair() as pd:
            pd.fault("prefill", kind="stall_kv_transfer")
            pre, dec = pd.post("prefill", 4), pd.post("decode", 4)
            await eventually(lambda: pd.decode.ledger.count("transfer") == 1, "the fetch")
            await eventually(lambda: "transfer_start" in one(pd.prefill, 4)["t"], "handshake")
            for url in (pd.urls["prefill"], pd.urls["decode"], f"http://127.0.0.1:{pd.boot_port}"):
                async with pd.session.get(url + "/health") as health:
                    assert health.status == 200
            assert not dec.done() and pd.decode.ledger.count("transfer") == 1
            pd.prefill.remove_fault("stall_kv_transfer")
            assert (await dec).status == 200
            await (await dec).read()
            await (await pre).read()
            assert one(pd.decode, 4)["state"] == "ok" and one(pd.prefill, 4)["state"] == "ok"

    run(body)


def test_the_bootstrap_deadline_from_arrival_fails_a_request_no_decode_came_for() -> None:
    async def body() -> None:
        async with pair() as pd:
            pd.prefill.set_watchdogs(bootstrap_timeout_s=0.2)
            pre = await pd.post("prefill", 5)  # no decode leg at all
            text = await pre.text()
            assert "bootstrap timeout: no decode came for the KV" in text  # an SSE error frame
            assert [f["watchdog"] for f in pd.prefill.firings] == ["bootstrap_timeout"]
            assert pd.prefill.counters.bootstrap_failed == 1
            assert one(pd.prefill, 5)["state"] == "error"
            # null goes back to the engine's own deadline (--bootstrap-timeout-s), never off.
            async with pd.session.post(
                pd.urls["prefill"] + "/control/watchdogs", json={"bootstrap_timeout_s": None}
            ) as answer:
                assert (await answer.json())["bootstrap_timeout_s"] == 300.0
            async with pd.session.post(
                pd.urls["prefill"] + "/control/watchdogs", json={"bootstrap_deadline_s": 1}
            ) as answer:
                assert answer.status == 400 and "unknown watchdog" in await answer.text()

    run(body)


def test_the_no_progress_deadline_spares_a_drain_and_still_fails_a_decode_that_admits_nothing() -> (
    None
):
    async def body() -> None:
        # One slot, held for the whole request (0.1 s each): five requests drain one by one,
        # so the last waits unbootstrapped well past 0.3 s, with an admission every 0.1 s.
        hold = {"prealloc_slots": 1, "prealloc_hold": "request", "itl_ms": 100.0}
        async with pair(decode=hold) as pd:
            pd.prefill.set_watchdogs(bootstrap_no_progress_s=0.3)
            attempts = await asyncio.gather(*(pd.both(room, tokens=2) for room in range(10, 15)))
            assert [(p.status, d.status) for p, d in attempts] == [(200, 200)] * 5
            assert not pd.prefill.firings
            waited = max(
                one(pd.decode, r)["t"]["transfer_start"] - one(pd.prefill, r)["t"]["arrived"]
                for r in range(10, 15)
            )
            assert waited > 0.35  # a deadline of 0.3 s from arrival would have failed it
            # A decode that admits nothing makes no progress: the same deadline fires.
            pd.fault("decode", kind="stall_bootstrap")
            pre, dec = pd.post("prefill", 20), pd.post("decode", 20)
            assert "bootstrap timeout" in await (await pre).text()
            assert [f["watchdog"] for f in pd.prefill.firings] == ["bootstrap_no_progress"]
            dec.cancel()

    run(body)


def test_a_slot_held_for_the_request_comes_back_when_the_request_ends() -> None:
    async def body() -> None:
        async with pair(decode={"prealloc_slots": 2, "prealloc_hold": "request"}) as pd:
            _, dec = await pd.both(9)
            assert dec.status == 200 and pd.decode.prealloc.snapshot()["used"] == 0
            assert pd.decode.prealloc.snapshot()["hold"] == "request"
            await pd.decode.reset()
            assert pd.decode.prealloc.hold == "request"  # the command line's, after a reset

    run(body)


def test_the_command_line_names_the_new_settings() -> None:
    config = parse_args(
        [
            "--role",
            "decode",
            "--port",
            "1",
            "--prealloc-hold",
            "request",
            "--bootstrap-no-progress-s",
            "2",
        ]
    )
    assert (config.prealloc_hold, config.bootstrap_no_progress_s) == ("request", 2.0)
    assert parse_args(["--role", "prefill", "--port", "1"]).bootstrap_no_progress_s is None
