"""The prefill side of one bootstrap room: the KV, and the decodes that came to fetch it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from .ledger import Entry


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
