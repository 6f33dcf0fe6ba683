"""Decode admission as SGLang builds it: preallocation slots, the transfer queue, the batch.

SGLang's decode scheduler (``python/sglang/srt/disaggregation/decode.py``, module docstring)
moves a request through four places, and the stub keeps the same ones, each under SGLang's
metric name:

1. ``DecodePreallocQueue``: the request has arrived and waits for a preallocation slot (KV
   rows reserved for the prefill to write into). State ``prealloc``,
   ``sglang:num_decode_prealloc_queue_reqs``. FIFO: ``pop_preallocated`` stops at the first
   request that does not fit.
2. ``DecodeTransferQueue``: the slot is taken and the request polls for its KV. State
   ``transfer``, ``sglang:num_decode_transfer_queue_reqs``.
3. The waiting queue: the KV arrived, the slot is handed back, and the request waits for room
   in the running batch. State ``queued``, ``sglang:num_queue_reqs``.
4. The running batch, bounded by ``--max-running`` (``max_running_requests``). State
   ``running``, ``sglang:num_running_reqs``.

The slots have their own accounting, as in SGLang's ``DecodeReqToTokenPool``: "#running <= 8,
#pre-allocated + #transfer <= pre_alloc_size", so preallocation never takes a running slot.

The stub preallocates *before* it contacts the prefill (SGLang handshakes first, then
preallocates; the stub's one KV fetch is both), so a refused connection also ends a transfer
that holds a slot.

**How long a slot is held** (``--prealloc-hold``): ``transfer`` (default) gives it back once the
KV has arrived, as above; ``request`` keeps it until the request ends, so the running batch and
the waiting queue hold slots too and a request that finds none waits in ``prealloc`` without
contacting the prefill. That is a decode whose KV memory is full: SGLang's preallocation waits
for allocatable KV tokens that running requests hold ("the decode server is still waiting for
more memory to free up to allocate kv cache before it can bootstrap", sglang issue #9726), and
TokenSpeed's pre-allocated room "holds one of the max_num_seqs req-pool slots through the
transfer and the whole generation" (smg pull request #2463). The prefill then sees the
request unbootstrapped for as long as the decode's queue takes to drain (sglang issue #11809).

**A transfer that fails, is reset or stalls** gives its slot back in one of three ways
(``--slot-on-transfer-failure``, or ``POST /control/admission``). The request itself ends as it
always did (an error, or aborted when its client went away); the policy only decides when its
slot comes back, and until then the slot still counts in the transfer queue:

- ``released``: at once. SGLang's ``DecodeTransferQueue.pop_transferred`` on ``KVPoll.Failed``
  calls ``release_kv_cache(..., is_insert=False)`` and frees the metadata buffer index in the
  same scheduler step.
- ``released_after_timeout``: when the engine's transfer timeout has passed since the transfer
  started (``--transfer-timeout-s``; when that watchdog is off, 300 s, the default of
  ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``). SGLang's Mooncake receiver
  (``disaggregation/mooncake/conn.py``, ``_check_waiting_timeout``) learns of a transfer that
  will never complete only when that timeout marks it ``KVPoll.Failed``; vLLM's Mooncake
  connector frees the prefill's blocks after ``VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT``.
- ``leaked``: never (until ``/control/reset``). The field bug: sglang pull request #31800
  ("time out KV receivers stuck in Transferring": the slot is never released, ``#transfer-req``
  freezes, and once the pool is exhausted the decode admits nothing); vLLM issues #35943
  (decode requests stuck in ``WAITING_FOR_REMOTE_KVS`` forever after a failed transfer, "HBM
  leak") and #46283 (the blocks of an aborted remote-KV load are never reclaimed).
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
