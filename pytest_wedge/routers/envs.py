"""Cached venvs for pinned router packages (sglang-router ships its own ``smg`` script, so it
cannot share one), made on first use under ``$PYTEST_WEDGE_ENV_DIR``, else
``$XDG_CACHE_HOME/pytest-wedge/envs``, else ``~/.cache/pytest-wedge/envs``. A marker file, written
last, says one is ready; a lock file makes xdist workers that start together make it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pytest_wedge.errors import MissingBinaryError, file_tail

ENV_DIR_VARIABLE = "PYTEST_WEDGE_ENV_DIR"
MARKER = ".pytest-wedge-env.json"
INSTALL_S = 600.0  # the longest a venv's creation may take


def cache_root() -> Path:
    explicit = os.environ.get(ENV_DIR_VARIABLE)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "pytest-wedge" / "envs"


@dataclass(frozen=True)
class IsolatedEnv:
    """One ready venv holding exactly ``package==version`` and its dependencies."""

    package: str
    version: str
    path: Path

    def script(self, name: str) -> str:
        """The absolute path of one of the venv's console scripts."""
        return str(self.path / "bin" / name)

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")


def env_path(package: str, version: str, root: Path | None = None) -> Path:
    return (root or cache_root()) / f"{package}-{version}"


def ready_env(package: str, version: str, root: Path | None = None) -> IsolatedEnv | None:
    """The cached environment when it is complete, else None. Reads one small file."""
    path = env_path(package, version, root)
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if marker.get("package") != package or marker.get("version") != version:
        return None
    return IsolatedEnv(package, version, path)


def ensure_env(
    package: str,
    version: str,
    root: Path | None = None,
    requirements: Path | None = None,
    install_s: float = INSTALL_S,
) -> IsolatedEnv:
    """The cached environment for ``package==version``, created on first use; with
    ``requirements`` (a pinned list holding the package), exactly that list, ``--no-deps``."""
    found = ready_env(package, version, root)
    if found is not None:
        return found
    path = env_path(package, version, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path.with_name(path.name + ".lock")):
        found = ready_env(package, version, root)  # another worker made it while we waited
        if found is not None:
            return found
        _create(package, version, path, requirements, install_s)
    made = ready_env(package, version, root)
    assert made is not None, f"{path} was created without its marker"
    return made


@contextlib.contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Held by one process at a time (xdist workers share caches and the docker daemon)."""
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_logged(argv: list[str], log: Path, timeout_s: float = INSTALL_S) -> bool:
    """Run one step with its output appended to ``log`` (a second run shows in it too)."""
    with open(log, "a") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        try:
            null = subprocess.DEVNULL
            return subprocess.call(argv, stdin=null, stdout=out, stderr=out, timeout=timeout_s) == 0
        except subprocess.TimeoutExpired:
            return False


def _create(
    package: str, version: str, path: Path, requirements: Path | None, install_s: float
) -> None:
    """A fresh venv (no pip of its own: the running pip installs into it with ``--python``)."""
    shutil.rmtree(path, ignore_errors=True)  # a half-made leftover of an interrupted creation
    started = time.monotonic()
    log = path.with_name(path.name + ".install.log")
    pip = [sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install"]
    what = ["--no-deps", "-r", str(requirements)] if requirements else [f"{package}=={version}"]
    steps = [[sys.executable, "-m", "venv", "--without-pip", str(path)], [*pip, "--quiet", *what]]
    for argv in steps:
        if not run_logged(argv, log, install_s):
            shutil.rmtree(path, ignore_errors=True)
            raise MissingBinaryError(
                f"Could not create the isolated environment for {package}=={version}",
                facts={"step": " ".join(argv), "environment": path, "install log": log},
                log_tail=file_tail(log, 20),
                fix=f"check that pip can reach the package index, or create it by hand: "
                f"python -m venv {path} && {path}/bin/pip install {' '.join(what)}, "
                f'then write {{"package": "{package}", "version": "{version}"}} to '
                f"{path / MARKER}",
            )
    seconds = round(time.monotonic() - started, 1)
    marker = {"package": package, "version": version, "created_s": seconds}
    (path / MARKER).write_text(json.dumps(marker))
