"""The isolated router environments: made once, then reused with no installer run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pytest_wedge.routers.adapters import SGLANG_ROUTER
from pytest_wedge.routers.envs import MARKER, cache_root, ensure_env, env_path, ready_env

pytestmark = pytest.mark.timeout(600)

# A fresh interpreter that records every process it starts (Python's audit hook sees each
# subprocess.Popen and os.exec*/spawn) and then asks for the environment.
REUSE = textwrap.dedent(
    """
    import sys
    started = []
    sys.addaudithook(lambda event, args: started.append(repr(args)) if event in
                     ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn") else None)
    from pytest_wedge.routers.envs import ensure_env
    env = ensure_env(sys.argv[1], sys.argv[2])
    print(env.path)
    print("STARTED", len(started), started)
    """
)


def test_a_second_use_installs_nothing() -> None:
    kind = SGLANG_ROUTER
    env = ensure_env(kind.package, kind.version)  # made here on a clean machine, else reused
    marker = (env.path / MARKER).stat().st_mtime_ns
    done = subprocess.run(
        [sys.executable, "-c", REUSE, kind.package, kind.version],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    path, started = done.stdout.splitlines()[:2]
    assert path == str(env.path)
    assert started.startswith("STARTED 0 "), started  # no pip, no venv: nothing at all ran
    assert (env.path / MARKER).stat().st_mtime_ns == marker
    assert env.path == env_path(kind.package, kind.version, cache_root())
    assert (env.path / "bin" / kind.script).is_file()


def test_a_half_made_environment_is_not_taken_for_a_ready_one(tmp_path) -> None:
    """A creation killed half-way leaves a folder without the marker: it is not reused."""
    (env_path("sglang-router", "0.3.2", tmp_path) / "bin").mkdir(parents=True)
    assert ready_env("sglang-router", "0.3.2", tmp_path) is None


def test_the_cache_dir_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("PYTEST_WEDGE_ENV_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "pytest-wedge" / "envs"
    monkeypatch.setenv("PYTEST_WEDGE_ENV_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"


def test_two_processes_creating_at_once_install_once(tmp_path) -> None:
    """Two xdist workers on a clean cache: the lock makes one venv, with one install."""
    code = (
        "import sys; from pathlib import Path; from pytest_wedge.routers.envs import "
        "ensure_env; print(ensure_env('iniconfig', '2.0.0', Path(sys.argv[1])).path)"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0].strip() for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert outputs[0] == outputs[1] == str(tmp_path / "iniconfig-2.0.0")
    log = (tmp_path / "iniconfig-2.0.0.install.log").read_text()
    assert log.count(" install ") == 1, log  # one install, by whichever worker got the lock
    assert (tmp_path / "iniconfig-2.0.0" / MARKER).is_file()
