"""What each component of a topology is: its kind, binary, version and how it started.

For the session header and every wedge report (``glue/report.py`` calls
``describe_components(topology)``): a verdict about ``--request-timeout-secs`` means one thing
for smg 1.13 and another for sglang-router 0.3.2, so the report must name which ran.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pytest_wedge.routers.adapters import RouterAdapter, RouterMetrics, adapter
from pytest_wedge.routers.envs import env_path, ready_env
from pytest_wedge.routers.kinds import BUILT_IN, RouterSpec


def router_metric_names(router: RouterSpec) -> RouterMetrics:
    """In-flight, health and breaker metric names of the router (by its dialect)."""
    return adapter(router.dialect).metrics


def router_adapter(router: RouterSpec) -> RouterAdapter:
    return adapter(router.dialect)


@dataclass(frozen=True)
class ComponentDescription:
    name: str
    kind: str
    binary: str
    version: str
    started: str  # how it started: "isolated venv ...", "command template", "not started ..."

    def line(self) -> str:
        return f"{self.name}: {self.kind} {self.version} ({self.binary}; {self.started})"


class _Component(Protocol):
    @property
    def argv(self) -> tuple[str, ...]: ...


class _Spec(Protocol):
    @property
    def router(self) -> RouterSpec: ...
    @property
    def worker_protocol(self) -> str: ...
    @property
    def prefill_names(self) -> list[str]: ...
    @property
    def decode_names(self) -> list[str]: ...


class DescribedTopology(Protocol):
    @property
    def spec(self) -> _Spec: ...
    @property
    def components(self) -> Mapping[str, _Component]: ...


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def describe_router(router: RouterSpec, argv: Sequence[str] = ()) -> ComponentDescription:
    binary = argv[0] if argv else "(not started)"
    if router.kind == "url":
        return ComponentDescription(
            "router",
            f"url ({router.like}-like)",
            router.url or "",
            "(version not known to pytest-wedge)",
            "already running; not started or stopped by pytest-wedge",
        )
    if router.kind == "command":
        return ComponentDescription("router", f"command ({router.like}-like)", binary,
                                    "(version not known to pytest-wedge)",
                                    "from the user's command template")  # fmt: skip
    kind = adapter(router.kind)
    if kind.isolated:
        env = ready_env(kind.package, kind.version)
        started = (
            f"built-in adapter, isolated venv {env.path}"
            if env
            else f"built-in adapter, venv {env_path(kind.package, kind.version)} not made"
        )
        version = kind.version if env else f"{kind.version} (pinned)"
    else:
        started, version = "built-in adapter, this environment", _version(kind.package)
    return ComponentDescription("router", kind.name, binary, version, started)


def describe_components(topology: DescribedTopology) -> list[ComponentDescription]:
    """One description per component: the router, then the workers."""
    spec = topology.spec
    router = topology.components.get("router")
    described = [describe_router(spec.router, router.argv if router else ())]
    for name in [*spec.prefill_names, *spec.decode_names]:
        component = topology.components.get(name)
        argv = component.argv if component else ()
        stub = "pytest_wedge.stubs" in argv
        kind = f"{spec.worker_protocol} stub" if stub else "command"
        described.append(ComponentDescription(
            name, kind, argv[0] if argv else "(not started)",
            _version("pytest-wedge") if stub else "(version not known to pytest-wedge)",
            "python -m pytest_wedge.stubs" if stub else "from the user's command",
        ))  # fmt: skip
    return described


def describe_kind(name: str) -> str:
    """The header's line for a router kind, before anything started."""
    if name not in BUILT_IN:
        return name
    kind = adapter(name)
    if not kind.isolated:
        return f"{name} {_version(kind.package)} (this environment)"
    env = ready_env(kind.package, kind.version)
    where = f"isolated venv {env.path}" if env else "isolated venv, made on first use"
    return f"{name} {kind.version} ({where})"


def unproxied(router: RouterSpec) -> list[str]:
    """Traffic of this router kind that does not cross a Toxiproxy link, so no fault reaches it."""
    lines = list(adapter(router.dialect).unproxied)
    if router.kind == "url":
        lines.append(
            "the router's own process: it is not started by pytest-wedge, so Pause, Kill and "
            "Restart of `router` and a router restart between tests are not available"
        )
    return lines


def describe_lines(topology: DescribedTopology) -> list[str]:
    """The components, one line each, then what cannot be proxied: for headers and reports."""
    lines = [d.line() for d in describe_components(topology)]
    lines += [f"not through Toxiproxy: {line}" for line in unproxied(topology.spec.router)]
    return lines
