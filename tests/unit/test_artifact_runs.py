"""Artifacts like pytest's ``tmp_path``: one folder per run, ``latest``, the newest kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_wedge.diagnostics.artifacts import _copy_window
from pytest_wedge.errors import ConfigError
from pytest_wedge.plugin.run_folders import make_run_dir, release_run_dir, this_process
from pytest_wedge.plugin.settings import anchored, resolve
from pytest_wedge.plugin.state import artifacts_folder

_runs = iter(range(1, 1000))


def finished_run(base: Path, keep: int = 3) -> Path:
    """A run by another process, which has ended (a token no live process has)."""
    owner = f"{next(_runs)} 0"
    run = make_run_dir(base, keep=keep, owner=owner)
    release_run_dir(base, owner)
    return run


def test_each_run_gets_the_next_folder_and_latest_points_at_it(tmp_path: Path) -> None:
    first, second = finished_run(tmp_path), finished_run(tmp_path)
    assert (first.name, second.name) == ("run-1", "run-2")
    assert (tmp_path / "latest").resolve() == second
    assert (tmp_path / ".gitignore").read_text().splitlines()[-1] == "*"


def test_only_the_newest_runs_are_kept(tmp_path: Path) -> None:
    for _ in range(5):
        finished_run(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.glob("run-*")) == ["run-3", "run-4", "run-5"]


def test_zero_keeps_every_run(tmp_path: Path) -> None:
    for _ in range(4):
        finished_run(tmp_path, keep=0)
    assert len(list(tmp_path.glob("run-*"))) == 4


def test_a_run_still_going_is_never_removed(tmp_path: Path) -> None:
    going = make_run_dir(tmp_path, keep=1)  # this process owns it: its lock is live
    finished_run(tmp_path, keep=1)
    assert going.is_dir()
    release_run_dir(tmp_path)
    finished_run(tmp_path, keep=1)
    assert not going.exists()


def test_workers_of_one_owner_share_its_run(tmp_path: Path) -> None:
    """xdist: each worker asks with the controller's token; the first one makes the folder."""
    controller = this_process()
    first = make_run_dir(tmp_path, owner=controller)
    assert make_run_dir(tmp_path, owner=controller) == first
    assert finished_run(tmp_path) != first


def test_a_crashed_runs_stale_lock_does_not_keep_it(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    crashed = make_run_dir(tmp_path, keep=1, owner=f"{dead.stdout.strip()} 0")  # never released
    finished_run(tmp_path, keep=1)
    assert not crashed.exists()


def test_keep_runs_resolves_as_a_count_from_ini_and_environment() -> None:
    assert resolve("wedge_keep_runs", ini=lambda name: "5", environ={}).value == 5
    from_env = resolve("wedge_keep_runs", environ={"PYTEST_WEDGE_KEEP_RUNS": "0"})
    assert (from_env.value, from_env.source) == (0, "environment (PYTEST_WEDGE_KEEP_RUNS)")
    assert resolve("wedge_keep_runs", environ={}).value == 3
    with pytest.raises(ConfigError, match="wedge_keep_runs"):
        resolve("wedge_keep_runs", cli="-1", environ={})


def test_the_artifacts_directory_is_anchored_at_the_rootdir_or_the_ini_files_folder(
    tmp_path: Path,
) -> None:
    """Whatever the working directory: a relative value from the ini file is relative to its
    folder, any other relative value to the rootdir, and an absolute one stays."""
    rootdir, inifile = tmp_path / "root", tmp_path / "config" / "pytest.ini"

    def where(**sources: object) -> str:
        setting = resolve("wedge_artifacts", environ={}, **sources)  # type: ignore[arg-type]
        return str(anchored(setting, rootdir=rootdir, inifile=inifile).value)

    assert where() == str(rootdir / ".wedge-artifacts")
    assert where(cli="out") == str(rootdir / "out")
    assert where(ini=lambda name: "ci/out") == str(tmp_path / "config" / "ci" / "out")
    assert where(cli="/abs/out") == "/abs/out"
    from_env = resolve("wedge_artifacts", environ={"PYTEST_WEDGE_ARTIFACTS": "env-out"})
    anchored_env = anchored(from_env, rootdir=rootdir, inifile=None)
    assert (anchored_env.value, anchored_env.source) == (
        str(rootdir / "env-out"),
        "environment (PYTEST_WEDGE_ARTIFACTS)",
    )


def test_a_tests_second_topology_gets_its_own_folder(tmp_path: Path) -> None:
    first = artifacts_folder(tmp_path, "tests/test_x.py::test_two[a b]", 0)
    second = artifacts_folder(tmp_path, "tests/test_x.py::test_two[a b]", 1)
    assert first.name == "tests_test_x.py_test_two_a_b_"
    assert second.name == f"{first.name}@2"


def test_a_log_is_cut_to_the_tests_window(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    log.write_bytes(b"--- start: smg\nearlier test\n")
    offset = log.stat().st_size
    with log.open("ab") as out:
        out.write(b"this test\n")
    _copy_window(log, tmp_path / "copy.log", offset)
    lines = (tmp_path / "copy.log").read_text().splitlines()
    assert lines == [f"[... {offset} bytes before this test left out ...]", "this test"]
    os.truncate(log, 4)  # a new session's log, shorter than the offset: all of it is new
    _copy_window(log, tmp_path / "copy.log", offset)
    assert (tmp_path / "copy.log").read_text() == "--- "
