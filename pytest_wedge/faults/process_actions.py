"""Component faults, carried out by the runtime: pause, kill, restart, PD-pair restarts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults.fault import Fault
from pytest_wedge.faults.registry import register
from pytest_wedge.spec.names import validate_component_name, validate_link_name

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


@dataclass(frozen=True)
class ComponentFault(Fault):
    """A runtime action on the component ``target`` (router, prefill-i, decode-j)."""


def check_started_by_us(names: list[str], topology: Topology) -> None:
    """Refuse a runtime action on a url worker: pytest-wedge neither started nor owns it."""
    for name in names:
        validate_component_name(name, topology.spec)
    theirs = [name for name in names if name in topology.spec.url_workers]
    if theirs:
        raise ConfigError(
            f"{theirs[0]} is a url worker: pytest-wedge did not start it, so it cannot pause, "
            "kill or restart it",
            facts={"worker": theirs[0], "running at": topology.worker_url(theirs[0])},
            fix="fault its links instead (Timeout, Down, ... on router->NAME or a KV link), "
            "or run that role as a stub or command worker",
        )


@register
@dataclass(frozen=True)
class Pause(ComponentFault):
    """SIGSTOP (or ``docker pause``): TCP still accepts, nothing answers. Reverted by resume."""

    def apply(self, topology: Topology) -> None:
        check_started_by_us([self.target], topology)
        topology.runtime.pause(self.target)

    def revert(self, topology: Topology) -> None:
        topology.runtime.resume(self.target)


@register
@dataclass(frozen=True)
class Kill(ComponentFault):
    """SIGKILL. Reverting starts the component again if it is still down."""

    def apply(self, topology: Topology) -> None:
        check_started_by_us([self.target], topology)
        topology.runtime.kill(self.target)

    def revert(self, topology: Topology) -> None:
        if topology.runtime.state(self.target) != "running":
            topology.restart(self.target)


@register
@dataclass(frozen=True)
class Restart(ComponentFault):
    """Kill and start again, waiting until it is ready. A one-shot: nothing to revert."""

    def apply(self, topology: Topology) -> None:
        check_started_by_us([self.target], topology)
        topology.restart(self.target)


def _check_decode(decode: str, topology: Topology) -> None:
    validate_component_name(decode, topology.spec)
    if not decode.startswith("decode-"):
        raise ConfigError(
            f"{decode!r} is not a decode worker",
            fix=f"use one of: {', '.join(topology.spec.decode_names)}",
        )


@register
@dataclass(frozen=True)
class DecodeOnlyRestart(Fault):
    """Restart the decode ``target`` without its prefills (incident 2): the prefills keep
    transfer state for the old instance, so new KV transfers wedge on ``decode->prefill``.
    Nothing is reverted: only a ``CoRestart`` of the pair clears it, as in production.
    """

    target: str = "decode-0"
    prefills: tuple[str, ...] = ()
    """The prefills whose transfers wedge; empty: the decode's PD pair in the topology."""

    def __post_init__(self) -> None:
        # A scenario file gives a list (or one name); a tuple keeps the fault hashable.
        given: object = self.prefills
        names = (given,) if isinstance(given, str) else tuple(given)  # type: ignore[arg-type]
        if not all(isinstance(name, str) for name in names):
            raise ConfigError(
                f"DecodeOnlyRestart prefills must be names, got {given!r}",
                fix='use prefills=("prefill-0",) or leave it empty',
            )
        object.__setattr__(self, "prefills", names)

    def wedged_links(self, topology: Topology) -> list[str]:
        """Where the wedge shows: the transfer link from this decode to each of its prefills."""
        prefills = self.prefills or [p for p in topology.pd_pair(self.target) if p != self.target]
        return [f"{self.target}->{prefill}" for prefill in prefills]

    def apply(self, topology: Topology) -> None:
        _check_decode(self.target, topology)
        for link in self.wedged_links(topology):  # an explicit prefill must be a real one
            validate_link_name(link, topology.spec)
        check_started_by_us([self.target], topology)
        topology.restart(self.target)

    def describe(self) -> str:
        wedged = f" (wedges its transfers from {', '.join(self.prefills)})" if self.prefills else ""
        return super().describe() + wedged


@register
@dataclass(frozen=True)
class CoRestart(Fault):
    """Restart the decode ``target`` together with its prefills: the rule from incident 2."""

    target: str = "decode-0"

    def apply(self, topology: Topology) -> None:
        _check_decode(self.target, topology)
        check_started_by_us(topology.pd_pair(self.target), topology)
        topology.restart(*topology.pd_pair(self.target))
