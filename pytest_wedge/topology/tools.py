"""The programs a topology runs besides Python: where each is and which version it is.

For pytest's session header and ``pytest-wedge doctor``, so it stays cheap: no HTTP client is
imported, smg's version comes from its package metadata, and a binary's ``-version`` answer is
remembered per path, size and modification time.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

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


def binary_version(
    path: str,
    flag: str = "-version",
    *,
    cache: MutableMapping[str, Any] | None = None,
    timeout_s: float = 10.0,
) -> str | None:
    """The version ``path flag`` prints (``toxiproxy-server -version``), or None.

    Remembered in this process, and in ``cache`` (a JSON-able mapping such as pytest's
    ``config.cache`` entry) across processes, keyed by the binary's path, mtime and size.
    """
    key = _stat_key(path)
    if key is None:
        return None
    if key in _versions:
        return _versions[key]
    cache_key = f"{key[0]}:{key[1]}:{key[2]}"
    if cache is not None and isinstance(cache.get(cache_key), str):
        _versions[key] = cache[cache_key]
        return _versions[key]
    version = probe_version([path, flag], timeout_s=timeout_s)
    _versions[key] = version
    if cache is not None and version is not None:
        cache[cache_key] = version
    return version


def probe_version(argv: list[str], *, timeout_s: float = 10.0) -> str | None:
    """The first version number ``argv`` prints, or None when it does not run or print one."""
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(done.stdout + "\n" + done.stderr)
    return match.group(0) if match else None
