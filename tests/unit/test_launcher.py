"""The process runtime's one way to start a process: our stub is forked, the rest spawned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pytest_wedge.runtime.launcher import Launcher, stub_args
from pytest_wedge.spec.component import ComponentSpec


def test_only_our_stub_module_is_forked() -> None:
    python = sys.executable
    assert stub_args((python, "-m", "pytest_wedge.stubs", "--role", "decode")) == [
        "--role",
        "decode",
    ]
    assert stub_args((python, "-m", "pytest_wedge.stubs.forkserver")) is None
    assert stub_args(("/opt/engine/serve", "--port", "9000")) is None


def test_a_spawned_child_carries_the_tags_and_writes_its_log(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path, {"PYTEST_WEDGE_SESSION": "s-1"})
    log = tmp_path / "c.log"
    code = "import os; print(os.environ['PYTEST_WEDGE_SESSION'], os.getsid(0) == os.getpid())"
    component = ComponentSpec("c", "router", (sys.executable, "-c", code), ready_url="")
    try:
        proc = launcher.launch(component, log)
        assert isinstance(proc, subprocess.Popen)
        assert proc.wait(timeout=30) == 0
    finally:
        launcher.close()
    assert log.read_text().split() == ["s-1", "True"]  # its own session, so its own group


def test_a_foreign_stub_command_is_spawned_as_written(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path, {})
    argv = (sys.executable, "-m", "pytest_wedge.stubs", "--help")
    component = ComponentSpec("prefill-0", "prefill", argv, ready_url="", foreign=True)
    try:
        proc = launcher.launch(component, tmp_path / "p.log")
        assert isinstance(proc, subprocess.Popen)  # not forked by the stub fork server
        assert proc.wait(timeout=60) == 0
    finally:
        launcher.close()
