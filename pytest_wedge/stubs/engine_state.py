"""Engine state shared by both roles: ledger, slots, preallocation, faults, counters, watchdogs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .admission import Prealloc
from .config import StubConfig
from .engine_faults import StubFault, StubFaultSet
from .rooms import EndedRooms, Room
from .sched import SlotPool, ThroughputWindow, stall
from .textgen import RequestInfo
from .worker_ledger import Entry, Ledger

log = logging.getLogger("pytest_wedge.stubs")

# Release reasons, mapped by the request flows onto final states.
RESET = "reset"
WATCHDOG_PIN = "inflight pin watchdog"
TRANSFER_TIMEOUT = "transfer timeout"
BOOTSTRAP_TIMEOUT = "bootstrap timeout: no decode came for the KV"
SHUTDOWN = "shutdown"
WATCHDOG_TICK_S = 0.05


@dataclass
class Counters:
    requests: int = 0
    prompt_tokens: int = 0
    aborted: int = 0
    bootstrap_failed: int = 0
    transfer_failed: int = 0


class Engine:
    def __init__(self, config: StubConfig) -> None:
        self.config = config
        self.ledger = Ledger(config.ledger_size)
        self.slots = SlotPool(config.max_running)
        self.prealloc = Prealloc(
            config.prealloc_capacity, config.slot_on_transfer_failure, config.prealloc_hold
        )
        self._faults_changed = asyncio.Event()
        self.faults = StubFaultSet(config.seed, on_change=self._on_faults_changed)
        self.fault_events: deque[dict[str, Any]] = deque(maxlen=200)
        self.counters = Counters()
        self.throughput = ThroughputWindow()
        self.inflight_pin_s = config.inflight_pin_watchdog_s
        self.transfer_timeout_s = config.transfer_timeout_s
        # The prefill's bootstrap deadline runs from the request's arrival (SGLang's KVSender
        # init_time); its no-progress variant (smg pull request #2463) from the later of that
        # and the last time any decode came for a room.
        self.bootstrap_timeout_s: float | None = config.bootstrap_timeout_s or None
        self.bootstrap_no_progress_s = config.bootstrap_no_progress_s
        self.last_decode_progress = 0.0
        self.firings: deque[dict[str, Any]] = deque(maxlen=1000)
        # Set on SIGTERM with --sigterm-drain-s: requests in flight go on, new ones get 503.
        self.draining = False
        self.rooms: dict[int, Room] = {}
        self.ended_rooms = EndedRooms()
        self.peers: dict[str, str] = {}  # decode --name -> instance it first exchanged KV with
        # Decode: each prefill's parallel info by bootstrap address, True once fetched, else
        # the failed attempts; and the scheduler loop, frozen by a call made on it.
        self.prefill_info: dict[str, bool | int] = {}
        self.scheduler_free = asyncio.Event()
        self.scheduler_free.set()
        self.scheduler_turn = asyncio.Lock()
        self._holding: set[Entry] = set()
        # Prefill KV blocks (--kv-slots): a request's are held until a decode took its KV, or
        # until it expired (VLLM_NIXL_ABORT_REQUEST_TIMEOUT, the bootstrap deadline here).
        self.kv_blocks = SlotPool(config.kv_slots) if config.kv_slots else None
        self._holding_kv: set[Entry] = set()
        self._pins: set[asyncio.Task[None]] = set()
        self._watchdog_task: asyncio.Task[None] | None = None

    # -- request lifecycle -------------------------------------------------------------
    def open(self, info: RequestInfo, state: str) -> Entry:
        entry = Entry(
            request_id=info.request_id,
            origin=info.origin,
            room=info.room,
            path=info.path,
            stream=info.stream,
            prompt_tokens=info.prompt_tokens,
            max_tokens=info.max_tokens,
        )
        self.counters.requests += 1
        self.counters.prompt_tokens += info.prompt_tokens
        self.ledger.open(entry, state)
        if state == "queued":
            entry.mark("queued")
        return entry

    def move(self, entry: Entry, state: str, stamp: str | None = None) -> None:
        self.ledger.move(entry, state, stamp)

    def finish(self, entry: Entry, state: str, error: str | None = None) -> None:
        if not entry.final:
            entry.error = error
            if state == "aborted":
                self.counters.aborted += 1
            self.ledger.move(entry, state)
            log.info(
                "%s %s origin=%s room=%s state=%s tokens=%d%s",
                self.config.component,
                entry.request_id,
                entry.origin,
                entry.room,
                state,
                entry.tokens,
                f" error={error}" if error else "",
            )
        self.free_slot(entry)

    async def take_kv_blocks(self, entry: Entry) -> None:
        """Wait (FIFO) for KV blocks on a prefill with ``--kv-slots``."""
        if self.kv_blocks is not None:
            await self.kv_blocks.acquire()
            self._holding_kv.add(entry)

    async def take_slot(self, entry: Entry) -> None:
        await self.slots.acquire()
        self._holding.add(entry)

    def mark_holding(self, entry: Entry) -> None:
        self._holding.add(entry)

    def free_slot(self, entry: Entry) -> None:
        if entry in self._holding:
            self._holding.discard(entry)
            self.slots.release()
        if entry.final and entry in self._holding_kv and self.kv_blocks is not None:
            self._holding_kv.discard(entry)
            self.kv_blocks.release()

    def add_tokens(self, entry: Entry, n: int) -> None:
        self.ledger.add_tokens(entry, n)
        self.throughput.add(n)

    def pin(self, entry: Entry) -> None:
        """Keep a request in flight after its handler died, until a release frees it."""
        entry.detached = True
        self.move(entry, "inflight", "kv_ready")

        async def held() -> None:
            await entry.release.wait()
            reason = entry.release_reason
            self.finish(entry, "released" if reason == WATCHDOG_PIN else "aborted", reason)

        task = asyncio.get_running_loop().create_task(held())
        self._pins.add(task)
        task.add_done_callback(self._pins.discard)

    def leak(self, entry: Entry) -> None:
        """Answered, yet never given back: the request keeps its running slot and its place in
        ``num_running_reqs`` (a slot leak, planted for the soak's self-test) until a reset or
        a shutdown releases it."""
        entry.detached = True

        async def held() -> None:
            await entry.release.wait()
            self.finish(entry, "ok", f"leaked slot freed by {entry.release_reason}")
            self.free_slot(entry)

        task = asyncio.get_running_loop().create_task(held())
        self._pins.add(task)
        task.add_done_callback(self._pins.discard)

    def release(self, entry: Entry, reason: str) -> None:
        if not entry.release.is_set():
            entry.release_reason = reason
            entry.release.set()

    # -- faults --------------------------------------------------------------------------
    def apply_capacity(self) -> None:
        serialized = self.config.role == "decode" and self.faults.has_kind("serialize")
        self.slots.set_capacity(1 if serialized else self.config.max_running)

    def _on_faults_changed(self) -> None:
        self.apply_capacity()
        self.prefill_info.clear()  # blocking_bootstrap_call: the heartbeat evicted them
        changed, self._faults_changed = self._faults_changed, asyncio.Event()
        changed.set()  # wakes every stalled request to re-check its stall

    async def until_loop_runs(self) -> None:
        """Wait while a ``freeze_engine_loop`` holds the engine loop (for work with no request
        of its own, such as ``/health_generate``'s one token)."""
        while self.faults.find("freeze_engine_loop", "health_generate") is not None:
            await self._faults_changed.wait()

    def add_fault(self, fault: StubFault) -> None:
        self.faults.add(fault)
        self.fault_events.append({"event": "added", "at": time.time(), **fault.to_json()})

    def remove_fault(self, name: str) -> bool:
        """Remove a fault; the stamp ``at`` is the stub's own clock of the revert."""
        removed = self.faults.remove(name)
        if removed:
            self.fault_events.append({"event": "removed", "at": time.time(), "name": name})
        return removed

    async def stall(self, entry: Entry, kind: str) -> None:
        """Hold ``entry`` while a ``kind`` fault, or a ``freeze_engine_loop``, matches its
        origin; a revert resumes it.

        SGLang's decode loop (``event_loop_normal_disagg_decode``) skips its step while the
        engine is paused and runs the batch again once ``Scheduler.continue_generation``
        clears ``_engine_paused``; a paused ``in_place`` batch keeps its requests. Each step of
        a request passes here (the start of a decode's KV transfer, admission, prefill, a
        prefill's KV hand-over, each token): a frozen engine loop holds every request at its
        next step, as vLLM's EngineCore under SIGSTOP does while its API server answers."""
        faults = self.faults
        await stall(
            entry,
            lambda: (
                faults.find(kind, entry.origin) is not None
                or faults.find("freeze_engine_loop", entry.origin) is not None
            ),
            lambda: self._faults_changed,
        )

    # -- rooms (prefill) --------------------------------------------------------------------
    def room(self, room_id: int) -> Room:
        room = self.rooms.get(room_id)
        if room is None:
            room = self.rooms[room_id] = Room(room_id)
        return room

    def drop_room(self, room: Room) -> None:
        if room.fetchers == 0 and (room.entry is None or room.entry.final):
            self.rooms.pop(room.room, None)
            self.ended_rooms.note(room)

    # -- watchdogs ---------------------------------------------------------------------------
    def start(self) -> None:
        self._watchdog_task = asyncio.get_running_loop().create_task(self._watchdog_loop())

    async def stop(self) -> None:
        if self._watchdog_task is not None:
            self._watchdog_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog_task
        for entry in list(self.ledger.active):
            self.release(entry, SHUTDOWN)
        for room in self.rooms.values():
            room.closed.set()

    def set_watchdogs(self, **seconds: float | None) -> None:
        """Set engine watchdogs by name (``inflight_pin_s``, ``transfer_timeout_s``,
        ``bootstrap_timeout_s``, ``bootstrap_no_progress_s``); None turns one off, except the
        bootstrap deadline, which goes back to ``--bootstrap-timeout-s``: an engine has one."""
        for name, value in seconds.items():
            if name == "bootstrap_timeout_s" and value is None:
                value = self.config.bootstrap_timeout_s or None
            setattr(self, name, value)

    def _fire(self, watchdog: str, entry: Entry, reason: str) -> None:
        self.firings.append(
            {
                "watchdog": watchdog,
                "at": time.time(),
                "request_id": entry.request_id,
                "room": entry.room,
            }
        )
        log.warning(
            "%s watchdog %s fired for %s room=%s",
            self.config.component,
            watchdog,
            entry.request_id,
            entry.room,
        )
        self.release(entry, reason)

    def check_watchdogs(self, now: float) -> None:
        pin, transfer = self.inflight_pin_s, self.transfer_timeout_s
        boot, idle = self.bootstrap_timeout_s, self.bootstrap_no_progress_s
        for entry in list(self.ledger.active):
            # The engine checks its deadlines on its own loop: a frozen one checks none.
            if entry.release.is_set() or self.faults.find("freeze_engine_loop", entry.origin):
                continue
            arrived, state = entry.t["arrived"], entry.state
            if pin is not None and state == "inflight" and now - entry.t["kv_ready"] > pin:
                self._fire("inflight_pin", entry, WATCHDOG_PIN)
            elif (
                transfer is not None
                and state in ("prealloc", "transfer")
                and (now - entry.t.get("transfer_start", arrived) > transfer)
                and not self._transferring_unwatched(entry)
            ):
                self._fire("transfer_timeout", entry, TRANSFER_TIMEOUT)
            elif not self._unbootstrapped(entry):
                continue
            elif idle is not None and now - max(arrived, self.last_decode_progress) > idle:
                self._fire("bootstrap_no_progress", entry, BOOTSTRAP_TIMEOUT)
            elif boot is not None and now - self._kv_deadline_start(entry) > boot:
                self._fire("bootstrap_timeout", entry, BOOTSTRAP_TIMEOUT)

    def _transferring_unwatched(self, entry: Entry) -> bool:
        """The KV has started to arrive (KVPoll.Transferring) and the engine checks its timeout
        only while waiting for input (timeout_skips_transferring)."""
        started = "kv_first_byte" in entry.t
        return started and self.faults.find("timeout_skips_transferring", entry.origin) is not None

    def _kv_deadline_start(self, entry: Entry) -> float:
        """SGLang's bootstrap deadline runs from arrival (the KVSender's init_time); vLLM's
        VLLM_NIXL_ABORT_REQUEST_TIMEOUT from when the KV is ready, held for a remote decode."""
        if self.config.protocol == "vllm":
            return entry.t.get("kv_ready", math.inf)
        return entry.t["arrived"]

    def _unbootstrapped(self, entry: Entry) -> bool:
        """A prefill request whose decode has not come for its room yet (KVPoll.Bootstrapping)."""
        if self.config.role != "prefill" or entry.room is None:
            return False
        room = self.rooms.get(entry.room)
        return room is not None and not room.fetch_seen

    async def _watchdog_loop(self) -> None:
        while True:
            await asyncio.sleep(WATCHDOG_TICK_S)
            try:
                now = time.time()
                self.check_watchdogs(now)
                self.prealloc.tick(now)
                self._purge_rooms()
            except Exception:  # a broken tick must not silently end the watchdog
                log.exception("watchdog tick failed")

    def _purge_rooms(self) -> None:
        # Rooms opened only by a fetch whose prefill request never came would otherwise leak.
        cutoff = time.monotonic() - 60.0
        for room in [r for r in self.rooms.values() if r.entry is None and r.created < cutoff]:
            room.closed.set()
            if room.fetchers == 0:
                self.rooms.pop(room.room, None)

    # -- reset ---------------------------------------------------------------------------------
    async def reset(self) -> None:
        self.faults.clear()
        self.apply_capacity()
        cfg = self.config
        self.set_watchdogs(
            inflight_pin_s=cfg.inflight_pin_watchdog_s,
            transfer_timeout_s=cfg.transfer_timeout_s,
            bootstrap_timeout_s=None,
            bootstrap_no_progress_s=cfg.bootstrap_no_progress_s,
        )
        self.peers.clear()
        self.scheduler_free.set()
        for entry in list(self.ledger.active):
            self.release(entry, RESET)
        for room in self.rooms.values():
            room.closed.set()
        deadline = time.monotonic() + 1.0
        while self.ledger.active and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.rooms = {k: r for k, r in self.rooms.items() if r.fetchers}
        self.prealloc.reset(cfg.prealloc_capacity, cfg.slot_on_transfer_failure, cfg.prealloc_hold)
        self.last_decode_progress = 0.0
        self.fault_events.clear()
        self.ledger.clear()
        self.counters = Counters()
        self.firings.clear()
        self.throughput = ThroughputWindow()

    # -- views -----------------------------------------------------------------------------------
    def used_tokens(self) -> int:
        return sum(
            e.prompt_tokens + e.tokens
            for e in self.ledger.active
            if e.state in ("running", "prefilling", "inflight")
        )

    def kv_usage(self) -> float:
        """The KV cache's used fraction: tokens held, or a prefill's --kv-slots blocks."""
        used = min(1.0, self.used_tokens() / self.config.max_total_tokens)
        if self.kv_blocks is not None:
            used = max(used, min(1.0, self.kv_blocks.used / self.kv_blocks.capacity))
        return used

    def prefill_prealloc(self) -> int:
        """Prefill requests whose decode has not come for the KV yet (SGLang's bootstrap queue)."""
        return sum(1 for e in self.ledger.active if self._unbootstrapped(e))

    def snapshot(self) -> dict[str, Any]:
        led = self.ledger
        return {
            "at": time.time(),  # when it was taken, by this stub's clock
            "component": self.config.component,
            "role": self.config.role,
            "instance": self.config.instance_id,
            "model": self.config.model,
            "states": {k: v for k, v in led.state_counts.items() if v},
            "active": len(led.active),
            "running": led.count("running") + led.count("prefilling"),
            "queued": led.count("queued"),
            "inflight": led.count("inflight"),
            "prealloc": led.count("prealloc"),
            "transfer": led.count("transfer"),
            "slots": {
                "capacity": self.slots.capacity,
                "used": self.slots.used,
                "waiting": self.slots.waiting,
            },
            "prealloc_slots": self.prealloc.snapshot(),
            "tokens_total": led.tokens_total,
            "tokens_by_origin": dict(led.tokens_by_origin),
            "gen_throughput": self.throughput.rate(),
            "counters": vars(self.counters).copy(),
            "faults": self.faults.to_json(),
            "fault_events": list(self.fault_events),
            "watchdogs": {
                "inflight_pin_s": self.inflight_pin_s,
                "transfer_timeout_s": self.transfer_timeout_s,
                "bootstrap_timeout_s": self.bootstrap_timeout_s,
                "bootstrap_no_progress_s": self.bootstrap_no_progress_s,
            },
            "firings": list(self.firings),
            "transfer_peers": dict(self.peers),
        }


ENGINE: web.AppKey[Engine] = web.AppKey("engine", Engine)
