"""What both roles share around a request: the outcome of a release, ending a response."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from .engine_faults import StubFault
from .engine_state import BOOTSTRAP_TIMEOUT, RESET, SHUTDOWN, TRANSFER_TIMEOUT, WATCHDOG_PIN, Engine
from .sched import Released, until_released
from .textgen import RequestInfo
from .wire import Reply
from .worker_ledger import Entry

Body = Callable[[Reply, Entry], Awaitable[web.StreamResponse]]


def outcome(reason: str) -> tuple[str, int]:
    """Final ledger state and HTTP status for a request ended by a release."""
    if reason == WATCHDOG_PIN:
        return "released", 503
    if reason == TRANSFER_TIMEOUT:
        return "error", 500
    if reason in (RESET, SHUTDOWN):
        return "aborted", 503
    return "error", 500


class Failed(Exception):
    """The request ends in state error with this status and message."""

    def __init__(
        self, status: int, message: str, state: str = "error", detail: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.state = state
        self.detail = detail or message  # what the ledger says


async def run_request(
    request: web.Request,
    engine: Engine,
    info: RequestInfo,
    first_state: str,
    body: Body,
    *,
    eager_head: bool,
) -> web.StreamResponse:
    """Open the ledger entry, run the role's body, and map every way out onto a final state."""
    reply = Reply(info, engine.config.model, request)
    entry = engine.open(info, first_state)
    try:
        if info.stream and eager_head:
            await reply.start()
        return await body(reply, entry)
    except Released as rel:
        state, status = outcome(rel.reason)
        if rel.reason == TRANSFER_TIMEOUT:
            engine.counters.transfer_failed += 1
        elif rel.reason == BOOTSTRAP_TIMEOUT:
            engine.counters.bootstrap_failed += 1
        engine.finish(entry, state, rel.reason)
        return await _end(request, reply, status, rel.reason)
    except Failed as exc:
        engine.finish(entry, exc.state, exc.detail)
        return await _end(request, reply, exc.status, exc.message)
    except asyncio.CancelledError:
        if not entry.detached:
            engine.finish(entry, "aborted", "client disconnected")
        raise
    except ConnectionResetError:
        engine.finish(entry, "aborted", "client disconnected")
        return reply.resp or web.Response(status=499)
    finally:
        if not entry.detached:
            if not entry.final:
                engine.finish(entry, "error", "stub internal error")
            engine.free_slot(entry)


async def _end(request: web.Request, reply: Reply, status: int, message: str) -> web.StreamResponse:
    try:
        return await reply.fail(status, message)
    except ConnectionResetError:
        return reply.resp or web.Response(status=499)


async def fail_late(fault: StubFault) -> None:
    """An ``error_status`` fault with ``after_kv_taken``: the worker did the work up to the KV
    hand-over, and now answers with the error (after ``delay_ms``)."""
    if fault.delay_ms:
        await asyncio.sleep(fault.delay_ms / 1000.0)
    raise Failed(
        fault.status,
        fault.message,
        detail=f"error_status fault {fault.name}: {fault.status} after the KV hand-over",
    )


async def admit(engine: Engine, entry: Entry, running_state: str) -> None:
    """Wait for a running slot (FIFO), bounded by --max-queue."""
    if not engine.slots.try_acquire():
        if engine.slots.waiting >= engine.config.max_queue:
            raise Failed(503, "queue full")
        await until_released(entry, engine.take_slot(entry))
    else:
        engine.mark_holding(entry)
    await engine.stall(entry, "freeze_engine_loop")  # a frozen engine loop admits nothing
    engine.move(entry, running_state, "running")
