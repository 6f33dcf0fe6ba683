"""The client ledger: one record per request the load sent, each with one final state (Jepsen).

A request with none when its load stops is *lost*. Its overdue clock starts at ``sent``, not
``created``: time spent in a loaded client says nothing about the servers. An unsent request
is *held by the client* only when it queued for a full pool (incident 6).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Literal, cast, get_args

State = Literal["pending", "ok", "error", "timeout", "aborted", "unknown"]
STATES: tuple[State, ...] = get_args(State)
FINAL_STATES: frozenset[State] = frozenset(STATES) - {"pending"}
FAILED_STATES: frozenset[State] = frozenset({"error", "timeout", "unknown"})
# Where a request is on the overdue clock. The four pending phases, then the final states.
Phase = Literal[
    "not_sent_yet",
    "held_by_client",
    "in_flight",
    "overdue",
    "ok",
    "error",
    "timeout",
    "aborted",
    "unknown",
]
PHASES: tuple[Phase, ...] = get_args(Phase)
ERROR_SNIPPET_CHARS = 200
LEDGER_FORMAT = "pytest-wedge/client-ledger"
LEDGER_VERSION = 1

# One lock for every record: finishing is rare and tiny, and a per-record lock would have to be
# kept out of the record's JSON.
_FINISH_LOCK = threading.Lock()


class FinalStateError(RuntimeError):
    """A request was given a second final state: the accounting itself is broken."""


def snippet(text: object, limit: int = ERROR_SNIPPET_CHARS) -> str:
    """Shorten an error text so a table row and the JSON artifact stay readable."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(slots=True)
class RequestRecord:
    """What the client knows about one request. Timestamps are ``time.time()`` wall clock, so
    they can be joined with the server-side ledgers and logs."""

    request_id: str
    origin: str
    target: str
    path: str = "/v1/chat/completions"
    stream: bool = True
    agent: int | None = None
    round: int | None = None
    attempt: int = 0
    retry_of: str | None = None
    created: float = field(default_factory=time.time)
    # Handed to the network: the head (and body) written on a connected socket. The overdue
    # clock starts here. None means not sent yet: still connecting, waiting for a pooled
    # connection, or waiting for a busy client to get to it.
    sent: float | None = None
    first_byte: float | None = None  # response head arrived: some server answered
    first_token: float | None = None
    last_byte: float | None = None  # last data; keep-alive comments do not count as progress
    last_ping: float | None = None
    finished: float | None = None
    tokens: int = 0
    status: int | None = None
    error: str | None = None
    state: State = "pending"
    # Set when the load was stopped while this request had no final state of its own: the
    # state it then got (unknown/aborted) was given by the stop, not earned by the request.
    cut_by_stop: bool = False
    # The client pool this request asked for a connection, at the moment it asked: its limit
    # (None: unbounded) and how many of its connections requests of the same load had checked
    # out. pool_in_use >= pool_limit: every connection was taken, so it queued in the client.
    pool_limit: int | None = None
    pool_in_use: int | None = None
    # The client left the response unread after its head (a leaked stream): it holds it.
    left_unread: bool = False

    @property
    def final(self) -> bool:
        return self.state != "pending"

    @property
    def not_sent_yet(self) -> bool:
        """Pending and never handed to the network: no server can have seen it."""
        return self.state == "pending" and self.sent is None

    @property
    def pool_exhausted(self) -> bool:
        """It asked for a connection while all of its pool's connections were in use."""
        return (
            self.pool_limit is not None
            and self.pool_in_use is not None
            and self.pool_in_use >= self.pool_limit
        )

    def finish(
        self,
        state: State,
        *,
        error: object | None = None,
        status: int | None = None,
        cut_by_stop: bool = False,
    ) -> None:
        """Give the request its one final state; a second one raises :class:`FinalStateError`."""
        if state not in FINAL_STATES:
            raise ValueError(f"{state!r} is not a final state; use one of {sorted(FINAL_STATES)}")
        with _FINISH_LOCK:
            if self.state != "pending":
                raise FinalStateError(
                    f"request {self.request_id} already ended as {self.state!r}; "
                    f"refusing a second final state {state!r}"
                )
            self._set_final(state, error, status, cut_by_stop)

    def finish_if_pending(self, state: State, *, error: object | None = None) -> bool:
        """Stop-path finish: racing a request that ends on its own is expected there."""
        with _FINISH_LOCK:
            if self.state != "pending":
                return False
            self._set_final(state, error, None, True)
            return True

    def _set_final(
        self, state: State, error: object | None, status: int | None, cut_by_stop: bool
    ) -> None:
        if error is not None:
            self.error = snippet(error)
        if status is not None:
            self.status = status
        self.cut_by_stop = cut_by_stop
        self.finished = time.time()
        self.state = state  # last, so a reader never sees a final state without its facts

    def _end(self, now: float | None) -> float:
        return self.finished if self.finished is not None else (now or time.time())

    def age(self, now: float | None = None) -> float:
        """Seconds on the overdue clock: from ``sent`` to its end (or ``now``); 0.0 while not
        sent, because time spent in the client says nothing about the servers."""
        return 0.0 if self.sent is None else max(0.0, self._end(now) - self.sent)

    def waited(self, now: float | None = None) -> float:
        """Seconds since the client created it, to its end (or ``now``)."""
        return self._end(now) - self.created

    def overdue(self, overdue_after_s: float, now: float | None = None) -> bool:
        """Pending, sent, and in flight for at least ``overdue_after_s``."""
        return (
            self.state == "pending" and self.sent is not None and (self.age(now) >= overdue_after_s)
        )

    def held_by_client(self, overdue_after_s: float, now: float | None = None) -> bool:
        """Not sent yet because its pool was exhausted, for at least ``overdue_after_s``: the
        client itself holds it (incident 6), which no server can show."""
        return self.not_sent_yet and self.pool_exhausted and self.waited(now) >= overdue_after_s

    def phase(self, overdue_after_s: float, now: float | None = None) -> Phase:
        """Where it is: a final state, or not_sent_yet / held_by_client / in_flight / overdue."""
        if self.state != "pending":
            return cast(Phase, self.state)
        if self.sent is None:
            held = self.held_by_client(overdue_after_s, now)
            return "held_by_client" if held else "not_sent_yet"
        return "overdue" if self.overdue(overdue_after_s, now) else "in_flight"

    def to_dict(self) -> dict[str, Any]:
        # Every field is a plain value: a shallow copy, at a tenth of asdict's cost, for a
        # diagnosis that copies a thousand records on a loaded machine.
        return {name: getattr(self, name) for name in _RECORD_FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        record = cls(**{k: v for k, v in data.items() if k in known})
        if record.state not in STATES:
            raise ValueError(f"record {record.request_id}: unknown state {record.state!r}")
        return record


_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))


class LedgerView:
    """A snapshot of some records; the questions a diagnosis asks of them."""

    def __init__(self, records: Iterable[RequestRecord]) -> None:
        self.records: list[RequestRecord] = list(records)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self.records)

    def states(self) -> dict[State, int]:
        """Counts for all six states, zeros included, so reports line up across runs."""
        counts = Counter(r.state for r in self.records)
        return {state: counts.get(state, 0) for state in STATES}

    def pending(self) -> list[RequestRecord]:
        return [r for r in self.records if r.state == "pending"]

    def lost(self) -> list[RequestRecord]:
        """Requests with no final state of their own: still pending, or ended only by a stop.
        Ask after the load has stopped; before that, pending just means in flight."""
        return [r for r in self.records if r.state == "pending" or r.cut_by_stop]

    def never_sent(self) -> list[RequestRecord]:
        """Lost requests that never left the client: the wedge is in the client itself."""
        return [r for r in self.lost() if r.sent is None]

    def not_sent_yet(self) -> list[RequestRecord]:
        """Pending requests not handed to the network yet (held by the client or not)."""
        return [r for r in self.records if r.not_sent_yet]

    def overdue(self, overdue_after_s: float, now: float | None = None) -> list[RequestRecord]:
        """Pending requests sent at least ``overdue_after_s`` ago (the sent clock)."""
        now = now or time.time()
        return [r for r in self.records if r.overdue(overdue_after_s, now)]

    def held_by_client(
        self, overdue_after_s: float, now: float | None = None
    ) -> list[RequestRecord]:
        """Requests the client holds: never sent, queued on an exhausted pool, for a while."""
        now = now or time.time()
        return [r for r in self.records if r.held_by_client(overdue_after_s, now)]

    def phases(self, overdue_after_s: float, now: float | None = None) -> dict[Phase, int]:
        """Counts for every phase, zeros included: see :meth:`RequestRecord.phase`."""
        now = now or time.time()
        counts = Counter(r.phase(overdue_after_s, now) for r in self.records)
        return {phase: counts.get(phase, 0) for phase in PHASES}

    def final(self) -> list[RequestRecord]:
        return [r for r in self.records if r.state != "pending"]


class ClientLedger:
    """Thread-safe list of records, shared by every load of a test (harness, strays, aborters)."""

    def __init__(self, records: Iterable[RequestRecord] = ()) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._ids: set[str] = set()
        for record in records:
            self.add(record)

    def add(self, record: RequestRecord) -> RequestRecord:
        with self._lock:
            if record.request_id in self._ids:
                raise ValueError(
                    f"request id {record.request_id!r} is already in this ledger; give each "
                    "load its own origin or run_id so ids join unambiguously across hops"
                )
            self._ids.add(record.request_id)
            self._records.append(record)
        return record

    record = add

    @property
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def view(self) -> LedgerView:
        return LedgerView(self.records)

    def by_origin(self, origin: str) -> LedgerView:
        return LedgerView(r for r in self.records if r.origin == origin)

    def origins(self) -> list[str]:
        return sorted({r.origin for r in self.records})

    def to_json(self, *, indent: int | None = None) -> str:
        payload = {
            "format": LEDGER_FORMAT,
            "version": LEDGER_VERSION,
            "records": [r.to_dict() for r in self.records],
        }
        return json.dumps(payload, indent=indent)

    @classmethod
    def from_json(cls, text: str) -> ClientLedger:
        payload = cast(dict[str, Any], json.loads(text))
        if payload.get("format") != LEDGER_FORMAT or payload.get("version") != LEDGER_VERSION:
            raise ValueError(
                f"not a {LEDGER_FORMAT} v{LEDGER_VERSION} document "
                f"(format={payload.get('format')!r}, version={payload.get('version')!r})"
            )
        return cls(RequestRecord.from_dict(item) for item in payload["records"])


# -- the lost-requests check ----------------------------------------------------------------


def _when(ts: float | None, since: float) -> str:
    return "-" if ts is None else f"+{ts - since:.2f}s"


def summary_table(
    records: Iterable[RequestRecord],
    *,
    now: float | None = None,
    last_hop: Callable[[RequestRecord], str] | None = None,
) -> str:
    """Fixed-width text table; sent/first byte are shown as offsets from creation, the age on
    the overdue clock (since sent), or how long a request not sent yet has waited."""
    now = now or time.time()
    header = ["request_id", "origin", "state", "sent?", "first byte?", "age"]
    if last_hop is not None:
        header.append("last hop")
    rows = [header]
    for r in records:
        state = f"{r.state} (by stop)" if r.cut_by_stop else r.state
        row = [
            r.request_id,
            r.origin,
            state,
            _when(r.sent, r.created),
            _when(r.first_byte, r.created),
            f"{r.age(now):.1f}s" if r.sent is not None else f"not sent ({r.waited(now):.1f}s)",
        ]
        if last_hop is not None:
            row.append(last_hop(r))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


class LostRequestsError(AssertionError):
    """Some requests never reached a final state. Carries them for the diagnostics layer."""

    def __init__(self, message: str, lost: list[RequestRecord]) -> None:
        super().__init__(message)
        self.lost = lost


def lost_headline(lost: list[RequestRecord], origin: str | None) -> str:
    count = len(lost)
    noun = "request has" if count == 1 else "requests have"
    who = f"{origin} " if origin is not None else ""
    by_origin = Counter(r.origin for r in lost)
    mix = ""
    if origin is None and len(by_origin) > 1:
        mix = " (" + ", ".join(f"{n} {o}" for o, n in sorted(by_origin.items())) + ")"
    unsent = sum(1 for r in lost if r.sent is None)
    detail = f"; {unsent} never left the client" if unsent else ""
    return f"{count} {who}{noun} no final state{mix}{detail}"


def _fix_hint(lost: list[RequestRecord]) -> str:
    if any(r.sent is None for r in lost):
        return (
            "requests that never left the client point at the client itself, a connection "
            "pool exhausted by streams that were never closed or a lock held across a call: "
            "close every stream (`async with client.stream(...)`) and give every request a "
            "total deadline, so that each ends as ok, error or timeout."
        )
    return (
        "find the hop that holds them (the last hop they reached, in the wedge report) and "
        "give that hop's watchdog, or the client, a deadline shorter than the test's, so that "
        "every request ends as ok, error or timeout."
    )


def assert_nothing_lost(
    ledger: ClientLedger,
    origin: str | None = None,
    *,
    last_hop: Callable[[RequestRecord], str] | None = None,
) -> None:
    """Raise :class:`LostRequestsError` if any request (of ``origin``) has no final state of
    its own. Call it after the load has stopped."""
    view = ledger.by_origin(origin) if origin is not None else ledger.view()
    lost = view.lost()
    if not lost:
        return
    message = "\n".join(
        [
            lost_headline(lost, origin),
            summary_table(lost, last_hop=last_hop),
            f"To fix this: {_fix_hint(lost)}",
        ]
    )
    raise LostRequestsError(message, lost)
