"""Hooks other plugins and conftests can implement."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge
    from pytest_wedge.runtime import Runtime

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_wedge_make_runtime(name: str, artifacts_dir: str, session_id: str) -> Runtime | None:
    """Return a Runtime for ``name`` (e.g. a Kubernetes runtime), or None to pass."""


@hookspec
def pytest_wedge_diagnose(wedge: Wedge, origin: str) -> list[str] | None:
    """Add evidence lines of your own to a diagnosis (shown in the wedge report)."""


@hookspec
def pytest_wedge_report(wedge: Wedge, report: dict[str, Any]) -> None:
    """Inspect or extend the wedge report before it is written and shown."""
