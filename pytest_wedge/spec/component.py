"""``ComponentSpec``: how one component starts, pure data that any runtime can run. Nothing
here is stub-specific, so a user's own worker or router build can take a stub's place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from pytest_wedge.errors import ConfigError
from pytest_wedge.routers.template import split_template

Role = Literal["router", "prefill", "decode", "toxiproxy"]
LEDGERLESS_FLAG = "--ledgerless"  # the stubs' flag that switches off ledger and control API
STUB_MODULE = "pytest_wedge.stubs"


@dataclass(frozen=True)
class ComponentSpec:
    name: str
    role: Role
    argv: tuple[str, ...]
    ready_url: str
    ports: tuple[int, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # From a user's command: known only by its public endpoints (even when it launches our
    # stub) and spawned as written, never forked, so its PID is the command's own.
    foreign: bool = False

    @property
    def is_stub(self) -> bool:
        """A stub with its control API: a ledger-less one shows only public endpoints."""
        return not self.foreign and STUB_MODULE in self.argv and LEDGERLESS_FLAG not in self.argv


def check_fields(cls: Any, given: Mapping[str, Any], what: str, where: str) -> None:
    """Refuse the keys of ``given`` that are not fields of the dataclass ``cls`` (``where``)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(
            f"Unknown {what}: {', '.join(unknown)}",
            facts={"known": ", ".join(sorted(known))},
            fix=f"use only the fields of {where}",
        )


_PORT_LISTS = ("bootstrap_ports", "prefill_listen", "decode_listen")


def spec_from(cls: Any, value: Any, what: str, headline: str, fix: str) -> Any:
    """A ``RouterSpec``/``WorkerSpec`` from a dict of its fields (lists become tuples)."""
    if not isinstance(value, Mapping):
        raise ConfigError(headline, facts={"got": repr(value)}, fix=fix)
    check_fields(cls, value, f"{what} setting(s)", f"{cls.__module__}.{cls.__name__}")
    values = dict(value)
    if "command" in values:
        values["command"] = split_template(values["command"])
    if "urls" in values:
        values["urls"] = tuple(values["urls"])
    for name in _PORT_LISTS:
        if name in values:
            values[name] = tuple(int(v) for v in values[name])
    if "kv_listen" in values:
        values["kv_listen"] = tuple(tuple(int(p) for p in ports) for ports in values["kv_listen"])
    return cls(**values)
