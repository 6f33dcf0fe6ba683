"""The prefill side of one bootstrap room: the KV, and the decodes that came to fetch it."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from .worker_ledger import Entry


@dataclass(eq=False)
class Room:
    """Prefill side of one bootstrap room: the KV and who came to fetch it."""

    room: int
    created: float = field(default_factory=time.monotonic)
    entry: Entry | None = None
    kv_ready: asyncio.Event = field(default_factory=asyncio.Event)
    fetched: asyncio.Event = field(default_factory=asyncio.Event)
    aborted: asyncio.Event = field(default_factory=asyncio.Event)
    # Set when the room is torn down (reset, shutdown, prefill failure) to free waiting fetches.
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    fetchers: int = 0
    fetch_seen: bool = False
    stale_fetch_from: str | None = None


class EndedRooms:
    """The rooms whose prefill request already ended (the newest ``kept``). A KV fetch that
    comes after its KV was released must fail at once, not open a fresh room and wait for KV
    that never comes (a decode slow to fetch behind a pin watchdog's release)."""

    def __init__(self, kept: int = 4096) -> None:
        self.kept = kept
        self._rooms: OrderedDict[int, None] = OrderedDict()

    def note(self, room: Room) -> None:
        """``room`` was dropped: ended, if a prefill request had it (an early fetch's room
        may still get its request)."""
        if room.entry is None:
            return
        self._rooms[room.room] = None
        while len(self._rooms) > self.kept:
            self._rooms.popitem(last=False)

    def __contains__(self, room: object) -> bool:
        return room in self._rooms
