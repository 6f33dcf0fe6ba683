"""What a program outside the base image brings into it (``runtime/images.program_roots``)."""

from __future__ import annotations

from pathlib import Path

from pytest_wedge.runtime.images import program_roots


def test_a_venv_console_script_brings_its_whole_venv(tmp_path: Path) -> None:
    venv = tmp_path / "sglang-router-0.3.2"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    script = str(venv / "bin" / "sglang-router")
    assert program_roots(script) == [script, str(venv)]


def test_a_plain_binary_brings_only_itself(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    binary = str(tmp_path / "bin" / "toxiproxy-server")
    assert program_roots(binary) == [binary]
