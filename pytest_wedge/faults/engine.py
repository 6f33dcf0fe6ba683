"""Engine faults inside the stub workers, switched at run time through their control API.
The stub's ``KINDS`` is the one vocabulary: each class here has its fields and defaults
(tests/unit/test_fault_vocabulary.py holds the two sides together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults.fault import Fault, FaultNotApplied
from pytest_wedge.faults.registry import register
from pytest_wedge.spec.names import validate_component_name
from pytest_wedge.stubs.control_client import StubUnavailable
from pytest_wedge.stubs.engine_faults import KINDS as STUB_KINDS
from pytest_wedge.waiting import poll

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


def stub_default(kind: str, param: str) -> Any:
    """The stub parser's default for ``param`` of ``kind`` (KeyError if it has none)."""
    default = STUB_KINDS[kind][param]
    if default is None:
        raise KeyError(f"the stub requires {kind}.{param}; it has no default to take")
    return default


@dataclass(frozen=True, kw_only=True)
class EngineFault(Fault):
    """One stub fault on the worker ``target``; each instance is its own fault in the stub."""

    origin: str | None = None
    """Act only on requests of this origin (``harness``, ``stray-1``...); None: on all."""
    kind: ClassVar[str]
    roles: ClassVar[tuple[str, ...]] = ("prefill", "decode")

    @property
    def fault_name(self) -> str:
        """The stub's key for this fault: ``DELETE /control/faults/<fault_name>`` removes it."""
        return f"wedge-{self.kind}-{self.instance_id}"

    def params(self) -> dict[str, Any]:
        """The parameters of this kind, as the stub names them: the fields of the same names."""
        return {name: getattr(self, name) for name in STUB_KINDS[self.kind]}

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.fault_name, "kind": self.kind, **self.params()}
        if self.origin is not None:
            body["origin"] = self.origin
        return body

    def apply(self, topology: Topology) -> None:
        validate_component_name(self.target, topology.spec)
        role = self.target.split("-")[0]
        if role not in self.roles:
            raise ConfigError(
                f"{type(self).__name__} does not apply to {self.target}",
                facts={"applies to": ", ".join(self.roles)},
                fix=f"target a {' or '.join(self.roles)} worker",
            )
        if self.target in topology.spec.foreign_workers:
            topology.stub(self.target)  # raises the ConfigError that says why and what to use
        if not topology.spec.stub.ledger:
            raise StubUnavailable(
                f"{type(self).__name__} needs {self.target}'s control API, and {self.target} "
                "runs ledger-less",
                facts={"worker": self.target, "stub options": "ledger=False (--ledgerless)"},
                fix="engine faults need a worker with its control API: drop ledger=False, or "
                "use a fault that needs none (Timeout, Down, Pause, Kill, ...)",
            )
        topology.stub(self.target).add_fault(self.payload())

    def revert(self, topology: Topology) -> None:
        if topology.runtime.state(self.target) == "running":
            topology.stub(self.target).remove_fault(self.fault_name)

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        active = [f.get("name") for f in topology.stub(self.target).faults()]
        if self.fault_name not in active:
            raise FaultNotApplied(
                self,
                expected=f"{self.target} reports {self.fault_name} active",
                seen=f"active: {', '.join(map(str, active)) or 'none'}",
            )
        return f"{self.target} reports {self.kind} active"


@register
@dataclass(frozen=True, kw_only=True)
class StallBeforeFirstToken(EngineFault):
    """The worker holds every matching request before its first token."""

    kind: ClassVar[str] = "stall_before_first_token"


@register
@dataclass(frozen=True, kw_only=True)
class StallAfterTokens(EngineFault):
    """Emit exactly ``tokens`` tokens, then hold the stream open: a half-open stream."""

    tokens: int = 3  # the stub requires it; three tokens prove the stream had started
    """How many tokens are sent before the stream stalls."""
    kind: ClassVar[str] = "stall_after_tokens"
    roles: ClassVar[tuple[str, ...]] = ("decode",)


@register
@dataclass(frozen=True, kw_only=True)
class StallBootstrap(EngineFault):
    """The decode never leaves bootstrapping: it holds matching requests in its preallocation
    queue and never contacts the prefill, which waits for its bootstrap deadline (sglang
    issue #39367). A revert lets them go on."""

    target: str = field(default="decode-0", kw_only=False)
    kind: ClassVar[str] = "stall_bootstrap"
    roles: ClassVar[tuple[str, ...]] = ("decode",)


@register
@dataclass(frozen=True, kw_only=True)
class StallKvTransfer(EngineFault):
    """The prefill accepts the decode's bootstrap handshake and never delivers the KV: the
    transfer channel is unreachable while every port answers and ``/health`` is 200 (sglang
    issue #23342). A revert sends the KV.

    ``midway=True``: the transfer starts (the head and part of the KV go out) and its end
    never comes, so the decode's receiver is in ``KVPoll.Transferring``, not waiting for
    input (sglang pull request #31800)."""

    target: str = field(default="prefill-0", kw_only=False)
    midway: bool = stub_default("stall_kv_transfer", "midway")
    """Send the head and part of the KV before the stall: the transfer has started."""
    kind: ClassVar[str] = "stall_kv_transfer"
    roles: ClassVar[tuple[str, ...]] = ("prefill",)


@register
@dataclass(frozen=True, kw_only=True)
class PinOnAbort(EngineFault):
    """An aborted request never releases its prefill in-flight slot (incident 3)."""

    # kw_only=False: positional like every fault's target, PinOnAbort("prefill-1").
    target: str = field(default="prefill-0", kw_only=False)
    kind: ClassVar[str] = "pin_on_abort"
    roles: ClassVar[tuple[str, ...]] = ("prefill",)


@register
@dataclass(frozen=True, kw_only=True)
class Serialize(EngineFault):
    """Decode runs one request at a time; the rest queue (incident 5)."""

    target: str = field(default="decode-0", kw_only=False)
    kind: ClassVar[str] = "serialize"
    roles: ClassVar[tuple[str, ...]] = ("decode",)


@register
@dataclass(frozen=True, kw_only=True)
class ErrorStatus(EngineFault):
    """The worker answers matching requests with HTTP ``status`` and ``message``.

    ``ErrorStatus("prefill-0", first_n=1)`` is "the first attempt fails, smg replays it"; with
    ``probability`` (seeded by the stub's ``seed``) it is "a few 500s". ``after_kv_taken=True``
    errors only after the decode took the KV, so smg's replay runs the request twice: the
    non-idempotent replay of sglang issue #34572, which pull request #34570 forbids.
    """

    status: int = stub_default("error_status", "status")
    """The HTTP status of the error response."""
    message: str = stub_default("error_status", "message")
    """The error message in the response body."""
    first_n: int = stub_default("error_status", "first_n")
    """Error at most this many matching requests, the first ones; 0: no limit."""
    probability: float = stub_default("error_status", "probability")
    """The chance, 0 to 1, that a matching request errors (seeded by the stub's ``seed``)."""
    after_kv_taken: bool = stub_default("error_status", "after_kv_taken")
    """Answer with the error only after the decode took the KV (a prefill fault)."""
    delay_ms: float = stub_default("error_status", "delay_ms")
    """With ``after_kv_taken``, wait this much longer before the error, in milliseconds."""
    kind: ClassVar[str] = "error_status"


@register
@dataclass(frozen=True, kw_only=True)
class SlowTokens(EngineFault):
    """Tokens come every ``itl_ms`` milliseconds instead of the worker's own pace."""

    itl_ms: float = 200.0  # the stub requires it; 200 ms is slow enough to see in any test
    """The time between two tokens, in milliseconds."""
    kind: ClassVar[str] = "slow_tokens"


@register
@dataclass(frozen=True, kw_only=True)
class Crash(EngineFault):
    """The worker exits with ``exit_code`` on its next matching request; revert restarts it."""

    exit_code: int = stub_default("crash", "exit_code")
    """The exit code the worker exits with."""
    kind: ClassVar[str] = "crash"

    def revert(self, topology: Topology) -> None:
        if topology.runtime.state(self.target) != "running":
            topology.restart(self.target)

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        # Under load the next matching request may already have come: the exit is the proof.
        try:
            return super().verify(topology, applied_at)
        except StubUnavailable:
            # It broke the connection as it crashed: give the runtime a moment to see the exit.
            exited = poll(
                lambda: topology.runtime.state(self.target) == "exited",
                timeout_s=2.0,
                interval_s=0.02,
            ).met
            if not exited:
                raise
        return f"{self.target} already exited on its next request"


@register
@dataclass(frozen=True, kw_only=True)
class RefuseBootstrap(EngineFault):
    """The prefill's bootstrap server refuses KV fetches (the decode fails the request)."""

    target: str = field(default="prefill-0", kw_only=False)
    kind: ClassVar[str] = "refuse_bootstrap"
    roles: ClassVar[tuple[str, ...]] = ("prefill",)


@register
@dataclass(frozen=True, kw_only=True)
class BlockingBootstrapCall(EngineFault):
    """The decode fetches a prefill's parallel info (``GET /route`` on its bootstrap server)
    on its scheduler loop, as SGLang did before pull request #34865: a synchronous call of
    ``timeout_ms``, tried up to ``retries`` times per bootstrap address (one try per scheduling
    cycle), during which no stream on the decode gets a token: every stream's inter-token
    latency becomes the call's timeout. Adding the fault empties the decode's cache of that
    info (its heartbeat evicted an address that stopped answering); a revert moves the fetch
    off the loop again (the fix). An address that answers costs one short call; one that
    does not answer (a black hole, not a refusal) freezes the loop for ``timeout_ms`` x
    ``retries``, then its requests fail."""

    target: str = field(default="decode-0", kw_only=False)
    timeout_ms: float = stub_default("blocking_bootstrap_call", "timeout_ms")
    """One attempt's timeout, in milliseconds (``requests.get(timeout=5)`` in SGLang)."""
    retries: int = stub_default("blocking_bootstrap_call", "retries")
    """Attempts per bootstrap address before its requests fail (SGLang's 15)."""
    kind: ClassVar[str] = "blocking_bootstrap_call"
    roles: ClassVar[tuple[str, ...]] = ("decode",)


@register
@dataclass(frozen=True, kw_only=True)
class TimeoutSkipsTransferring(EngineFault):
    """The decode's transfer timeout is checked only while a request waits for its KV to start
    (``KVPoll.WaitingForInput``), never once the transfer has started (``Transferring``):
    sglang pull request #31800, vLLM issue #35943. A transfer whose end never comes never
    fails, and its preallocation slot stays taken. A revert arms the timeout in every state
    (the fix)."""

    target: str = field(default="decode-0", kw_only=False)
    kind: ClassVar[str] = "timeout_skips_transferring"
    roles: ClassVar[tuple[str, ...]] = ("decode",)


@register
@dataclass(frozen=True, kw_only=True)
class LeakSlot(EngineFault):
    """Every ``every``-th request the decode completes is answered in full and never given
    back: it keeps its running slot and stays in ``num_running_reqs``. A planted leak (the
    soak's self-test, ``bench/soak.py``); a revert stops the leaking, a reset frees what
    leaked."""

    target: str = field(default="decode-0", kw_only=False)
    every: int = 100  # the stub requires it; one in a hundred shows within minutes
    """Leak one request of this many (counted per fault, over matching requests)."""
    kind: ClassVar[str] = "leak_slot"
    roles: ClassVar[tuple[str, ...]] = ("decode",)


@register
@dataclass(frozen=True, kw_only=True)
class FreezeEngineLoop(EngineFault):
    """The worker's engine loop stops while its HTTP server runs on: ``/health`` answers 200,
    ``/metrics`` shows the held requests where they stopped (running ones as running), and
    each request stops at its next step: no admission, no prefill, no KV transfer started or
    handed over, no token, no engine deadline. vLLM's EngineCore under SIGSTOP, on a stub
    (``PauseEngineProcess`` applies this there). A revert resumes every held request where it
    stopped. With ``origin``, only that origin's requests are held."""

    kind: ClassVar[str] = "freeze_engine_loop"
