"""The vLLM personality of the stubs (``--protocol vllm``), as vllm-router 0.1.17 drives it.

The prefill answers ``max_tokens:1`` at once with its own ``kv_transfer_params`` handle and
keeps the KV until a decode pulls it (NIXL's delayed free); the decode pulls it from
``remote_host:remote_port``, remapped onto its ``decode-j->prefill-i`` link, before its first
token. ``remote_request_id`` names the stub's room.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .engine_faults import StubFault
from .engine_state import BOOTSTRAP_TIMEOUT, ENGINE, Engine
from .flow import admit, fail_late, outcome, run_request
from .rooms import Room
from .sched import Released, until_released
from .textgen import BadRequest, RequestInfo, token_words
from .wire import Reply
from .worker_ledger import Entry

# Requests whose HTTP answer went out while the engine still holds their KV: kept referenced
# so the event loop does not drop the task that ends their ledger entry.
_HELD: set[asyncio.Task[None]] = set()


def _port(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise BadRequest("kv_transfer_params.remote_port must be an integer")
    return int(value)


def apply_kv_params(info: RequestInfo, body: Mapping[str, Any], role: str) -> RequestInfo:
    """The request as the vLLM personality serves it: a prefill gets a fresh room for the KV it
    will hold; a decode handed a prefill's handle gets that room and the side channel's
    address. vllm-router sets a top-level ``max_tokens:1`` on ``/generate`` too."""
    params = body.get("kv_transfer_params")
    if params is not None and not isinstance(params, dict):
        raise BadRequest("kv_transfer_params must be an object")
    params = params or {}
    top = body.get("max_tokens")
    if info.path == "/generate" and isinstance(top, int) and not isinstance(top, bool):
        info = dataclasses.replace(info, max_tokens=max(0, top))
    if role == "prefill":
        # The router always asks for a JSON answer it can read the handle from.
        return dataclasses.replace(
            info, stream=False, room=secrets.randbits(63), bootstrap_addr=None
        )
    if not params.get("do_remote_prefill"):
        return dataclasses.replace(info, room=None, bootstrap_addr=None)
    room, host = params.get("remote_request_id"), params.get("remote_host")
    if not isinstance(room, str) or not room.isdigit() or not isinstance(host, str):
        raise BadRequest("kv_transfer_params lacks this prefill's remote_request_id/remote_host")
    addr = f"{host}:{_port(params.get('remote_port'))}"
    return dataclasses.replace(info, room=int(room), bootstrap_addr=addr)


def kv_handle(engine: Engine, info: RequestInfo) -> dict[str, Any]:
    """What a NIXL prefill returns, plus the room id the stub's side channel serves."""
    cfg = engine.config
    blocks = (info.prompt_tokens + 15) // 16  # vLLM's default block size
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": cfg.instance_id,
        "remote_block_ids": list(range(blocks)),
        "remote_host": cfg.host,
        "remote_port": cfg.bootstrap_port,
        "remote_request_id": str(info.room),
        "tp_size": 1,
    }


async def _hold_kv(engine: Engine, room: Room, entry: Entry) -> None:
    """After the answer: the KV stays until a decode pulled it, the decode went away, or the
    engine's deadline expired it (vLLM's ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT``; here the
    bootstrap deadline, ``--bootstrap-timeout-s``)."""
    try:
        waits = [asyncio.ensure_future(e.wait()) for e in (room.fetched, room.aborted, room.closed)]
        try:
            await until_released(entry, asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED))
        finally:
            for w in waits:
                w.cancel()
        if room.fetched.is_set():
            engine.finish(entry, "ok")
            return
        if engine.faults.find("pin_on_abort", entry.origin):
            # The engine bug: the blocks of an aborted remote-KV load are never reclaimed
            # (vLLM issue #46283), until the in-flight pin watchdog or a reset.
            await until_released(entry, asyncio.Event().wait())
        engine.finish(entry, "aborted", "the decode went away before it pulled the KV")
    except Released as rel:
        if rel.reason == BOOTSTRAP_TIMEOUT:
            engine.counters.bootstrap_failed += 1  # vllm:nixl_num_kv_expired_reqs
        engine.finish(entry, outcome(rel.reason)[0], rel.reason)
    finally:
        room.closed.set()
        engine.drop_room(room)


async def handle_prefill(
    request: web.Request, engine: Engine, info: RequestInfo, error: StubFault | None
) -> web.StreamResponse:
    """Admit, prefill, produce the one token asked for, answer with the handle, hold the KV."""
    assert info.room is not None
    room = engine.room(info.room)

    async def body(reply: Reply, entry: Entry) -> web.StreamResponse:
        try:
            return await _prefill(reply, entry)
        except asyncio.CancelledError:
            # vllm-router closes the prefill leg when its client goes away mid-prefill; the
            # buggy engine keeps the slot and the KV anyway, as the SGLang personality does.
            if engine.faults.find("pin_on_abort", entry.origin) and entry.state == "prefilling":
                engine.pin(entry)
            raise

    async def _prefill(reply: Reply, entry: Entry) -> web.StreamResponse:
        room.entry = entry
        if engine.kv_blocks is not None:
            await until_released(entry, engine.take_kv_blocks(entry))
        await admit(engine, entry, "prefilling")
        await engine.stall(entry, "stall_before_first_token")
        await until_released(
            entry, asyncio.sleep(info.prompt_tokens * engine.config.prefill_ms_per_token / 1000.0)
        )
        if error is not None:
            await until_released(entry, fail_late(error))
        words = token_words(engine.config.seed, info.room or 0, min(1, info.max_tokens))
        await reply.emit(words)
        engine.add_tokens(entry, len(words))
        engine.move(entry, "inflight", "kv_ready")
        room.kv_ready.set()
        # The request is done for the scheduler (its running slot is free); its KV is not.
        entry.detached = True
        engine.free_slot(entry)
        task = asyncio.get_running_loop().create_task(_hold_kv(engine, room, entry))
        _HELD.add(task)
        task.add_done_callback(_HELD.discard)
        answer = reply.final_json() | {"kv_transfer_params": kv_handle(engine, info)}
        return web.json_response(answer)

    try:
        return await run_request(request, engine, info, "queued", body, eager_head=False)
    finally:
        if not room.kv_ready.is_set():
            room.closed.set()
            engine.drop_room(room)


async def health(request: web.Request) -> web.Response:
    # vLLM's /health: 200 with an empty body while the engine lives.
    return web.Response(status=200)


async def version(request: web.Request) -> web.Response:
    return web.json_response({"version": request.app[ENGINE].config.version})


async def models(request: web.Request) -> web.Response:
    cfg = request.app[ENGINE].config
    model = {
        "id": cfg.model,
        "object": "model",
        "created": 0,
        "owned_by": "vllm",
        "root": cfg.model,
        "parent": None,
        "max_model_len": cfg.context_length,
    }
    return web.json_response({"object": "list", "data": [model]})


def add_routes(app: web.Application) -> None:
    """The identity endpoints a vLLM OpenAI server has (no SGLang /server_info)."""
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
