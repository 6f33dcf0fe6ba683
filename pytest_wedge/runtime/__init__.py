"""How components run: local processes (default) or Docker containers, behind one protocol.
The names load on first use: the header reads ``runtime.binaries`` in every pytest run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_wedge.errors import AlreadyRunningError, ComponentControlError
    from pytest_wedge.runtime.interface import ComponentState, Runtime, wait_ready

__all__ = [
    "AlreadyRunningError",
    "ComponentControlError",
    "ComponentState",
    "Runtime",
    "make_runtime",
    "wait_ready",
]


def __getattr__(name: str) -> Any:
    if name in ("AlreadyRunningError", "ComponentControlError"):
        from pytest_wedge import errors

        return getattr(errors, name)
    if name in ("ComponentState", "Runtime", "wait_ready"):
        from pytest_wedge.runtime import interface

        return getattr(interface, name)
    raise AttributeError(f"module 'pytest_wedge.runtime' has no attribute {name!r}")


def make_runtime(name: str, artifacts_dir: str, session_id: str) -> Runtime:
    """Built-in runtimes by name. Plugins add others through ``pytest_wedge_make_runtime``."""
    from pathlib import Path

    from pytest_wedge.errors import ConfigError

    if name == "process":
        from pytest_wedge.runtime.process import ProcessRuntime

        return ProcessRuntime(Path(artifacts_dir), session_id)
    if name == "docker":
        from pytest_wedge.runtime.docker import DockerRuntime

        runtime: Runtime = DockerRuntime(Path(artifacts_dir), session_id)
        return runtime
    raise ConfigError(
        f"Unknown runtime {name!r}",
        facts={"known runtimes": "process, docker"},
        fix="pass --wedge-runtime=process or --wedge-runtime=docker",
    )
