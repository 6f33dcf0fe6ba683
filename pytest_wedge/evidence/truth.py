"""What only the test knows (pure data): the ground truth that scores the blind locator. A real
deployment keeps no per-request ledger and announces no toxic; the blind locator never reads
this (a unit test checks its imports)."""

from __future__ import annotations

from typing import Protocol, TypedDict


class _Fault(Protocol):
    @property
    def target(self) -> object: ...

    def describe(self) -> str: ...


class FaultWindow(Protocol):
    """What a ``faults.fault.FaultWindow`` gives (evidence/ sits below faults/)."""

    @property
    def fault(self) -> _Fault: ...

    @property
    def started(self) -> float: ...

    @property
    def ended(self) -> float | None: ...


class LedgerEntry(TypedDict, total=False):
    """One request in a stub's ``/ledger`` (stubs/worker_ledger.py ``Entry.to_dict``)."""

    request_id: str
    origin: str
    room: int | None
    path: str
    stream: bool
    prompt_tokens: int
    max_tokens: int
    tokens: int
    state: str
    error: str | None
    t: dict[str, float]  # stamp (arrived, running, kv_ready, ...) -> time.time()


class StubFiring(TypedDict, total=False):
    """An engine watchdog's firing as a stub's ``/control/state`` lists it."""

    watchdog: str
    at: float
    request_id: str
    room: int | None


class StubState(TypedDict, total=False):
    """The parts of a stub's ``/control/state`` the oracle reads."""

    at: float
    tokens_by_origin: dict[str, float]
    faults: list[dict[str, object]]  # the engine faults on now
    firings: list[StubFiring]


class Toxic(TypedDict, total=False):
    type: str
    stream: str
    name: str
    toxicity: float
    attributes: dict[str, object]


class LinkState(TypedDict, total=False):
    """A link's Toxiproxy configuration (ground truth) and its byte counters."""

    enabled: bool
    toxics: list[Toxic]
    bytes: dict[str, float]


class FaultRecord(TypedDict):
    """A fault window as plain data."""

    description: str
    target: str
    started: float
    ended: float | None


def window_record(window: FaultWindow | FaultRecord) -> FaultRecord:
    """A fault window (``FaultWindow`` or its record) as plain data."""
    if isinstance(window, dict):
        return FaultRecord(
            description=str(window["description"]),
            target=str(window["target"]),
            started=float(window["started"]),
            ended=window.get("ended"),
        )
    fault = window.fault
    return FaultRecord(
        description=fault.describe(),
        target=str(fault.target),
        started=window.started,
        ended=window.ended,
    )
