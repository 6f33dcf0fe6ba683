"""Executions counted, as Jepsen counts operations: how many times did a worker run a request?

smg retries a PD request with a new bootstrap room and the same ``X-Request-ID``
(router-protocol.md, "Errors"), so joining the worker ledgers by request id and grouping by
room gives the attempts, their workers and how far each got. An attempt *executed* once its
decode produced a token: a replay after that runs the request twice. Replays of attempts that
failed before any token are safe retries. Pure: records and ledgers in, executions out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_wedge.errors import WedgeError
from pytest_wedge.load.client_ledger import RequestRecord

FIX = (
    "the router replayed attempts a decode had already run: smg re-sends a failed PD attempt "
    "with a new room even after the dispatch went out (sglang issue #34572). Retry only while "
    "no upstream can have been contacted (the rule of sglang pull request #34570), run "
    "non-idempotent work with --disable-retries, or make the request idempotent"
)


class DuplicateExecutionError(WedgeError, AssertionError):
    """A request id was executed by more than one attempt (a non-idempotent replay)."""


@dataclass(frozen=True)
class Leg:
    """One worker's ledger entry for one attempt."""

    worker: str
    role: str  # "prefill" or "decode"
    state: str
    tokens: int
    error: str | None
    t: Mapping[str, float]

    @property
    def generated(self) -> bool:
        return self.role == "decode" and ("first_token" in self.t or self.tokens > 0)

    def describe(self) -> str:
        text = f"{self.worker} {self.state}"
        if self.role == "decode" and self.tokens:
            text += f" ({self.tokens} tokens)"
        if self.error:
            text += f" [{self.error[:80]}]"
        return text


@dataclass(frozen=True)
class Attempt:
    """One attempt of the router (one bootstrap room), or one direct request to a worker."""

    room: int | None
    legs: tuple[Leg, ...]

    @property
    def arrived(self) -> float:
        return min((leg.t.get("arrived", 0.0) for leg in self.legs), default=0.0)

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(leg.worker for leg in self.legs)

    @property
    def generated(self) -> bool:
        """A decode produced at least one token for it: the attempt executed."""
        return any(leg.generated for leg in self.legs)

    @property
    def completed(self) -> bool:
        """A decode ran it to completion."""
        return any(leg.role == "decode" and leg.state == "ok" for leg in self.legs)

    def describe(self) -> str:
        where = f"room {self.room}" if self.room is not None else "no room (direct)"
        return f"{where}: " + ", ".join(leg.describe() for leg in self.legs)


@dataclass(frozen=True)
class Execution:
    """Everything the workers did for one request id."""

    request_id: str
    origin: str
    client_state: str | None  # None: the client ledger has no record of it
    attempts: tuple[Attempt, ...]

    @property
    def rooms(self) -> tuple[int | None, ...]:
        return tuple(a.room for a in self.attempts)

    @property
    def workers(self) -> tuple[str, ...]:
        """Every worker that ran a leg of it, in order of first appearance."""
        return tuple(dict.fromkeys(w for a in self.attempts for w in a.workers))

    @property
    def retries(self) -> int:
        return max(0, len(self.attempts) - 1)

    @property
    def executed(self) -> int:
        """Attempts in which a decode generated tokens."""
        return sum(1 for a in self.attempts if a.generated)

    @property
    def completed(self) -> int:
        """Attempts a decode ran to completion."""
        return sum(1 for a in self.attempts if a.completed)

    @property
    def duplicated(self) -> bool:
        return self.executed > 1

    def summary(self) -> str:
        client = self.client_state or "no client record"
        return (
            f"{len(self.attempts)} attempt(s), {self.executed} executed, {self.completed} ran "
            f"to completion (client: {client})"
        )

    def describe(self) -> str:
        lines = [self.summary()]
        lines += [f"attempt {i}, {a.describe()}" for i, a in enumerate(self.attempts, 1)]
        return "\n      ".join(lines)


Ledger = Mapping[str, Any] | Sequence[Mapping[str, Any]]


def _entries(name: str, ledger: Ledger) -> tuple[str, Sequence[Mapping[str, Any]]]:
    """A worker's role and entries, from its ``GET /ledger`` answer or a bare entry list (as a
    diagnostics snapshot keeps them); the role then comes from the name (``decode-0``)."""
    if isinstance(ledger, Mapping):
        role = ledger.get("role")
        return str(role) if role else name.split("-")[0], ledger.get("entries") or []
    return name.split("-")[0], ledger


def _client(record: RequestRecord | Mapping[str, Any]) -> tuple[str, str, str]:
    """(request id, origin, state) of a client record, or of its JSON form."""
    if isinstance(record, Mapping):
        return str(record["request_id"]), str(record.get("origin")), str(record.get("state"))
    return record.request_id, record.origin, record.state


def count_executions(
    records: Iterable[RequestRecord | Mapping[str, Any]],
    worker_ledgers: Mapping[str, Ledger],
    origin: str | None = None,
) -> list[Execution]:
    """Per request id (of ``origin``, or every one): the attempts the workers saw, oldest
    first. ``records`` is the client ledger, as records or their JSON (request ids no worker
    saw get no attempts); ``worker_ledgers`` maps a worker name to its ``GET /ledger`` answer
    or to its list of entries."""
    clients = {c[0]: c for c in map(_client, records) if origin is None or c[1] == origin}
    by_attempt: dict[str, dict[object, list[Leg]]] = {}
    origins: dict[str, str] = {}
    for worker, ledger in sorted(worker_ledgers.items()):
        role, entries = _entries(worker, ledger)
        for i, entry in enumerate(entries):
            if origin is not None and entry.get("origin") != origin:
                continue
            request_id = str(entry.get("request_id"))
            origins.setdefault(request_id, str(entry.get("origin")))
            room = entry.get("room")
            key: object = room if room is not None else (worker, i)
            leg = Leg(
                worker,
                role,
                str(entry.get("state")),
                int(entry.get("tokens") or 0),
                entry.get("error"),
                dict(entry.get("t") or {}),
            )
            by_attempt.setdefault(request_id, {}).setdefault(key, []).append(leg)
    executions = []
    for request_id in dict.fromkeys([*clients, *by_attempt]):
        client = clients.get(request_id)
        attempts = sorted(
            (
                Attempt(
                    key if isinstance(key, int) else None,
                    tuple(sorted(legs, key=lambda g: (g.role != "prefill", g.worker))),
                )
                for key, legs in by_attempt.get(request_id, {}).items()
            ),
            key=lambda a: a.arrived,
        )
        executions.append(
            Execution(
                request_id,
                client[1] if client else origins.get(request_id, "?"),
                client[2] if client else None,
                tuple(attempts),
            )
        )
    return executions


def duplicates(executions: Iterable[Execution]) -> list[Execution]:
    """The request ids executed by more than one attempt."""
    return [e for e in executions if e.duplicated]


def retry_table(executions: Sequence[Execution], limit: int = 20) -> str:
    """One line per retried request id: its attempts, rooms and workers."""
    retried = [e for e in executions if e.retries]
    lines = [
        f"{e.request_id}: {len(e.attempts)} attempts, rooms "
        f"{', '.join(str(r) for r in e.rooms)}; workers {', '.join(e.workers)}; "
        f"{e.executed} executed"
        for e in retried[:limit]
    ]
    if len(retried) > limit:
        lines.append(f"... and {len(retried) - limit} more")
    return "\n".join(lines) or "no request was retried"


def assert_executed_once(executions: Sequence[Execution], origin: str = "harness") -> None:
    """Raise :class:`DuplicateExecutionError` naming every request id of ``origin`` that more
    than one attempt executed (a decode generated tokens for it), with its attempts, rooms and
    workers."""
    dup = duplicates(executions)
    if not dup:
        return
    retried = sum(1 for e in executions if e.retries)
    facts: dict[str, object] = {
        "request ids": f"{len(executions)} of {origin}; {retried} retried by the router; "
        f"{len(dup)} executed more than once",
    }
    for execution in dup[:8]:
        facts[execution.request_id] = execution.describe()
    if len(dup) > 8:
        facts["more"] = ", ".join(e.request_id for e in dup[8:])
    raise DuplicateExecutionError(
        f"{len(dup)} {origin} request id(s) executed more than once: "
        + ", ".join(f"{e.request_id} ({e.executed} executions)" for e in dup[:3])
        + (" ..." if len(dup) > 3 else ""),
        facts=facts,
        fix=FIX,
    )
