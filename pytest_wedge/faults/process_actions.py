"""Component faults, carried out by the runtime: pause, kill, graceful stop, restart, PD-pair
restarts. Each verifies itself from the kernel's or the runtime's view right after."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import psutil

from pytest_wedge.errors import ConfigError
from pytest_wedge.evidence.parse import process_state
from pytest_wedge.faults.engine import FreezeEngineLoop
from pytest_wedge.faults.fault import Fault, FaultNotApplied
from pytest_wedge.faults.registry import register
from pytest_wedge.runtime.interface import wait_stopped
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


def _process_tree(pid: int | None) -> list[psutil.Process]:
    if pid is None:
        return []
    try:
        parent = psutil.Process(pid)
        return [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return []


def _statuses(processes: list[psutil.Process]) -> list[str]:
    statuses: list[str] = []
    for process in processes:
        try:
            statuses.append(process.status())
        except psutil.Error:
            statuses.append("gone")
    return statuses


def verify_gone(fault: Fault, topology: Topology) -> str:
    """The component's process has exited (the runtime says so, and its PID is gone)."""
    state, pid = topology.runtime.state(fault.target), topology.runtime.pid(fault.target)
    if state == "running" or state == "paused" or (pid is not None and psutil.pid_exists(pid)):
        raise FaultNotApplied(
            fault, expected=f"{fault.target}'s process gone", seen=f"{state}, pid {pid}"
        )
    code = topology.runtime.exit_code(fault.target)
    return f"{fault.target} exited" + (f" (exit status {code})" if code is not None else "")


def verify_restarted(fault: Fault, names: list[str], topology: Topology, since: float) -> str:
    """Each of ``names`` runs a process started after ``since`` that answers its ready URL."""
    seen = []
    for name in names:
        pid = topology.runtime.pid(name)
        _, started = process_state(pid)
        # The kernel's clocks count in ticks (10 ms): allow a few of rounding.
        new = started is not None and started >= since - 0.05
        url = topology.components[name].ready_url
        try:
            answered = topology.http.get(url, timeout=2.0).status_code
        except httpx.HTTPError as exc:
            answered = 0
            seen.append(f"{name}: pid {pid}, {url} {type(exc).__name__}")
        if not new or answered != 200:
            raise FaultNotApplied(
                fault,
                expected=f"{name} a new process (started after the fault) that answers {url}",
                seen=f"pid {pid} {'new' if new else 'not new'}, {url} answered {answered or 'nothing'}",
            )
        seen.append(f"{name} new pid {pid}")
    return ", ".join(seen) + " answering"


@register
@dataclass(frozen=True)
class Pause(ComponentFault):
    """SIGSTOP (or ``docker pause``): TCP still accepts, nothing answers. Reverted by resume."""

    def apply(self, topology: Topology) -> None:
        check_started_by_us([self.target], topology)
        topology.runtime.pause(self.target)

    def revert(self, topology: Topology) -> None:
        topology.runtime.resume(self.target)

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        state = topology.runtime.state(self.target)
        if topology.runtime.name != "process":  # a frozen cgroup shows no T: the runtime's word
            if state != "paused":
                raise FaultNotApplied(self, expected=f"{self.target} paused", seen=state)
            return f"{self.target} paused ({topology.runtime.name})"
        statuses = _statuses(_process_tree(topology.runtime.pid(self.target)))
        if not statuses or any(s != psutil.STATUS_STOPPED for s in statuses):
            raise FaultNotApplied(
                self,
                expected=f"every process of {self.target} stopped (state T)",
                seen=f"runtime: {state}; processes: {', '.join(statuses) or 'none'}",
                fix=f"a Pause needs {self.target} running: check that nothing stopped it before",
            )
        return f"{len(statuses)} process(es) of {self.target} stopped (T)"


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

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        return verify_gone(self, topology)


@register
@dataclass(frozen=True)
class Terminate(ComponentFault):
    """SIGTERM (``docker stop``): a graceful stop, as a rollout or a node drain does; the
    component may finish or fail what it holds before it exits, SIGKILL after ``grace_s`` (a
    pod's terminationGracePeriodSeconds). A stub drains its requests in flight on SIGTERM with
    ``stub = { sigterm_drain_s = N }``. Reverting starts it again if it is still down."""

    grace_s: float = 2.0
    """Seconds from SIGTERM to SIGKILL; the component may exit sooner (Docker: whole
    seconds)."""

    def apply(self, topology: Topology) -> None:
        check_started_by_us([self.target], topology)
        topology.runtime.stop(self.target, grace_s=self.grace_s)

    def revert(self, topology: Topology) -> None:
        if topology.runtime.state(self.target) != "running":
            topology.restart(self.target)

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        return verify_gone(self, topology)


@register
@dataclass(frozen=True)
class Restart(ComponentFault):
    """Kill and start again, waiting until it is ready. A one-shot: nothing to revert."""

    def apply(self, topology: Topology) -> None:
        check_started_by_us([self.target], topology)
        topology.restart(self.target)

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        return verify_restarted(self, [self.target], topology, applied_at)


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
        if isinstance(given, (str, list)):
            object.__setattr__(
                self, "prefills", (given,) if isinstance(given, str) else tuple(given)
            )
        super().__post_init__()  # then the types: a tuple of names

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

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        return verify_restarted(self, [self.target], topology, applied_at)

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

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        return verify_restarted(self, topology.pd_pair(self.target), topology, applied_at)


# The processes of one vLLM engine (the vllm worker kind), by the titles vLLM gives them, the
# first one found: without multiprocessing in the engine (how the kind runs it) the model runs
# inside the EngineCore, which is then also the worker.
ENGINE_PROCESSES = {
    "api-server": (),
    "engine-core": ("VLLM::EngineCore",),
    "worker": ("VLLM::Worker", "VLLM::EngineCore"),
}


def engine_processes(fault: Fault, process: str, topology: Topology) -> list[psutil.Process]:
    """The processes of ``fault.target``'s vLLM engine named ``process`` (its API server is the
    process pytest-wedge started; the others are titled by vLLM)."""
    check_started_by_us([fault.target], topology)
    if topology.spec.worker(fault.target).kind != "vllm" or process not in ENGINE_PROCESSES:
        raise ConfigError(
            f"{type(fault).__name__} acts on one process of a vllm worker",
            facts={
                "target": fault.target,
                "its kind": topology.spec.worker(fault.target).kind,
                "process": process,
                "processes": ", ".join(ENGINE_PROCESSES),
            },
            fix="target a worker of kind 'vllm' (or a stub, for engine-core or worker); for a "
            "whole worker use Pause or Kill",
        )
    tree = _process_tree(topology.runtime.pid(fault.target))
    if process == "api-server":
        return tree[:1]
    titles = ENGINE_PROCESSES[process]
    for title in titles:
        found = []
        for candidate in tree[1:]:
            try:
                if " ".join(candidate.cmdline()).startswith(title):
                    found.append(candidate)
            except psutil.Error:
                continue
        if found:
            return found
    wanted = " or ".join(titles)
    raise FaultNotApplied(fault, expected=f"a {wanted} process", seen="none in the engine")


@register
@dataclass(frozen=True)
class PauseEngineProcess(ComponentFault):
    """SIGSTOP of one process of a vLLM engine (``process``: ``api-server``, ``engine-core`` or
    ``worker``, the process that runs the model: the EngineCore as the vllm kind runs it, a
    ``VLLM::Worker`` where the engine has one). With it stopped the API server still answers
    ``/health`` 200 and serves ``/metrics`` frozen while nothing is generated. Reverted by
    SIGCONT.

    A stub worker is one process: there ``engine-core`` and ``worker`` freeze its engine loop
    (``FreezeEngineLoop``, through its control API) with the same signs, and ``api-server`` is
    refused."""

    process: str = "engine-core"
    """``api-server``, ``engine-core`` or ``worker``."""

    def _stub_freeze(self, topology: Topology) -> FreezeEngineLoop | None:
        """On a stub worker, the stub fault that stands for this one; None on any other."""
        check_started_by_us([self.target], topology)
        stub = self.target != "router" and topology.spec.worker(self.target).kind == "stub"
        if not stub or self.process not in ENGINE_PROCESSES:
            return None
        if self.process == "api-server":
            raise ConfigError(
                f"PauseEngineProcess cannot stop the API server of {self.target} alone: a stub's "
                "API server and engine are one process",
                facts={"target": self.target, "its kind": "stub", "process": self.process},
                fix="use Pause for the whole worker, or process='engine-core' to stop its "
                "engine loop while its HTTP server answers",
            )
        freeze = FreezeEngineLoop(self.target)
        # Named after this fault's instance: apply, verify and revert reach one stub fault.
        object.__setattr__(freeze, "instance_id", self.instance_id)
        return freeze

    def apply(self, topology: Topology) -> None:
        if (freeze := self._stub_freeze(topology)) is not None:
            freeze.apply(topology)
            return
        for found in engine_processes(self, self.process, topology):
            found.suspend()
            # SIGSTOP acts when the kernel next schedules the process, as for a whole Pause.
            wait_stopped(f"{self.target} {self.process}", found.pid)

    def revert(self, topology: Topology) -> None:
        if (freeze := self._stub_freeze(topology)) is not None:
            freeze.revert(topology)
            return
        for found in engine_processes(self, self.process, topology):
            found.resume()

    def describe(self) -> str:
        return f"PauseEngineProcess on {self.target} ({self.process})"

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        if (freeze := self._stub_freeze(topology)) is not None:
            return freeze.verify(topology, applied_at)
        statuses = _statuses(engine_processes(self, self.process, topology))
        if any(s != psutil.STATUS_STOPPED for s in statuses):
            raise FaultNotApplied(
                self, expected=f"{self.process} of {self.target} stopped (T)", seen=str(statuses)
            )
        return f"{self.process} of {self.target} stopped (T); the rest of the engine runs"
