"""Decode admission as SGLang builds it (``disaggregation/decode.py``): preallocation slots, the
transfer queue, the waiting queue, the running batch (states ``prealloc``, ``transfer``,
``queued``, ``running``, each under SGLang's metric name). Slots are counted apart from the
batch, as in ``DecodeReqToTokenPool``, and taken before the prefill is contacted.

``--prealloc-hold request`` keeps a slot through generation: a decode whose KV memory is full
(sglang issue #9726, TokenSpeed in smg pull request #2463), so the prefill sees the request
unbootstrapped while the queue drains (sglang issue #11809).

A failed, reset or stalled transfer gives its slot back per ``--slot-on-transfer-failure``:
``released`` at once (``pop_transferred`` on ``KVPoll.Failed``), ``released_after_timeout``
(Mooncake's ``_check_waiting_timeout``, 300 s by default), or ``leaked`` (sglang pull request
#31800; vLLM issues #35943 and #46283).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .config import PREALLOC_HOLDS, SLOT_POLICIES
from .sched import SlotPool
from .worker_ledger import Entry

log = logging.getLogger("pytest_wedge.stubs")

RELEASED, RELEASED_AFTER_TIMEOUT, LEAKED = SLOT_POLICIES
WAITING_TIMEOUT_S = 300.0  # SGLANG_DISAGGREGATION_WAITING_TIMEOUT's default


@dataclass
class Orphan:
    """A slot whose request has ended while the engine still counts it as transferring."""

    request_id: str
    room: int | None
    since: float  # the transfer's start (epoch seconds)
    release_at: float | None  # None: leaked

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "room": self.room,
            "since": self.since,
            "release_at": self.release_at,
        }


class Prealloc:
    """The decode's preallocation slots: FIFO, with a policy for slots of failed transfers."""

    def __init__(self, capacity: int, policy: str, hold: str = "transfer") -> None:
        if policy not in SLOT_POLICIES:
            raise ValueError(f"slot policy must be one of {', '.join(SLOT_POLICIES)}")
        self.slots = SlotPool(capacity)
        self.policy = policy
        self.hold = hold
        self.orphans: list[Orphan] = []
        self._holding: set[Entry] = set()

    async def take(self, entry: Entry) -> None:
        """Wait (FIFO) for a slot. A cancelled wait takes none (SlotPool hands it back)."""
        await self.slots.acquire()
        self._holding.add(entry)

    def holds(self, entry: Entry) -> bool:
        return entry in self._holding

    def arrived(self, entry: Entry) -> None:
        """The KV arrived: the request leaves the transfer queue, and gives its slot back
        unless the slot is held for the whole request (``hold == "request"``)."""
        if self.hold == "transfer":
            self.done(entry)

    def done(self, entry: Entry) -> None:
        """Give the slot of ``entry`` back (idempotent: a request that holds none is ignored)."""
        if entry in self._holding:
            self._holding.discard(entry)
            self.slots.release()

    def failed(self, entry: Entry, now: float, timeout_s: float | None, *, force: bool) -> str:
        """The transfer of ``entry`` failed, was reset or stalled: apply the policy to its slot
        (``force``: release at once whatever the policy, as a reset or a shutdown does).
        Returns what became of the slot: ``none``, ``released``, ``held`` or ``leaked``."""
        if entry not in self._holding:
            return "none"
        self._holding.discard(entry)
        since = entry.t.get("transfer_start", now)
        if force or self.policy == RELEASED:
            self.slots.release()
            return "released"
        if self.policy == RELEASED_AFTER_TIMEOUT:
            release_at = since + (timeout_s or WAITING_TIMEOUT_S)
            if release_at <= now:
                self.slots.release()
                return "released"
            self.orphans.append(Orphan(entry.request_id, entry.room, since, release_at))
            return "held"
        self.orphans.append(Orphan(entry.request_id, entry.room, since, None))
        log.warning("preallocation slot of %s room=%s leaked", entry.request_id, entry.room)
        return "leaked"

    def tick(self, now: float) -> None:
        """Release the held slots whose timeout has passed (the engine's 50 ms tick)."""
        due = [o for o in self.orphans if o.release_at is not None and o.release_at <= now]
        for orphan in due:
            self.orphans.remove(orphan)
            self.slots.release()

    def configure(
        self, capacity: int | None = None, policy: str | None = None, hold: str | None = None
    ) -> None:
        if policy is not None:
            if policy not in SLOT_POLICIES:
                raise ValueError(f"slot policy must be one of {', '.join(SLOT_POLICIES)}")
            self.policy = policy
        if hold is not None:
            if hold not in PREALLOC_HOLDS:
                raise ValueError(f"slot hold must be one of {', '.join(PREALLOC_HOLDS)}")
            self.hold = hold
        if capacity is not None:
            self.slots.set_capacity(capacity)

    def reset(self, capacity: int, policy: str, hold: str = "transfer") -> None:
        """Give every orphaned slot back (a restarted engine starts with a clean pool)."""
        for _ in self.orphans:
            self.slots.release()
        self.orphans.clear()
        self.configure(capacity, policy, hold)

    @property
    def orphaned(self) -> int:
        """Slots counted in the transfer queue although their request has ended."""
        return len(self.orphans)

    def snapshot(self) -> dict[str, Any]:
        return {
            "capacity": self.slots.capacity,
            "used": self.slots.used,
            "waiting": self.slots.waiting,
            "policy": self.policy,
            "hold": self.hold,
            "orphaned": self.orphaned,
            "leaked": sum(1 for o in self.orphans if o.release_at is None),
            "orphans": [o.to_json() for o in self.orphans[:50]],
        }
