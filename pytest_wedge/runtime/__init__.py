"""How components run: local processes (default) or Docker containers, behind one protocol."""

from pytest_wedge.errors import AlreadyRunningError, ComponentControlError
from pytest_wedge.runtime.base import ComponentState, Runtime, wait_ready

__all__ = [
    "AlreadyRunningError",
    "ComponentControlError",
    "ComponentState",
    "Runtime",
    "make_runtime",
    "wait_ready",
]


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
