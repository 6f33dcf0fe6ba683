"""One artifacts folder per run, like pytest's ``tmp_path``: ``run-N``, a ``latest`` link, and
only the newest runs kept. A run's ``.lock`` names its owner process (``pid start``), so no run
removes a folder in use; under xdist the workers find the controller's run by that owner.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from pytest_wedge.routers.envs import exclusive_lock
from pytest_wedge.runtime.owner_tags import process_identity, same_process

RUN_PREFIX = "run-"
LATEST = "latest"
LOCK = ".lock"
RUNS_LOCK = ".runs.lock"
GITIGNORE_TEXT = "# Created by pytest-wedge: artifacts are not sources.\n*\n"
_RUN_NAME = re.compile(rf"^{RUN_PREFIX}(\d+)$")


def _numbered_runs(base: Path) -> list[tuple[int, Path]]:
    runs = []
    for entry in base.iterdir():
        match = _RUN_NAME.match(entry.name)
        if match and entry.is_dir() and not entry.is_symlink():
            runs.append((int(match.group(1)), entry))
    return sorted(runs)


def _owner_alive(run: Path) -> bool:
    """True when the process named in the run's lock still runs (a crash leaves a stale one)."""
    try:
        pid_text, _, started = (run / LOCK).read_text().partition(" ")
        return same_process(int(pid_text), started.strip())
    except (OSError, ValueError):
        return False


def _point_latest(base: Path, run: Path) -> None:
    """Replace ``latest`` atomically: a reader never sees it missing."""
    temporary = base / f".{LATEST}-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    temporary.symlink_to(run.name, target_is_directory=True)
    os.replace(temporary, base / LATEST)


def remove_old_runs(base: Path, keep: int, *, current: Path | None = None) -> list[Path]:
    """Remove all but the newest ``keep`` runs (0 keeps all), never the current run or one
    whose owner still runs; returns what was removed."""
    if keep <= 0:
        return []
    runs = [path for _, path in _numbered_runs(base)]
    removed = []
    for run in runs[: max(0, len(runs) - keep)]:
        if run == current or _owner_alive(run):
            continue
        shutil.rmtree(run, ignore_errors=True)
        removed.append(run)
    return removed


def this_process() -> str:
    """The owner token of a run made by this process: ``pid start-ticks-since-boot``."""
    return f"{os.getpid()} {process_identity(os.getpid())}"


def _run_of(root: Path, owner: str) -> Path | None:
    for _, run in reversed(_numbered_runs(root)):
        with contextlib.suppress(OSError):
            if (run / LOCK).read_text() == owner:
                return run
    return None


def make_run_dir(base: str | Path, keep: int = 3, *, owner: str | None = None) -> Path:
    """This run's folder: the one ``owner`` made (an xdist sibling's), else the next ``run-N``,
    with ``latest`` pointed at it and runs beyond the newest ``keep`` removed."""
    root = Path(base).absolute()
    root.mkdir(parents=True, exist_ok=True)
    owner = owner or this_process()
    with exclusive_lock(root / RUNS_LOCK):  # xdist workers start together
        found = _run_of(root, owner)
        if found is not None:
            return found
        gitignore = root / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text(GITIGNORE_TEXT)
        runs = _numbered_runs(root)
        run = root / f"{RUN_PREFIX}{runs[-1][0] + 1 if runs else 1}"
        run.mkdir()
        (run / LOCK).write_text(owner)
        _point_latest(root, run)
        remove_old_runs(root, keep, current=run)
    return run


def release_run_dir(base: str | Path, owner: str | None = None) -> None:
    """The run is over: its folder (if one was made) may be removed by a later run."""
    root = Path(base).absolute()
    if not root.is_dir():
        return
    run = _run_of(root, owner or this_process())
    if run is not None:
        with contextlib.suppress(FileNotFoundError):
            (run / LOCK).unlink()
