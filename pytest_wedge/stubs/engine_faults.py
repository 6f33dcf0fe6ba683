"""Engine faults: parsing, validation and the per-process set of active faults."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

# The one engine-fault vocabulary: kind -> its parameters with their defaults (None means
# required). pytest_wedge.faults.engine declares (and documents) a class per kind with these
# very fields.
KINDS: dict[str, dict[str, Any]] = {
    "stall_before_first_token": {},
    "stall_after_tokens": {"tokens": None},
    "stall_bootstrap": {},
    "stall_kv_transfer": {"midway": False},
    "pin_on_abort": {},
    "serialize": {},
    "error_status": {
        "status": 500,
        "message": "injected engine error",
        "first_n": 0,
        "probability": 1.0,
        "after_kv_taken": False,
        "delay_ms": 0.0,
    },
    "slow_tokens": {"itl_ms": None},
    "crash": {"exit_code": 1},
    "refuse_bootstrap": {},
    "blocking_bootstrap_call": {"timeout_ms": 5000.0, "retries": 15},
    "timeout_skips_transferring": {},
    "leak_slot": {"every": None},
    "freeze_engine_loop": {},
}
# Limits a listing shows only where they limit: an unlimited error_status reads as before.
QUIET_AT_DEFAULT = frozenset({"first_n", "probability", "after_kv_taken", "delay_ms", "midway"})


class FaultError(ValueError):
    """A fault body that cannot be applied; the control API answers 400 with this text."""


@dataclass(frozen=True)
class StubFault:
    name: str
    kind: str
    origin: str | None = None
    tokens: int = 0
    status: int = 500
    message: str = ""
    itl_ms: float = 0.0
    exit_code: int = 1
    first_n: int = 0
    probability: float = 1.0
    after_kv_taken: bool = False
    delay_ms: float = 0.0
    midway: bool = False
    timeout_ms: float = 0.0
    retries: int = 0
    every: int = 0

    def matches(self, origin: str) -> bool:
        return self.origin is None or self.origin == origin

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": self.kind, "origin": self.origin}
        params = KINDS[self.kind]
        out.update(
            {
                k: v
                for k, v in asdict(self).items()
                if k in params and not (k in QUIET_AT_DEFAULT and v == params[k])
            }
        )
        return out


def _int(kind: str, key: str, value: Any, lo: int, hi: int) -> int:
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise FaultError(f"{kind}: {key} must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise FaultError(f"{kind}: {key} must be within {lo}..{hi}, got {value!r}")
    return int(value)


def _ms(kind: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 6e5:
        raise FaultError(f"{kind}: {key} must be a number within 0..600000")
    return float(value)


def _probability(kind: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise FaultError(f"{kind}: {key} must be a number within 0..1, got {value!r}")
    return float(value)


def _of_type(wanted: type, words: str) -> Callable[[str, str, Any], Any]:
    def check(kind: str, key: str, value: Any) -> Any:
        if not isinstance(value, wanted):
            raise FaultError(f"{kind}: {key} must be {words}")
        return value

    return check


CHECKS: dict[str, Callable[[str, str, Any], Any]] = {
    "tokens": lambda kind, key, v: _int(kind, key, v, 0, 10_000_000),
    "status": lambda kind, key, v: _int(kind, key, v, 400, 599),
    "message": _of_type(str, "a string"),
    "itl_ms": _ms,
    "exit_code": lambda kind, key, v: _int(kind, key, v, 0, 255),
    "first_n": lambda kind, key, v: _int(kind, key, v, 0, 10_000_000),
    "probability": _probability,
    "after_kv_taken": _of_type(bool, "true or false"),
    "delay_ms": _ms,
    "midway": _of_type(bool, "true or false"),
    "timeout_ms": _ms,
    "retries": lambda kind, key, v: _int(kind, key, v, 1, 1000),
    "every": lambda kind, key, v: _int(kind, key, v, 1, 10_000_000),
}


def parse_fault(body: Any) -> StubFault:
    if not isinstance(body, Mapping):
        raise FaultError("fault must be a JSON object with name and kind")
    name, kind = body.get("name"), body.get("kind")
    if not isinstance(name, str) or not name:
        raise FaultError("fault needs a non-empty string 'name'")
    if not isinstance(kind, str) or kind not in KINDS:
        raise FaultError(f"unknown fault kind {kind!r}; known: {', '.join(sorted(KINDS))}")
    params = KINDS[kind]
    unknown = set(body) - {"name", "kind", "origin"} - set(params)
    if unknown:
        raise FaultError(f"{kind}: unknown parameter(s) {', '.join(sorted(unknown))}")
    missing = [k for k, default in params.items() if default is None and k not in body]
    if missing:
        raise FaultError(f"{kind}: missing parameter(s) {', '.join(missing)}")
    origin = body.get("origin")
    if origin is not None and not isinstance(origin, str):
        raise FaultError(f"{kind}: origin must be a string or null")
    checked = {k: CHECKS[k](kind, k, body.get(k, default)) for k, default in params.items()}
    return StubFault(name=name, kind=kind, origin=origin, **checked)


@dataclass
class _Draws:
    """What a limited fault has done so far: its seeded draws and how often it fired."""

    rng: random.Random
    matched: int = 0
    fired: int = 0


class StubFaultSet:
    """Active faults by name. Adding a name again replaces the previous fault.

    The name is the fault's instance id: the test side gives every fault instance its own
    (``wedge-<kind>-<n>``), so two faults of one kind, say for two origins, live side by side
    and each is removed alone. Where several match a request, the earliest added wins.
    """

    def __init__(self, seed: int = 0, on_change: Callable[[], None] | None = None) -> None:
        self._by_name: dict[str, StubFault] = {}
        self._draws: dict[str, _Draws] = {}
        self.seed = seed
        # Called after every add, remove and clear: a held request re-checks its stall then.
        self.on_change = on_change

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def add(self, fault: StubFault) -> None:
        self._by_name[fault.name] = fault
        # Seeded by what the fault is, never by its name (the test side numbers instances per
        # process): with one --seed, the n-th matching request gets the same draw every run.
        key = f"{self.seed}/{fault.kind}/{fault.origin}/{fault.probability!r}"
        self._draws[fault.name] = _Draws(random.Random(key))
        self._changed()

    def remove(self, name: str) -> bool:
        removed = self._by_name.pop(name, None) is not None
        self._draws.pop(name, None)
        if removed:
            self._changed()
        return removed

    def clear(self) -> None:
        self._by_name.clear()
        self._draws.clear()
        self._changed()

    def fire(self, kind: str, origin: str) -> StubFault | None:
        """The fault of ``kind`` that acts on this request, counting it against the fault's
        ``first_n`` and drawing its ``probability`` (or acting on every ``every``-th); None
        when none acts. Use it for faults that act per request (error_status, leak_slot);
        ``find`` only looks."""
        if not self._by_name:
            return None
        for fault in self._by_name.values():
            if fault.kind != kind or not fault.matches(origin):
                continue
            draws = self._draws[fault.name]
            draws.matched += 1
            if fault.every and draws.matched % fault.every:
                continue
            if fault.first_n and draws.fired >= fault.first_n:
                continue
            if draws.rng.random() < fault.probability:
                draws.fired += 1
                return fault
        return None

    def find(self, kind: str, origin: str) -> StubFault | None:
        # Fast path: most requests run with no fault at all.
        if not self._by_name:
            return None
        for fault in self._by_name.values():
            if fault.kind == kind and fault.matches(origin):
                return fault
        return None

    def has_kind(self, kind: str) -> bool:
        return any(f.kind == kind for f in self._by_name.values())

    def to_json(self) -> list[dict[str, Any]]:
        out = []
        for fault in self._by_name.values():
            item = fault.to_json()
            draws = self._draws.get(fault.name)
            if fault.kind in ("error_status", "leak_slot") and draws is not None:
                item.update(matched=draws.matched, fired=draws.fired)
            out.append(item)
        return out

    def __len__(self) -> int:
        return len(self._by_name)
