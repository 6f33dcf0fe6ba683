"""``ComponentSpec``: how one component starts, pure data (no I/O).

A runtime knows how to run it; nothing here is stub-specific, so a user's own worker or router
build can take a stub's place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
