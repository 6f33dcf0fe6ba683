"""Decode admission as SGLang builds it (preallocation slots, transfer queue, waiting queue,
running batch) and what each slot policy does with the slot of a failed, reset or stalled KV
transfer, seen through SGLang's gauges. In process: aiohttp test servers, no subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from pytest_wedge.stubs.config import SLOT_POLICIES, StubConfig, parse_args
from pytest_wedge.stubs.engine_faults import parse_fault
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.exposition import gauge_values
from pytest_wedge.stubs.prefill import bootstrap_app
from pytest_wedge.stubs.server import make_app

QUEUES = (
    "num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs",
    "num_queue_reqs",
    "num_running_reqs",
)
TIMEOUT_S = 0.4  # the decode's transfer timeout where a test needs one


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


def queues(engine: Engine) -> tuple[float, ...]:
    """(prealloc, transfer, waiting, running): SGLang's four decode gauges, in that order."""
    values = gauge_values(engine)
    return tuple(values[name] for name in QUEUES)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nobody listens here: a KV fetch to it is refused at once


def pd_body(room: int, bootstrap_port: int, tokens: int = 3) -> dict[str, Any]:
    return {
        "model": "m",
        "stream": True,
        "max_tokens": tokens,
        "user": "h",
        "messages": [{"role": "user", "content": "kv"}],
        "bootstrap_room": room,
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": bootstrap_port,
    }


async def serve(engine: Engine, app: Any = None) -> TestServer:
    server = TestServer(app or make_app(engine), host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    return server


class PD:
    """One prefill engine (with its bootstrap server) and one decode engine, in process."""

    def __init__(self, p: Engine, d: Engine, servers: list[TestServer]) -> None:
        self.p, self.d, self.servers = p, d, servers
        self.session = ClientSession()
        self.bootstrap_port = servers[1].port

    def send(self, room: int, *, prefill: bool = True) -> asyncio.Future[int]:
        """Both legs of one request, as smg sends them; resolves to the decode's status."""
        body = pd_body(room, self.bootstrap_port)

        async def legs() -> int:
            pre = asyncio.ensure_future(self.post(0, body)) if prefill else None
            status = await self.post(2, body)
            if pre is not None:
                await pre
            return status

        return asyncio.ensure_future(legs())

    async def post(self, index: int, body: dict[str, Any]) -> int:
        url = str(self.servers[index].make_url("/v1/chat/completions"))
        async with self.session.post(url, json=body) as resp:
            await resp.read()
            return resp.status


@contextlib.asynccontextmanager
async def pd(prefill: dict[str, Any] | None = None, **decode: Any) -> AsyncIterator[PD]:
    p = Engine(StubConfig(role="prefill", port=1, name="prefill-0", **(prefill or {})))
    d = Engine(StubConfig(role="decode", port=2, name="decode-0", itl_ms=1, **decode))
    servers = [await serve(p), await serve(p, bootstrap_app(p)), await serve(d)]
    for e in (p, d):
        e.start()
    pair = PD(p, d, servers)
    try:
        yield pair
    finally:
        for e in (p, d):
            await e.reset()  # ends whatever a test left held
            await e.stop()
        await pair.session.close()
        for server in servers:
            await server.close()


# -- the option -------------------------------------------------------------------------------


def test_prealloc_slots_default_to_twice_max_running_and_the_policy_to_released() -> None:
    base = ["--role", "decode", "--port", "1"]
    cfg = parse_args(base)
    assert (cfg.prealloc_capacity, cfg.slot_on_transfer_failure) == (128, "released")
    assert parse_args([*base, "--max-running", "4"]).prealloc_capacity == 8
    cfg = parse_args([*base, "--prealloc-slots", "3", "--slot-on-transfer-failure", "leaked"])
    assert (cfg.prealloc_capacity, cfg.slot_on_transfer_failure) == (3, "leaked")
    # The prefill accepts the flags too: StubOptions.extra_args go to every stub.
    assert parse_args(["--role", "prefill", "--port", "1", "--prealloc-slots", "2"])
    for bad in (["--prealloc-slots", "-1"], ["--slot-on-transfer-failure", "kept"]):
        with pytest.raises(SystemExit):
            parse_args([*base, *bad])


# -- the queues -------------------------------------------------------------------------------


def test_requests_move_through_prealloc_transfer_waiting_queue_and_running_batch() -> None:
    """One preallocation slot, one running slot: each stage is seen in its own gauge."""

    async def body() -> None:
        async with pd(prealloc_slots=1, max_running=1) as pair:
            pair.p.add_fault(parse_fault({"name": "hold-kv", "kind": "stall_before_first_token"}))
            first = pair.send(1)
            await eventually(lambda: pair.d.ledger.count("transfer") == 1, "A in transfer")
            second = pair.send(2)
            await eventually(
                lambda: queues(pair.d) == (1, 1, 0, 0),
                "A holding the slot in transfer, B waiting for a slot",
            )
            assert pair.d.snapshot()["prealloc_slots"]["used"] == 1
            # Hold the first token so both requests stay in the batch or behind it.
            pair.d.add_fault(parse_fault({"name": "hold-run", "kind": "stall_before_first_token"}))
            pair.p.remove_fault("hold-kv")
            await eventually(
                lambda: queues(pair.d) == (0, 0, 1, 1),
                "A running, B's KV in, B waiting for a running slot",
            )
            assert pair.d.snapshot()["prealloc_slots"]["used"] == 0  # the KV came: slot back
            pair.d.remove_fault("hold-run")
            assert (await first, await second) == (200, 200)
            assert queues(pair.d) == (0, 0, 0, 0)

    run(body)


def test_a_prefill_gives_its_running_slot_back_once_the_kv_is_ready() -> None:
    """Concurrent dispatch may reach the decode in another order than the prefill: here the
    decode's two preallocation slots go to rooms 3 and 2, still queued at a one-slot prefill,
    while room 1, prefilled, waits for a decode slot. A prefill that kept its running slot until
    the KV was fetched would never run rooms 2 and 3: nothing would end."""

    async def body() -> None:
        async with pd(prefill={"max_running": 1}, max_running=1) as pair:
            hold = {"name": "hold", "kind": "stall_before_first_token"}
            pair.p.add_fault(parse_fault(hold))
            legs = {}
            for room in (1, 2, 3):  # the prefill admits them in this order
                legs[f"prefill {room}"] = asyncio.ensure_future(
                    pair.post(0, pd_body(room, pair.bootstrap_port))
                )
                await eventually(lambda n=room: len(pair.p.ledger.active) == n, f"room {room} in")
            for room in (3, 2):
                legs[f"decode {room}"] = asyncio.ensure_future(
                    pair.post(2, pd_body(room, pair.bootstrap_port))
                )
            await eventually(
                lambda: pair.d.snapshot()["prealloc_slots"]["used"] == 2,
                "rooms 3 and 2 in transfer",
            )
            legs["decode 1"] = asyncio.ensure_future(pair.post(2, pd_body(1, pair.bootstrap_port)))
            await eventually(lambda: queues(pair.d)[0] == 1, "room 1 waiting for a decode slot")
            pair.p.remove_fault("hold")
            _, pending = await asyncio.wait(legs.values(), timeout=5.0)
            stuck = [name for name, leg in legs.items() if leg in pending]
            assert not stuck, f"still waiting after 5 s: {stuck}"
            assert {name: leg.result() for name, leg in legs.items()} == dict.fromkeys(legs, 200)

    run(body)


# -- the slot policies ------------------------------------------------------------------------

# The slot a transfer held, right after the transfer ended that way: still counted in the
# transfer queue (1) or given back (0). A transfer cut by the transfer timeout has already
# waited the timeout, so released_after_timeout gives its slot back at once.
ORPHANED = {
    "released": {"refused": 0, "timed out": 0, "aborted": 0},
    "released_after_timeout": {"refused": 1, "timed out": 0, "aborted": 1},
    "leaked": {"refused": 1, "timed out": 1, "aborted": 1},
}


@pytest.mark.parametrize("how", ["refused", "timed out", "aborted"])
@pytest.mark.parametrize("policy", SLOT_POLICIES)
def test_each_slot_policy_on_a_failed_reset_or_stalled_transfer(policy: str, how: str) -> None:
    async def body() -> None:
        async with pd(
            prealloc_slots=2, slot_on_transfer_failure=policy, transfer_timeout_s=TIMEOUT_S
        ) as pair:
            if how == "refused":  # the KV fetch is refused: SGLang's KVPoll.Failed
                pair.bootstrap_port = closed_port()
                assert await pair.send(7, prefill=False) == 502
            else:  # the prefill never has the KV ready: the transfer stalls
                pair.p.add_fault(parse_fault({"name": "st", "kind": "stall_before_first_token"}))
                call = pair.send(7)
                await eventually(lambda: pair.d.ledger.count("transfer") == 1, "a transfer")
                if how == "aborted":  # the client goes away: the abort reaches the transfer
                    call.cancel()
                    await eventually(lambda: pair.d.ledger.count("aborted") == 1, "an abort")
                else:  # the engine's transfer timeout cuts it
                    await eventually(lambda: pair.d.ledger.count("error") == 1, "the timeout")
                    assert [f["watchdog"] for f in pair.d.firings] == ["transfer_timeout"]
            [entry] = list(pair.d.ledger.entries)
            assert entry.final and "transfer_start" in entry.t  # it held a slot, and it ended
            orphaned = ORPHANED[policy][how]
            # The request has ended; its slot is counted in the transfer queue until released.
            assert queues(pair.d) == (0, orphaned, 0, 0)
            slots = pair.d.snapshot()["prealloc_slots"]
            assert (slots["used"], slots["orphaned"], slots["policy"]) == (
                orphaned,
                orphaned,
                policy,
            )
            if policy == "released_after_timeout" and orphaned:
                await eventually(lambda: queues(pair.d)[1] == 0, "the slot's timeout")
                released = time.time()
                assert released >= entry.t["transfer_start"] + TIMEOUT_S
                assert pair.d.snapshot()["prealloc_slots"]["used"] == 0
            if policy == "leaked":
                assert pair.d.snapshot()["prealloc_slots"]["leaked"] == 1

    run(body)


def test_leaked_slots_exhaust_the_pool_and_wedge_admission_until_reset() -> None:
    """The field bug (sglang #31800): the transfer queue freezes at the pool size, and every
    new request waits in the prealloc queue, though nothing is transferring any more."""

    async def body() -> None:
        async with pd(prealloc_slots=2, slot_on_transfer_failure="leaked") as pair:
            good_port = pair.bootstrap_port
            pair.bootstrap_port = closed_port()
            assert [await pair.send(r, prefill=False) for r in (1, 2)] == [502, 502]
            assert queues(pair.d) == (0, 2, 0, 0)
            assert pair.d.ledger.count("transfer") == 0  # nothing is transferring
            pair.bootstrap_port = good_port  # the link is healthy again
            stuck = pair.send(3, prefill=False)  # it never gets as far as its prefill
            await eventually(
                lambda: queues(pair.d) == (1, 2, 0, 0),
                "a healthy request stuck in the prealloc queue",
            )
            slots = pair.d.snapshot()["prealloc_slots"]
            assert (slots["used"], slots["capacity"], slots["waiting"]) == (2, 2, 1)
            await pair.d.reset()  # an engine restart gives the leaked slots back
            assert await stuck == 503  # the reset ended the stuck request
            assert queues(pair.d) == (0, 0, 0, 0)
            assert await pair.send(4) == 200  # and admission works again

    run(body)


def test_released_slots_keep_admission_working_after_failed_transfers() -> None:
    async def body() -> None:
        async with pd(prealloc_slots=1, slot_on_transfer_failure="released") as pair:
            good_port = pair.bootstrap_port
            pair.bootstrap_port = closed_port()
            assert [await pair.send(r, prefill=False) for r in (1, 2, 3)] == [502] * 3
            assert pair.d.counters.bootstrap_failed == 3
            pair.bootstrap_port = good_port
            assert await pair.send(4) == 200
            assert queues(pair.d) == (0, 0, 0, 0)

    run(body)


# -- the control API and the metrics ------------------------------------------------------------


def test_admission_is_settable_through_the_control_api_and_reset_restores_it() -> None:
    async def body() -> None:
        engine = Engine(StubConfig(role="decode", port=1, prealloc_slots=4))
        server = await serve(engine)
        async with ClientSession(str(server.make_url(""))) as s:
            resp = await s.post(
                "/control/admission",
                json={"prealloc_slots": 1, "slot_on_transfer_failure": "leaked"},
            )
            assert resp.status == 200
            assert (await resp.json())["capacity"] == 1 and engine.prealloc.policy == "leaked"
            for bad in (
                {"prealloc_slots": 0},
                {"prealloc_slots": True},
                {"slot_on_transfer_failure": "kept"},
                {"other": 1},
                [1],
            ):
                resp = await s.post("/control/admission", json=bad)
                assert resp.status == 400, bad
            state = await (await s.post("/control/reset")).json()
            assert state["prealloc_slots"]["capacity"] == 4
            assert state["prealloc_slots"]["policy"] == "released"
        await server.close()

    run(body)


def test_orphaned_slots_are_in_the_transfer_queue_gauge_of_the_metrics_text() -> None:
    async def body() -> None:
        async with pd(prealloc_slots=3, slot_on_transfer_failure="leaked") as pair:
            pair.bootstrap_port = closed_port()
            await pair.send(1, prefill=False)
            url = str(pair.servers[2].make_url("/metrics"))
            async with pair.session.get(url) as resp:
                text = await resp.text()
            samples = {
                s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            }
            assert samples["sglang:num_decode_transfer_queue_reqs"] == 1
            assert samples["sglang:num_decode_prealloc_queue_reqs"] == 0
            assert samples["sglang:num_bootstrap_failed_reqs_total"] == 1

    run(body)
