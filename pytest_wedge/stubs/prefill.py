"""Prefill role: admit, prefill, hold the KV until the decode fetches it; the bootstrap server."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from aiohttp import web

from .engine_faults import StubFault
from .engine_state import ENGINE, Engine
from .flow import Failed, admit, fail_late, run_request
from .rooms import Room
from .sched import Released, hold, until_released
from .textgen import RequestInfo
from .wire import Reply, send_error
from .worker_ledger import Entry

log = logging.getLogger("pytest_wedge.stubs")


async def _wait_any(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def _await_transfer(engine: Engine, room: Room, entry: Entry) -> None:
    # Bounded by the engine's bootstrap deadline (Engine.check_watchdogs), which releases it.
    await _wait_any(room.fetched, room.aborted)
    if room.fetched.is_set():
        return
    if engine.faults.find("pin_on_abort", entry.origin):
        # The engine bug under test: the aborted transfer never frees the in-flight slot.
        await hold(entry)
    raise Failed(499, "transfer aborted by decode", state="aborted")


async def handle(
    request: web.Request, engine: Engine, info: RequestInfo, error: StubFault | None
) -> web.StreamResponse:
    """``error``: an ``error_status`` fault with ``after_kv_taken`` that fired for this request.
    It holds the response head and fails the request once the decode has taken its KV."""
    room = engine.room(info.room) if info.room is not None else None

    async def body(reply: Reply, entry: Entry) -> web.StreamResponse:
        try:
            return await _prefill(reply, entry)
        except asyncio.CancelledError:
            # smg closes the prefill leg too when its client goes away; the buggy engine keeps
            # the slot and the KV anyway, with no handler left to free them.
            pinned = engine.faults.find("pin_on_abort", entry.origin)
            if pinned and entry.state in ("prefilling", "inflight"):
                engine.pin(entry)
            raise

    async def _prefill(reply: Reply, entry: Entry) -> web.StreamResponse:
        if room is not None:
            room.entry = entry
        if engine.kv_blocks is not None:
            await until_released(entry, engine.take_kv_blocks(entry))
        await admit(engine, entry, "prefilling")
        await engine.stall(entry, "stall_before_first_token")
        await until_released(
            entry, asyncio.sleep(info.prompt_tokens * engine.config.prefill_ms_per_token / 1000.0)
        )
        engine.move(entry, "inflight", "kv_ready")
        # The forward is done: SGLang moves the request to its inflight queue, which holds the
        # KV (--kv-slots) but no running slot. Holding the slot until the decode fetched would
        # deadlock concurrent dispatch: the decode's preallocation slots taken by requests still
        # queued here, while the one running here waits for a slot there.
        engine.free_slot(entry)
        if room is not None:
            room.kv_ready.set()
            await until_released(entry, _await_transfer(engine, room, entry))
        if error is not None:
            await until_released(entry, fail_late(error))
        resp = await reply.finish()
        engine.finish(entry, "ok")
        return resp

    try:
        # smg needs the prefill head promptly for streams; the body may follow much later.
        # A late error keeps the head back: smg must see the error as the attempt's answer.
        return await run_request(request, engine, info, "queued", body, eager_head=error is None)
    finally:
        if room is not None:
            # Any fetch still waiting for KV that will never come must be answered now.
            if not room.kv_ready.is_set() or not room.fetched.is_set():
                room.closed.set()
            engine.drop_room(room)


# -- bootstrap server ------------------------------------------------------------------------


async def kv_fetch(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE]
    try:
        room_id = int(request.match_info["room"])
    except ValueError:
        return await send_error(request, 400, "room must be an integer")
    name = request.query.get("decode_name") or "decode"
    instance = request.query.get("decode_instance", "")
    if room_id in engine.ended_rooms:
        return await send_error(request, 503, "prefill request already ended; its KV was released")
    room = engine.room(room_id)
    room.fetchers += 1
    try:
        origin = room.entry.origin if room.entry else request.query.get("origin", "unknown")
        if engine.faults.find("refuse_bootstrap", origin):
            return await send_error(request, 503, "bootstrap refused (fault refuse_bootstrap)")
        peer = engine.peers.setdefault(name, instance)
        if peer != instance:
            # A real prefill keeps pushing to the decode it knows; the new one never gets KV.
            room.stale_fetch_from = instance
            log.warning(
                "%s room %s: fetch from %s instance %s, transfer peer is %s; holding",
                engine.config.component,
                room_id,
                name,
                instance,
                peer,
            )
            await room.closed.wait()
            return await send_error(request, 503, "transfer peer was reset")
        room.fetch_seen = True
        engine.last_decode_progress = time.time()  # a decode admitted a room: it makes progress
        try:
            await _wait_any(room.kv_ready, room.closed)
            if not room.kv_ready.is_set() or room.entry is None:
                return await send_error(request, 503, "prefill request ended before KV was ready")
            room.entry.mark("transfer_start")
            payload = json.dumps(
                {
                    "room": room_id,
                    "prompt_tokens": room.entry.prompt_tokens,
                    "prefill": engine.config.component,
                    "prefill_instance": engine.config.instance_id,
                }
            ).encode()
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            stall = engine.faults.find("stall_kv_transfer", room.entry.origin)
            if stall is not None and stall.midway:
                await resp.prepare(request)  # the transfer has started: part of the KV is out
                await resp.write(payload[: len(payload) // 2])
            try:
                # The handshake is done; a transfer channel that never delivers holds the KV.
                await engine.stall(room.entry, "stall_kv_transfer")
            except Released:
                if not resp.prepared:
                    return await send_error(
                        request, 503, "prefill request ended during the transfer"
                    )
                if request.transport is not None:
                    request.transport.abort()  # the decode sees its transfer fail
                return resp
            if not resp.prepared:
                await resp.prepare(request)
                await resp.write(payload[: len(payload) // 2])
            await resp.write(payload[len(payload) // 2 :])
            await resp.write_eof()
            room.fetched.set()
            return resp
        except (asyncio.CancelledError, ConnectionResetError):
            if not room.fetched.is_set():
                room.aborted.set()
            raise
    finally:
        room.fetchers -= 1
        engine.drop_room(room)


async def bootstrap_health(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def parallel_info(request: web.Request) -> web.Response:
    """What SGLang's bootstrap server answers on ``/route`` to a decode that asks for this
    prefill's parallel layout (``try_ensure_parallel_info``)."""
    return web.json_response({"prefill_tp_size": 1, "prefill_dp_size": 1, "prefill_pp_size": 1})


def bootstrap_app(engine: Engine) -> web.Application:
    app = web.Application()
    app[ENGINE] = engine
    app.router.add_post("/kv/{room}", kv_fetch)
    app.router.add_get("/health", bootstrap_health)
    app.router.add_get("/route", parallel_info)
    return app
