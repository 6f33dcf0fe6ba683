"""The programs a topology runs besides Python: where each is and which version. Cheap for the
header and ``doctor``: no HTTP client, smg's version from its metadata, a binary's ``-version``
remembered per path, size and mtime.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_wedge.errors import MissingBinaryError

TOXIPROXY_VERSION = "2.12.0"
BINARY = "toxiproxy-server"
ENV_VAR = "PYTEST_WEDGE_TOXIPROXY"
VENV_BIN, ROOTDIR_BIN = "the venv's bin/", "the rootdir's bin/"
# Where toxiproxy-server is looked for, first to last, in the words of the README and the docs
# (tests/unit/test_toxiproxy_discovery.py holds them and locate_toxiproxy to this).
DISCOVERY_ORDER = (
    "--wedge-toxiproxy",
    ENV_VAR,
    "the ini wedge_toxiproxy",
    VENV_BIN,
    ROOTDIR_BIN,
    "$GOBIN",
    "PATH",
)
INSTALL_HINT = (
    "run `pytest-wedge install-toxiproxy` (it puts Toxiproxy v2.12.0 into this environment's "
    "bin/: built with `go install` when Go is on PATH, otherwise the release binary, checked "
    "against its pinned SHA-256), or pass --wedge-toxiproxy=PATH"
)
MAKE_HINT = (
    "run `make install` (it builds Toxiproxy v2.12.0 into ./bin), or "
    "`pytest-wedge install-toxiproxy --dest bin`, or pass --wedge-toxiproxy=PATH"
)


def install_hint(rootdir: Path | None = None) -> str:
    """How to get Toxiproxy. ``make`` is named only where this project's Makefile is."""
    makefile = rootdir / "Makefile" if rootdir is not None else None
    try:
        if makefile is not None and "toxiproxy" in makefile.read_text(errors="replace"):
            return MAKE_HINT
    except OSError:
        pass
    return INSTALL_HINT


@dataclass(frozen=True)
class FoundToxiproxy:
    """Where toxiproxy-server was found, and by which rule of the discovery order."""

    path: str
    source: str


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def locate_toxiproxy(
    explicit: str | None = None,
    *,
    source: str = "--wedge-toxiproxy",
    base_dir: Path | None = None,
    rootdir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    prefix: str | None = None,
) -> FoundToxiproxy:
    """Find toxiproxy-server by ``DISCOVERY_ORDER``, or raise MissingBinaryError.

    1. ``explicit``, a path given by ``source`` (the option, the environment or the ini file,
       in the precedence of settings), relative to ``base_dir`` (the ini file's directory for
       an ini value); a given path that is not an executable is an error, never skipped;
    2. ``$PYTEST_WEDGE_TOXIPROXY`` (relative to the working directory);
    3. the venv's ``bin/`` (``sys.prefix``, where ``pytest-wedge install-toxiproxy`` puts it);
    4. ``rootdir/bin/`` (where a clone's ``make install`` puts it);
    5. ``$GOBIN``;
    6. ``PATH``.
    """
    env = os.environ if environ is None else environ
    hint = install_hint(rootdir)
    if not explicit and env.get(ENV_VAR):
        explicit, source, base_dir = env[ENV_VAR], f"environment ({ENV_VAR})", None
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        if _executable(path):
            return FoundToxiproxy(str(path.absolute()), source)
        raise MissingBinaryError(
            f"The toxiproxy-server given by {source} is not an executable file",
            facts={"given": explicit, "resolved to": path.absolute()},
            fix=hint,
        )
    candidates = [(Path(prefix or sys.prefix) / "bin", VENV_BIN)]
    if rootdir is not None:
        candidates.append((rootdir / "bin", ROOTDIR_BIN))
    if env.get("GOBIN"):
        candidates.append((Path(env["GOBIN"]), "$GOBIN"))
    tried: list[str] = []
    for directory, why in candidates:
        candidate = directory / BINARY
        tried.append(str(candidate))
        if _executable(candidate):
            return FoundToxiproxy(str(candidate.absolute()), why)
    found = shutil.which(BINARY, path=env.get("PATH", os.defpath))
    if found:
        return FoundToxiproxy(os.path.abspath(found), "PATH")
    tried.append(f"{BINARY} on PATH")
    raise MissingBinaryError(
        "toxiproxy-server was not found",
        facts={"looked in": "; ".join(tried)},
        fix=hint,
    )


def find_toxiproxy(explicit: str | None = None, project_root: Path | None = None) -> str:
    """toxiproxy-server by :func:`locate_toxiproxy`; the rootdir is ``project_root`` or cwd."""
    return locate_toxiproxy(explicit, rootdir=project_root or Path.cwd()).path


_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?")
_versions: dict[tuple[str, int, int], str | None] = {}


def smg_path() -> str | None:
    """The smg the process runtime starts: on PATH, else next to this interpreter."""
    found = shutil.which("smg") or str(Path(sys.executable).with_name("smg"))
    return found if Path(found).is_file() else None


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _stat_key(path: str) -> tuple[str, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (os.path.abspath(path), stat.st_mtime_ns, stat.st_size)


def binary_version(path: str, *, cache: MutableMapping[str, Any] | None = None) -> str | None:
    """The version ``path -version`` prints, or None; remembered here and in ``cache`` (pytest's
    cache entry) by the binary's path, mtime and size."""
    key = _stat_key(path)
    if key is None:
        return None
    if key in _versions:
        return _versions[key]
    cache_key = f"{key[0]}:{key[1]}:{key[2]}"
    if cache is not None and isinstance(cache.get(cache_key), str):
        _versions[key] = cache[cache_key]
        return _versions[key]
    version = probe_version([path, "-version"])
    _versions[key] = version
    if cache is not None and version is not None:
        cache[cache_key] = version
    return version


def probe_version(argv: list[str]) -> str | None:
    """The first version number ``argv`` prints, or None when it does not run or print one."""
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(done.stdout + "\n" + done.stderr)
    return match.group(0) if match else None
