"""Component faults, carried out by the runtime: pause, kill, restart, PD-pair restarts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults.base import Fault
from pytest_wedge.topology.spec import validate_component_name

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


@dataclass(frozen=True)
class ComponentFault(Fault):
    """A runtime action on one component (router, prefill-i, decode-j)."""

    component: str

    @property
    def target(self) -> str:
        return self.component


@dataclass(frozen=True)
class Pause(ComponentFault):
    """SIGSTOP (or ``docker pause``): TCP still accepts, nothing answers. Reverted by resume."""

    def apply(self, topology: Topology) -> None:
        validate_component_name(self.component, topology.spec)
        topology.runtime.pause(self.component)

    def revert(self, topology: Topology) -> None:
        topology.runtime.resume(self.component)


@dataclass(frozen=True)
class Kill(ComponentFault):
    """SIGKILL. Reverting starts the component again if it is still down."""

    def apply(self, topology: Topology) -> None:
        validate_component_name(self.component, topology.spec)
        topology.runtime.kill(self.component)

    def revert(self, topology: Topology) -> None:
        if topology.runtime.state(self.component) != "running":
            topology.restart(self.component)


@dataclass(frozen=True)
class Restart(ComponentFault):
    """Kill and start again, waiting until it is ready. A one-shot: nothing to revert."""

    def apply(self, topology: Topology) -> None:
        validate_component_name(self.component, topology.spec)
        topology.restart(self.component)


def _check_decode(decode: str, topology: Topology) -> None:
    validate_component_name(decode, topology.spec)
    if not decode.startswith("decode-"):
        raise ConfigError(f"{decode!r} is not a decode worker",
                          fix=f"use one of: {', '.join(topology.spec.decode_names)}")  # fmt: skip


@dataclass(frozen=True)
class DecodeOnlyRestart(Fault):
    """Restart a decode without its prefills (incident 2).

    The decode comes back with a new instance identity while each prefill keeps its transfer
    state for the old one, so new KV transfers wedge. Nothing is reverted: only a co-restart
    of the pair (``CoRestart``) clears it, exactly as in production.
    """

    decode: str = "decode-0"

    @property
    def target(self) -> str:
        # Where the wedge shows: the transfer link from this decode to the first prefill.
        return f"{self.decode}->prefill-0"

    def apply(self, topology: Topology) -> None:
        _check_decode(self.decode, topology)
        topology.restart(self.decode)


@dataclass(frozen=True)
class CoRestart(Fault):
    """Restart a decode together with its prefills: the operating rule from incident 2."""

    decode: str = "decode-0"

    @property
    def target(self) -> str:
        return self.decode

    def apply(self, topology: Topology) -> None:
        _check_decode(self.decode, topology)
        topology.restart(*topology.pd_pair(self.decode))
