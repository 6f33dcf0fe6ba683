"""The session header and bring-up progress in pytest's terminal; both cheap, neither fails a
run (Toxiproxy's version is asked once per binary and cached)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_wedge.errors import WedgeError
from pytest_wedge.plugin.state import PLUGIN_KEY, open_handle

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge
    from pytest_wedge.spec.topology import TopologySpec

CACHE_KEY = "wedge/binary-versions"
PROGRESS_AFTER_S = 1.0


def header_lines(config: pytest.Config) -> list[str]:
    """``wedge:`` lines for pytest's header: runtime, router, Toxiproxy and artifacts."""
    from pytest_wedge.runtime.binaries import package_version, smg_path

    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is None:
        return []
    runtime = plugin.settings["wedge_runtime"]
    artifacts = Path(plugin.value("wedge_artifacts")).absolute()
    kind = plugin.value("wedge_router")
    if kind == "smg":
        smg, missing = smg_path(), "smg not found (pip install 'smg>=1.13,<1.14')"
        router = f"smg {package_version('smg') or '(version unknown)'} at {smg}" if smg else missing
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
        version = _cached_version(config, found.path) or "(version unknown)"
        lines.append(f"wedge: toxiproxy-server {version} at {found.path} (from {found.source})")
    lines.append(f"wedge: artifacts {artifacts}")
    return lines


def _cached_version(config: pytest.Config, path: str) -> str | None:
    """``binary_version``, remembered in pytest's cache when it is enabled."""
    from pytest_wedge.runtime.binaries import binary_version

    cache = getattr(config, "cache", None)
    if cache is None:
        return binary_version(path)
    stored = cache.get(CACHE_KEY, {})
    versions = dict(stored) if isinstance(stored, dict) else {}
    version = binary_version(path, cache=versions)
    if versions != stored:
        cache.set(CACHE_KEY, versions)
    return version


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
    """Say ``wedge: <what> ...`` once the block has taken ``after_s``, and how it ended; a quick
    block prints nothing."""
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


def open_with_progress(item: pytest.Item, spec: TopologySpec, runtime: str | None) -> Wedge:
    """``open_handle``, saying on the terminal what it waits for when that takes a while."""
    plugin = item.config.stash.get(PLUGIN_KEY, None)
    name = runtime or (plugin.value("wedge_runtime") if plugin is not None else "process")
    what = f"bringing up {spec.prefill} prefill + {spec.decode} decode on the {name} runtime"
    with bring_up(item.config, what):
        return open_handle(item, spec, runtime)
