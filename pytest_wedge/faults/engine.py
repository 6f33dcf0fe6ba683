"""Engine faults inside the stub workers, switched at run time through their control API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults.base import Fault
from pytest_wedge.topology.spec import validate_component_name

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


@dataclass(frozen=True, kw_only=True)
class EngineFault(Fault):
    """One stub fault. ``origin`` limits it to requests of that origin (None: all)."""

    component: str
    origin: str | None = None
    kind: ClassVar[str]
    roles: ClassVar[tuple[str, ...]] = ("prefill", "decode")

    @property
    def target(self) -> str:
        return self.component

    @property
    def fault_name(self) -> str:
        return f"wedge-{self.kind}"

    def params(self) -> dict[str, Any]:
        return {}

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.fault_name, "kind": self.kind, **self.params()}
        if self.origin is not None:
            body["origin"] = self.origin
        return body

    def apply(self, topology: Topology) -> None:
        validate_component_name(self.component, topology.spec)
        role = self.component.split("-")[0]
        if role not in self.roles:
            raise ConfigError(
                f"{type(self).__name__} does not apply to {self.component}",
                facts={"applies to": ", ".join(self.roles)},
                fix=f"target a {' or '.join(self.roles)} worker",
            )
        topology.stub(self.component).add_fault(self.payload())

    def revert(self, topology: Topology) -> None:
        if topology.runtime.state(self.component) == "running":
            topology.stub(self.component).remove_fault(self.fault_name)


@dataclass(frozen=True, kw_only=True)
class StallBeforeFirstToken(EngineFault):
    kind: ClassVar[str] = "stall_before_first_token"


@dataclass(frozen=True, kw_only=True)
class StallAfterTokens(EngineFault):
    """Emit exactly ``tokens`` tokens, then hold the stream open: a half-open stream."""

    tokens: int = 3
    kind: ClassVar[str] = "stall_after_tokens"
    roles: ClassVar[tuple[str, ...]] = ("decode",)

    def params(self) -> dict[str, Any]:
        return {"tokens": self.tokens}


@dataclass(frozen=True, kw_only=True)
class PinOnAbort(EngineFault):
    """An aborted request never releases its prefill in-flight slot (incident 3)."""

    component: str = "prefill-0"
    kind: ClassVar[str] = "pin_on_abort"
    roles: ClassVar[tuple[str, ...]] = ("prefill",)


@dataclass(frozen=True, kw_only=True)
class Serialize(EngineFault):
    """Decode runs one request at a time; the rest queue (incident 5)."""

    component: str = "decode-0"
    kind: ClassVar[str] = "serialize"
    roles: ClassVar[tuple[str, ...]] = ("decode",)


@dataclass(frozen=True, kw_only=True)
class ErrorStatus(EngineFault):
    status: int = 500
    message: str = "injected by pytest-wedge"
    kind: ClassVar[str] = "error_status"

    def params(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message}


@dataclass(frozen=True, kw_only=True)
class SlowTokens(EngineFault):
    itl_ms: float = 200.0
    kind: ClassVar[str] = "slow_tokens"

    def params(self) -> dict[str, Any]:
        return {"itl_ms": self.itl_ms}


@dataclass(frozen=True, kw_only=True)
class Crash(EngineFault):
    """The worker exits at once. Reverting restarts it."""

    exit_code: int = 1
    kind: ClassVar[str] = "crash"

    def params(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code}

    def revert(self, topology: Topology) -> None:
        if topology.runtime.state(self.component) != "running":
            topology.restart(self.component)


@dataclass(frozen=True, kw_only=True)
class RefuseBootstrap(EngineFault):
    """The prefill's bootstrap server refuses KV fetches (the decode fails the request)."""

    component: str = "prefill-0"
    kind: ClassVar[str] = "refuse_bootstrap"
    roles: ClassVar[tuple[str, ...]] = ("prefill",)
