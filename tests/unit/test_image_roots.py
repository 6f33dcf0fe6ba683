"""What a program outside the base image brings into it, and whether the image has a program
(``runtime/programs.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.runtime.programs import CONTAINER_PATH, check_bare_name, in_image, program_roots


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


def test_a_program_through_a_symlinked_venv_is_found_by_its_real_path(tmp_path: Path) -> None:
    real = tmp_path / "shared-venv"
    (real / "bin").mkdir(parents=True)
    (real / "bin" / "smg").write_text("")
    (tmp_path / ".venv").symlink_to(real)
    paths = {str(real / "bin" / "smg")}  # how the image lists a file reached through a link
    assert in_image(str(tmp_path / ".venv" / "bin" / "smg"), paths)
    assert not in_image(str(tmp_path / ".venv" / "bin" / "other"), paths)


def test_a_bare_name_is_looked_up_on_the_images_path() -> None:
    venv_python = os.path.realpath(Path(CONTAINER_PATH[0]) / Path(sys.executable).name)
    check_bare_name("router", Path(sys.executable).name, {venv_python}, "img:1")  # found: no error
    check_bare_name("router", "./relative/prog", set(), "img:1")  # not a bare name: not judged here
    with pytest.raises(ConfigError) as raised:
        check_bare_name("router", "my-router", {venv_python}, "pytest-wedge-local:abc")
    text = str(raised.value)
    assert "router's program 'my-router' is not in the docker image" in text
    assert "pytest-wedge-local:abc" in text and ":".join(CONTAINER_PATH) in text
    assert "To fix this: give router's command its absolute path" in text


def test_the_import_waits_longer_than_quick_calls_and_gives_their_timeout_back() -> None:
    # A loaded daemon answered `docker import` after the client's 10 s per-call timeout.
    from types import SimpleNamespace

    from pytest_wedge.runtime.images import IMPORT_READ_TIMEOUT_S, _read_timeout

    api = SimpleNamespace(timeout=10.0)
    with pytest.raises(OSError), _read_timeout(api, IMPORT_READ_TIMEOUT_S):
        assert api.timeout == IMPORT_READ_TIMEOUT_S
        raise OSError("the daemon went away")
    assert api.timeout == 10.0
    unbounded = SimpleNamespace(timeout=None)
    with _read_timeout(unbounded, IMPORT_READ_TIMEOUT_S):
        assert unbounded.timeout is None
