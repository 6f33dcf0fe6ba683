"""What pytest-wedge prints in pytest's terminal: the session header, and bring-up progress.

Both stay cheap and never fail a run: the header reads package metadata and asks
toxiproxy-server for its version once per binary (remembered in pytest's cache when it is
enabled), and progress appears only when a bring-up takes longer than a second.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_wedge.errors import WedgeError
from pytest_wedge.plugin.state import PLUGIN_KEY

CACHE_KEY = "wedge/binary-versions"
PROGRESS_AFTER_S = 1.0


def header_lines(config: pytest.Config) -> list[str]:
    """``wedge:`` lines for pytest's header: runtime, router, Toxiproxy and artifacts."""
    from pytest_wedge.runtime.binaries import binary_version, package_version, smg_path

    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is None:
        return []
    runtime = plugin.settings["wedge_runtime"]
    artifacts = Path(plugin.value("wedge_artifacts")).absolute()
    kind = plugin.value("wedge_router")
    if kind == "smg":
        smg = smg_path()
        router = (
            f"smg {package_version('smg') or '(version unknown)'} at {smg}"
            if smg
            else "smg not found (pip install 'smg>=1.13,<1.14')"
        )
    else:
        from pytest_wedge.topology.what_ran import describe_kind

        router = describe_kind(kind)
    lines = [
        f"wedge: runtime {runtime.value} ({runtime.source}), router {router} (PD mode)",
        f"wedge: workers: pytest-wedge {package_version('pytest-wedge') or '?'} stubs "
        f"(python -m pytest_wedge.stubs; sglang protocol unless a topology names vllm)",
    ]
    try:
        found = plugin.toxiproxy()
    except WedgeError as exc:
        lines.append(f"wedge: toxiproxy-server not found: {getattr(exc, 'fix', '')}")
    else:
        cache = _versions_cache(config)
        version = binary_version(found.path, cache=cache)
        _store_versions_cache(config, cache)
        lines.append(
            f"wedge: toxiproxy-server {version or '(version unknown)'} at "
            f"{found.path} (from {found.source})"
        )
    lines.append(f"wedge: artifacts {artifacts}")
    return lines


def _versions_cache(config: pytest.Config) -> dict[str, Any] | None:
    cache = getattr(config, "cache", None)
    if cache is None:
        return None
    stored = cache.get(CACHE_KEY, {})
    return dict(stored) if isinstance(stored, dict) else {}


def _store_versions_cache(config: pytest.Config, versions: dict[str, Any] | None) -> None:
    cache = getattr(config, "cache", None)
    if cache is not None and versions is not None and versions != cache.get(CACHE_KEY, {}):
        cache.set(CACHE_KEY, versions)


def _write_line(config: pytest.Config, text: str) -> None:
    """One line on the terminal, also from inside a test (output capture is suspended)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    capture = config.pluginmanager.get_plugin("capturemanager")
    context = (
        capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
    )
    with context:
        reporter.write_line(text)


@contextlib.contextmanager
def bring_up(config: pytest.Config, what: str, after_s: float | None = None) -> Iterator[None]:
    """Say ``wedge: <what> ...`` once the block has taken ``after_s`` (default
    ``PROGRESS_AFTER_S``), and how it ended.

    A quick block (a topology that is already up and only reset) prints nothing.
    """
    after_s = PROGRESS_AFTER_S if after_s is None else after_s
    lock = threading.Lock()
    state = {"done": False, "shown": False}
    started = time.monotonic()

    def announce() -> None:
        with lock:
            if state["done"]:
                return
            state["shown"] = True
            _write_line(config, f"wedge: {what} ...")

    timer = threading.Timer(after_s, announce)
    timer.daemon = True
    timer.start()
    outcome = "failed"
    try:
        yield
        outcome = "ready"
    finally:
        with lock:
            state["done"] = True
            timer.cancel()
        if state["shown"]:
            _write_line(
                config, f"wedge: {what}: {outcome} after {time.monotonic() - started:.1f} s"
            )


def describe_bring_up(config: pytest.Config, prefill: int, decode: int, runtime: str | None) -> str:
    plugin = config.stash.get(PLUGIN_KEY, None)
    name = runtime or (plugin.value("wedge_runtime") if plugin is not None else "process")
    return f"bringing up {prefill} prefill + {decode} decode on the {name} runtime"
