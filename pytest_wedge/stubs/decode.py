"""Decode role: take a preallocation slot, fetch the KV for the room from the prefill's
bootstrap server, queue for the running batch, then stream (stubs/admission.py)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

from .engine_faults import StubFault
from .engine_state import RESET, SHUTDOWN, Engine
from .flow import Failed, admit, fail_late, run_request
from .sched import Released, until_released
from .textgen import RequestInfo, token_words
from .wire import Reply
from .worker_ledger import Entry


class KvClient:
    """One pooled aiohttp session for all KV fetches of this decode."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # No total timeout: the fetch is a long-poll bounded by the transfer-timeout watchdog.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def target(self, info: RequestInfo) -> str:
        if info.bootstrap_addr is None:
            raise Failed(400, "bootstrap_room given without bootstrap_host/bootstrap_port")
        return self.engine.config.bootstrap_routes.get(info.bootstrap_addr, info.bootstrap_addr)

    async def fetch(self, info: RequestInfo, entry: Entry) -> None:
        cfg = self.engine.config
        url = f"http://{self.target(info)}/kv/{info.room}"
        params = {
            "decode_name": cfg.component,
            "decode_instance": cfg.instance_id,
            "request_id": info.request_id,
            "origin": info.origin,
        }
        # POST, not GET: aiohttp silently retries idempotent methods on a dropped connection,
        # and a second fetch for the same room would hide the abort the prefill must see.
        try:
            async with self.session().post(url, params=params) as resp:
                entry.mark("kv_first_byte")  # KVPoll.Transferring: the KV has started to come
                await resp.read()
                status = resp.status
        except (aiohttp.ClientConnectorError, ConnectionRefusedError) as exc:
            self.engine.counters.bootstrap_failed += 1
            raise Failed(502, f"bootstrap failed: {exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            self.engine.counters.transfer_failed += 1
            raise Failed(502, f"transfer failed: {exc}") from exc
        if status != 200:
            self.engine.counters.bootstrap_failed += 1
            raise Failed(502, f"bootstrap failed: prefill answered {status}")

    async def prefill_info(self, info: RequestInfo, entry: Entry) -> None:
        """With ``blocking_bootstrap_call``: fetch the prefill's parallel info on the scheduler
        loop, as SGLang's ``try_ensure_parallel_info`` did before pull request #34865. One call
        at a time (one scheduler thread); while it runs no stream on this decode steps."""
        engine, addr = self.engine, self.target(info)
        while (fault := engine.faults.find("blocking_bootstrap_call", info.origin)) is not None:
            known = engine.prefill_info.get(addr, 0)
            if known is True:
                return
            if known >= fault.retries:
                engine.counters.bootstrap_failed += 1
                raise Failed(502, f"bootstrap failed: no parallel info from {addr}")
            async with engine.scheduler_turn:
                if engine.prefill_info.get(addr, 0) != known:
                    continue  # another request's call settled it meanwhile
                engine.scheduler_free.clear()
                try:
                    timeout = aiohttp.ClientTimeout(total=fault.timeout_ms / 1000.0)
                    async with self.session().get(f"http://{addr}/route", timeout=timeout) as r:
                        await r.read()
                    engine.prefill_info[addr] = r.status == 200 or known + 1
                except (TimeoutError, aiohttp.ClientError, OSError):
                    engine.prefill_info[addr] = known + 1
                finally:
                    engine.scheduler_free.set()


async def transfer(engine: Engine, kv: KvClient, info: RequestInfo, entry: Entry) -> None:
    """Take a preallocation slot (FIFO), fetch the KV, and give the slot back: at once when the
    KV arrived, else as the slot policy says (a reset or a shutdown always frees it)."""
    kv.target(info)  # a request without a bootstrap address never takes a slot
    # A decode that never leaves bootstrapping holds it here, before the prefill hears of it.
    await engine.stall(entry, "stall_bootstrap")
    if engine.faults.has_kind("blocking_bootstrap_call"):
        await until_released(entry, kv.prefill_info(info, entry))
    await until_released(entry, engine.prealloc.take(entry))
    engine.move(entry, "transfer", "transfer_start")
    try:
        await until_released(entry, kv.fetch(info, entry))
    except BaseException as exc:
        # Failed (refused, reset, answered non-200), Released (transfer timeout, reset) or
        # CancelledError (the client went away: the abort reaches the transfer).
        forced = isinstance(exc, Released) and exc.reason in (RESET, SHUTDOWN)
        now = time.time()
        engine.prealloc.failed(entry, now, engine.transfer_timeout_s, force=forced)
        raise
    engine.prealloc.arrived(entry)


async def handle(
    request: web.Request, engine: Engine, kv: KvClient, info: RequestInfo, error: StubFault | None
) -> web.StreamResponse:
    """``error``: an ``error_status`` fault with ``after_kv_taken`` that fired for this request:
    it fails once the KV has arrived."""

    async def body(reply: Reply, entry: Entry) -> web.StreamResponse:
        try:
            return await _decode(reply, entry)
        finally:
            engine.prealloc.done(entry)  # a slot held for the whole request comes back now

    async def _decode(reply: Reply, entry: Entry) -> web.StreamResponse:
        if info.room is not None:
            await transfer(engine, kv, info, entry)
            engine.move(entry, "queued", "kv_received")
            entry.mark("queued")
        if error is not None:
            await fail_late(error)
        await admit(engine, entry, "running")
        faults = engine.faults
        await engine.stall(entry, "stall_before_first_token")
        stall = faults.find("stall_after_tokens", info.origin)
        stall_at = stall.tokens if stall is not None else -1
        slow = faults.find("slow_tokens", info.origin)
        itl = (slow.itl_ms if slow is not None else engine.config.itl_ms) / 1000.0
        key: int | str = info.room if info.room is not None else info.request_id
        words = token_words(engine.config.seed, key, info.max_tokens)
        for i, word in enumerate(words):
            if i:
                # sleep(0) still yields, so one fast stream cannot starve the others.
                await asyncio.sleep(itl)
            if not engine.scheduler_free.is_set():  # a call on the scheduler loop holds it
                await until_released(entry, engine.scheduler_free.wait())
            # After the step's sleep: once a stall ends, the next token goes out at once. Each
            # token is a step of the engine loop, which a freeze_engine_loop holds too.
            await engine.stall(
                entry, "stall_after_tokens" if i == stall_at else "freeze_engine_loop"
            )
            await reply.emit([word])
            engine.add_tokens(entry, 1)
            if i == 0:
                entry.mark("first_token")
        if stall_at >= len(words):
            await engine.stall(entry, "stall_after_tokens")
        resp = await reply.finish()
        if engine.faults.fire("leak_slot", info.origin) is not None:
            engine.leak(entry)
        else:
            engine.finish(entry, "ok")
        return resp

    first = "prealloc" if info.room is not None else "queued"
    # The head waits for the first token: while smg still waits for both heads, a client that
    # goes away makes smg close both legs, which is how an abort reaches the KV transfer.
    return await run_request(request, engine, info, first, body, eager_head=False)
