"""What each component of a topology is (kind, binary, version, how it started), for the header
and every report: a verdict about a router flag means one thing on smg 1.13 and another on
sglang-router 0.3.2, so the report names which ran."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pytest_wedge.routers.adapters import RouterMetrics, adapter
from pytest_wedge.routers.envs import IsolatedEnv, env_path, ready_env
from pytest_wedge.routers.router_spec import BUILT_IN, RouterSpec
from pytest_wedge.routers.vllm_engine import PACKAGE as ENGINE
from pytest_wedge.routers.vllm_engine import VERSION as ENGINE_VERSION
from pytest_wedge.runtime.binaries import package_version
from pytest_wedge.spec.component import STUB_MODULE

if TYPE_CHECKING:  # the session header reads describe_kind: no HTTP client at plugin load
    from pytest_wedge.runtime.interface import Runtime
    from pytest_wedge.spec.topology import ComponentSpec, Executables, TopologySpec
    from pytest_wedge.topology.toxiproxy import ToxiproxyClient


def router_metric_names(router: RouterSpec) -> RouterMetrics:
    """In-flight, health and breaker metric names of the router (by its dialect)."""
    return adapter(router.dialect).metrics


UNKNOWN_VERSION = "(version not known to pytest-wedge)"
PUBLIC_ONLY = (
    "only its public endpoints are known (no ledger, no control API), so the locator "
    "had no worker ledger of it"
)


@dataclass(frozen=True)
class ComponentDescription:
    name: str
    kind: str
    binary: str
    version: str
    started: str  # how it started: "isolated venv ...", "command template", "not started ..."

    def line(self) -> str:
        return f"{self.name}: {self.kind} {self.version} ({self.binary}; {self.started})"

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


class DescribedTopology(Protocol):
    """What a description reads of a running topology (``Topology`` has it)."""

    spec: TopologySpec
    components: dict[str, ComponentSpec]
    runtime: Runtime
    exe: Executables
    toxiproxy: ToxiproxyClient


def _version(package: str) -> str:
    return package_version(package) or "(version unknown)"


def env_version(env: IsolatedEnv) -> str | None:
    """The version of ``env.package`` installed in the venv, read from its metadata (no
    interpreter is started, nothing is installed); None when it is not there."""
    for site in sorted(env.path.glob("lib/python*/site-packages")):
        for found in importlib.metadata.distributions(name=env.package, path=[str(site)]):
            return found.version
    return None


def describe_router(
    router: RouterSpec, argv: Sequence[str] = (), runtime: str = "process"
) -> ComponentDescription:
    binary = argv[0] if argv else "(not started)"
    on = f"on the {runtime} runtime"
    like = f"{router.kind} ({router.like}-like)"
    if router.kind == "url":
        started = "already running; not started or stopped by pytest-wedge"
        return ComponentDescription("router", like, router.url or "", UNKNOWN_VERSION, started)
    if router.kind == "command":
        template = " ".join(router.command)
        started = f"started by pytest-wedge from the user's command template {template!r}, {on}"
        return ComponentDescription("router", like, binary, UNKNOWN_VERSION, started)
    kind = adapter(router.kind)
    if kind.isolated:
        env = ready_env(kind.package, kind.version)
        # On docker the venv is copied into the image at its host path (runtime/images.py).
        copied = " (copied into the image)" if runtime == "docker" else ""
        started = (
            f"built-in adapter, isolated venv {env.path}{copied}, {on}"
            if env
            else f"built-in adapter, venv {env_path(kind.package, kind.version)} not made"
        )
        version = (env_version(env) or kind.version) if env else f"{kind.version} (pinned)"
    else:
        started, version = f"built-in adapter, this environment, {on}", _version(kind.package)
    return ComponentDescription("router", kind.name, binary, version, started)


def describe_worker(
    name: str,
    argv: Sequence[str],
    spec: TopologySpec,
    runtime: str = "process",
    foreign: bool = False,
) -> ComponentDescription:
    """A worker: a stub of either protocol (with or without its ledger), or a user's command
    (``foreign``: even one that launches our stub is known only by its public endpoints)."""
    if not argv:
        if foreign:  # a url worker: the user started it
            started = f"not started or stopped by pytest-wedge; {PUBLIC_ONLY}"
            return ComponentDescription(name, "url", "(already running)", UNKNOWN_VERSION, started)
        started = "not started by pytest-wedge"
        return ComponentDescription(name, "worker", "(not started)", UNKNOWN_VERSION, started)
    if spec.worker(name).kind == "vllm":
        started = f"the vllm worker kind, started by pytest-wedge on the {runtime} runtime in "
        started += (
            f"its own process group (API server, EngineCore running the model); {PUBLIC_ONLY}"
        )
        return ComponentDescription(name, "vllm", argv[0], f"{ENGINE} {ENGINE_VERSION}", started)
    if foreign or STUB_MODULE not in argv:
        started = f"started by pytest-wedge from the user's command {shlex.join(argv)!r}"
        started += f", on the {runtime} runtime; {PUBLIC_ONLY}"
        return ComponentDescription(name, "command", argv[0], UNKNOWN_VERSION, started)
    started = f"python -m {STUB_MODULE}, started by pytest-wedge on the {runtime} runtime"
    if not spec.stub.ledger:
        # Said here too, so nobody reads a location from public endpoints as ledger-backed.
        started += "; ledger-less (--ledgerless: no ledger, no control API), so the locator "
        started += "had no worker ledger of it"
    kind, version = (
        f"{spec.worker_protocol}-protocol stub",
        f"pytest-wedge {_version('pytest-wedge')}",
    )
    return ComponentDescription(name, kind, argv[0], version, started)


def describe_toxiproxy(topology: DescribedTopology) -> ComponentDescription:
    """The session's Toxiproxy, its version asked of its API (the binary may have changed)."""
    try:
        version = topology.toxiproxy.version()
    except Exception as exc:  # a report is best effort: say why instead of failing it
        version = f"(version unknown: {type(exc).__name__})"
    started = f"started by pytest-wedge for the session, on the {topology.runtime.name} runtime"
    binary = topology.exe.toxiproxy
    return ComponentDescription("toxiproxy", "toxiproxy-server", binary, version, started)


def describe_components(topology: DescribedTopology) -> list[ComponentDescription]:
    """One description per component: the router, the workers, then Toxiproxy."""
    spec, runtime = topology.spec, topology.runtime.name
    router = topology.components.get("router")
    described = [describe_router(spec.router, router.argv if router else (), runtime)]
    for name in [*spec.prefill_names, *spec.decode_names]:
        found = topology.components.get(name)
        foreign = found.foreign if found else name in spec.foreign_workers
        described.append(describe_worker(name, found.argv if found else (), spec, runtime, foreign))
    described.append(describe_toxiproxy(topology))
    return described


def describe_kind(name: str) -> str:
    """The header's line for a router kind, before anything started."""
    if name not in BUILT_IN:
        return name
    kind = adapter(name)
    if not kind.isolated:
        return f"{name} {_version(kind.package)} (this environment)"
    env = ready_env(kind.package, kind.version)
    if env is None:
        return f"{name} {kind.version} (isolated venv, made on first use)"
    return f"{name} {env_version(env) or kind.version} (isolated venv {env.path})"


def unproxied(router: RouterSpec, stub_protocol: str | None = None) -> list[str]:
    """Traffic of this router kind that no link (so no fault) reaches; the other-protocol lines
    are left out when ``stub_protocol`` is the router's own."""
    kind = adapter(router.dialect)
    lines = list(kind.unproxied)
    if stub_protocol is None or stub_protocol != router.worker_protocol:
        lines += kind.unproxied_other_protocol
    if router.kind == "url":
        lines.append(
            "the router's own process: it is not started by pytest-wedge, so Pause, Kill and "
            "Restart of `router` and a router restart between tests are not available"
        )
    return lines


def unproxied_workers(spec: TopologySpec) -> list[str]:
    """Traffic of command and url workers that a link carries only if they are told so."""
    lines = []
    decodes = [name for name in spec.foreign_workers if name.startswith("decode-")]
    if spec.real_engine_decodes:
        lines.append(
            "the KV itself: UCX's own TCP connections between the vLLM engines (NIXL reads "
            "the prefill's memory); only each decode's NIXL handshake (the side channel) "
            "crosses decode-j->prefill-i, so a fault there stops new pairings, not a "
            "transfer between engines that already shook hands"
        )
        decodes = []
    if decodes:
        kind = "url" if set(decodes) <= set(spec.url_workers) else "command"  # one kind a role
        lines.append(
            f"the KV traffic of {', '.join(decodes)} ({kind} workers) goes where "
            "the engine sends it: through decode-j->prefill-i only if its template "
            "points it at {prefill_bootstrap[i]} (a url decode: at its kv_listen "
            "ports); a transfer backend of its own (NIXL, Mooncake) is never "
            "proxied"
        )
    if spec.url_workers:
        lines.append(
            f"the processes of {', '.join(spec.url_workers)} (url workers): not "
            "started by pytest-wedge, so Pause, Kill and Restart of them and their "
            "restart between tests are not available"
        )
    return lines


def not_proxied(spec: TopologySpec) -> list[str]:
    """Everything of this topology that no link carries: the router's, then the workers'."""
    # Real engines speak the router's own protocol, whatever the stubs' would be.
    protocol = spec.router.worker_protocol if spec.real_engines else spec.stub.protocol
    return [*unproxied(spec.router, protocol), *unproxied_workers(spec)]


def describe_lines(topology: DescribedTopology) -> list[str]:
    """The components, one line each, then what cannot be proxied: for headers and reports."""
    lines = [d.line() for d in describe_components(topology)]
    lines += [f"not through Toxiproxy: {line}" for line in not_proxied(topology.spec)]
    return lines
