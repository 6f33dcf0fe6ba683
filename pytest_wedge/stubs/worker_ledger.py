"""Per-request ledger entries and the bounded ledger of one stub process."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

FINAL_STATES = ("ok", "error", "aborted", "released")


@dataclass(eq=False)
class Entry:
    request_id: str
    origin: str
    room: int | None
    path: str
    stream: bool
    prompt_tokens: int
    max_tokens: int
    state: str = "queued"
    tokens: int = 0
    error: str | None = None
    t: dict[str, float] = field(default_factory=dict)
    # Set by a watchdog or /control/reset to end whatever wait the request is stuck in.
    release: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    release_reason: str = ""
    # The HTTP handler is gone but the engine still holds the request (pin_on_abort).
    detached: bool = False

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def mark(self, stamp: str) -> None:
        self.t.setdefault(stamp, time.time())

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "origin": self.origin,
            "room": self.room,
            "path": self.path,
            "stream": self.stream,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "tokens": self.tokens,
            "state": self.state,
            "error": self.error,
            "t": dict(self.t),
        }


class Ledger:
    """Bounded history plus the live set; state counts are kept incrementally."""

    def __init__(self, maxlen: int = 20_000) -> None:
        self.entries: deque[Entry] = deque(maxlen=maxlen)
        self.active: set[Entry] = set()
        self.state_counts: Counter[str] = Counter()
        self.tokens_by_origin: Counter[str] = Counter()
        self.tokens_total = 0

    def open(self, entry: Entry, state: str) -> Entry:
        entry.state = state
        entry.mark("arrived")
        self.entries.append(entry)
        self.active.add(entry)
        self.state_counts[state] += 1
        return entry

    def move(self, entry: Entry, state: str, stamp: str | None = None) -> None:
        if entry.final:
            return
        self.state_counts[entry.state] -= 1
        self.state_counts[state] += 1
        entry.state = state
        if stamp:
            entry.mark(stamp)
        if state in FINAL_STATES:
            entry.mark("finished")
            self.active.discard(entry)

    def add_tokens(self, entry: Entry, n: int) -> None:
        entry.tokens += n
        self.tokens_total += n
        self.tokens_by_origin[entry.origin] += n

    def count(self, state: str) -> int:
        return self.state_counts[state]

    def clear(self) -> None:
        """Forget history but keep live requests visible, so counts stay consistent."""
        self.entries = deque(self.active, maxlen=self.entries.maxlen)
        self.state_counts = Counter(e.state for e in self.active)
        self.tokens_by_origin = Counter()
        self.tokens_total = 0

    def to_json(self, origin: str | None = None) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.entries if origin is None or e.origin == origin]
