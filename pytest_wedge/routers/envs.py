"""Cached, isolated venvs for pinned router packages, made on first use.

sglang-router ships its own ``smg`` script, so it cannot share a venv with ``smg``. Each pinned
package gets a venv under ``$PYTEST_WEDGE_ENV_DIR``, else ``$XDG_CACHE_HOME/pytest-wedge/envs``,
else ``~/.cache/pytest-wedge/envs``, named ``PACKAGE-VERSION``. A ``.pytest-wedge-env.json``
marker, written last, says it is ready; an ``fcntl`` lock on ``PACKAGE-VERSION.lock`` makes two
xdist workers that start together make it once.
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

from pytest_wedge.errors import MissingBinaryError

ENV_DIR_VARIABLE = "PYTEST_WEDGE_ENV_DIR"
MARKER = ".pytest-wedge-env.json"
INSTALL_TIMEOUT_S = 600.0


def cache_root() -> Path:
    """Where the isolated environments live (see the module docstring for the order)."""
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


def ensure_env(package: str, version: str, root: Path | None = None) -> IsolatedEnv:
    """The cached environment for ``package==version``, created on first use.

    A second call (in this process, another run, or another xdist worker) runs no installer.
    """
    found = ready_env(package, version, root)
    if found is not None:
        return found
    path = env_path(package, version, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(path.with_name(path.name + ".lock")):
        found = ready_env(package, version, root)  # another worker made it while we waited
        if found is not None:
            return found
        _create(package, version, path)
    made = ready_env(package, version, root)
    assert made is not None, f"{path} was created without its marker"
    return made


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _create(package: str, version: str, path: Path) -> None:
    """A fresh venv (no pip of its own: the running pip installs into it with ``--python``)."""
    shutil.rmtree(path, ignore_errors=True)  # a half-made leftover of an interrupted creation
    started = time.monotonic()
    log = path.with_name(path.name + ".install.log")
    steps = [
        [sys.executable, "-m", "venv", "--without-pip", str(path)],
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(path / "bin" / "python"),
            "install",
            "--quiet",
            f"{package}=={version}",
        ],
    ]
    with open(log, "a") as out:  # appended: a second creation would show in it
        for argv in steps:
            out.write("$ " + " ".join(argv) + "\n")
            out.flush()
            try:
                done = subprocess.run(
                    argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=INSTALL_TIMEOUT_S,
                    check=False,
                )
                failed = done.returncode != 0
            except subprocess.TimeoutExpired:
                failed = True
            if failed:
                shutil.rmtree(path, ignore_errors=True)
                raise MissingBinaryError(
                    f"Could not create the isolated environment for {package}=={version}",
                    facts={"step": " ".join(argv), "environment": path, "install log": log},
                    log_tail=_tail(log),
                    fix=f"check that pip can reach the package index, or create it by hand: "
                    f"python -m venv {path} && {path}/bin/pip install {package}=={version}, "
                    f'then write {{"package": "{package}", "version": "{version}"}} to '
                    f"{path / MARKER}",
                )
    marker = {
        "package": package,
        "version": version,
        "created_s": round(time.monotonic() - started, 1),
    }
    (path / MARKER).write_text(json.dumps(marker))


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
