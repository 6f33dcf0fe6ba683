"""``ComponentSpec``: how one component starts, pure data (no I/O).

A runtime knows how to run it; nothing here is stub-specific, so a user's own worker or router
build can take a stub's place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from pytest_wedge.errors import ConfigError

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
    # Started from a user's command template: the plugin knows only its public endpoints, even
    # when the command happens to launch our stub, and the process runtime spawns it as written
    # (never through the stub fork server), so its PID is the command's own.
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
