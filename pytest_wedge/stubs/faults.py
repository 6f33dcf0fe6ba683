"""Engine faults: parsing, validation and the per-process set of active faults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from dataclasses import replace as _replace
from typing import Any

# kind -> (params with defaults; None means required)
KINDS: dict[str, dict[str, Any]] = {
    "stall_before_first_token": {},
    "stall_after_tokens": {"tokens": None},
    "pin_on_abort": {},
    "serialize": {},
    "error_status": {"status": 500, "message": "injected engine error"},
    "slow_tokens": {"itl_ms": None},
    "crash": {"exit_code": 1},
    "refuse_bootstrap": {},
}


class FaultError(ValueError):
    """A fault body that cannot be applied; the control API answers 400 with this text."""


@dataclass(frozen=True)
class Fault:
    name: str
    kind: str
    origin: str | None = None
    tokens: int = 0
    status: int = 500
    message: str = ""
    itl_ms: float = 0.0
    exit_code: int = 1

    def matches(self, origin: str) -> bool:
        return self.origin is None or self.origin == origin

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": self.kind, "origin": self.origin}
        params = KINDS[self.kind]
        out.update({k: v for k, v in asdict(self).items() if k in params})
        return out


def _int(kind: str, key: str, value: Any, lo: int, hi: int) -> int:
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise FaultError(f"{kind}: {key} must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise FaultError(f"{kind}: {key} must be within {lo}..{hi}, got {value!r}")
    return int(value)


def parse_fault(body: Any) -> Fault:
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
    values = {k: body.get(k, default) for k, default in params.items()}
    fault = Fault(name=name, kind=kind, origin=origin)
    if "tokens" in values:
        fault = _replace(fault, tokens=_int(kind, "tokens", values["tokens"], 0, 10_000_000))
    if "status" in values:
        fault = _replace(fault, status=_int(kind, "status", values["status"], 400, 599))
    if "message" in values:
        if not isinstance(values["message"], str):
            raise FaultError(f"{kind}: message must be a string")
        fault = _replace(fault, message=values["message"])
    if "itl_ms" in values:
        itl = values["itl_ms"]
        if isinstance(itl, bool) or not isinstance(itl, (int, float)) or not 0 <= itl <= 600_000:
            raise FaultError(f"{kind}: itl_ms must be a number within 0..600000")
        fault = _replace(fault, itl_ms=float(itl))
    if "exit_code" in values:
        fault = _replace(fault, exit_code=_int(kind, "exit_code", values["exit_code"], 0, 255))
    return fault


class FaultSet:
    """Active faults by name. Adding a name again replaces the previous fault."""

    def __init__(self) -> None:
        self._by_name: dict[str, Fault] = {}

    def add(self, fault: Fault) -> None:
        self._by_name[fault.name] = fault

    def remove(self, name: str) -> bool:
        return self._by_name.pop(name, None) is not None

    def clear(self) -> None:
        self._by_name.clear()

    def find(self, kind: str, origin: str) -> Fault | None:
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
        return [f.to_json() for f in self._by_name.values()]

    def __len__(self) -> int:
        return len(self._by_name)
