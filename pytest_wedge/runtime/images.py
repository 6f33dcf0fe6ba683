"""Offline images for the docker runtime: nothing can be pulled, so the venv, its CPython, the
package, Toxiproxy, a router's venv and their ``ldd`` closure go into one ``docker import`` tar,
each file at its host path (so the process runtime's command lines work unchanged). The tag
hashes the file list with sizes and mtimes: an unchanged tree is built once.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pytest_wedge.errors import WedgeError
from pytest_wedge.routers.envs import exclusive_lock
from pytest_wedge.runtime.binaries import find_toxiproxy
from pytest_wedge.runtime.programs import CONTAINER_PATH

REPOSITORY = "pytest-wedge-local"
LOADER = "/lib64/ld-linux-x86-64.so.2"
MERGED_USR = ("/bin", "/sbin", "/lib", "/lib64")
# Parts of the base CPython no component imports; together they are most of its size.
_BASE_SKIP = ("site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip")
_DEV_ONLY = ("mypy", "ruff", "pip", "types-psutil")
_ETC = {
    "/etc/passwd": b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    "/etc/group": b"root:x:0:\nnogroup:x:65534:\n",
}
_CHANGES = [
    f"ENV PATH={':'.join(CONTAINER_PATH)}",
    "ENV LANG=C.UTF-8",
    "ENV PYTHONUNBUFFERED=1",
    "WORKDIR /tmp",
]


# The daemon answers `docker import` once it has written the whole layer: on a loaded machine
# that takes longer than the short timeout the client gives quick API calls (the whole import
# took 28.7 s in docs/scaling.md).
IMPORT_READ_TIMEOUT_S = 300.0


class ImageBuildError(WedgeError):
    """``docker import`` of the host-assembled root filesystem failed."""


@dataclass(frozen=True)
class ImageInfo:
    tag: str
    built: bool
    seconds: float
    size_bytes: int
    paths: frozenset[str]


def _walk(root: Path, skip: Iterable[Path] = ()) -> Iterator[str]:
    skipped = {str(s) for s in skip}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if os.path.join(dirpath, d) not in skipped)
        yield dirpath
        for name in sorted(filenames):
            if os.path.join(dirpath, name) not in skipped:
                yield os.path.join(dirpath, name)
        # os.walk lists symlinks to directories as dirs but does not descend; keep the links.
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                yield os.path.join(dirpath, d)


def source_roots(extra: Iterable[str] = ()) -> tuple[list[Path], list[Path]]:
    """(roots to copy, subtrees to skip) for the interpreter running this process."""
    prefix, base = Path(sys.prefix), Path(sys.base_prefix)
    roots = [prefix]
    skip: list[Path] = []
    if base != prefix:
        roots.append(base)
        libdir = base / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        skip += [libdir / name for name in _BASE_SKIP]
        skip += list(libdir.glob("config-*"))
        skip += list((libdir / "lib-dynload").glob("_tkinter*"))  # pulls in X11 and Tk
        skip += [base / "include", base / "share"]
    skip += _dev_only_files()
    package = Path(__file__).resolve().parents[1]
    if not package.is_relative_to(prefix):  # an editable install points at the checkout
        roots.append(package)
    roots += [Path(os.path.abspath(e)) for e in extra]
    return roots, skip


def _dev_only_files() -> list[Path]:
    """Files of the type checker, linter and installer: a third of the venv, never run there."""
    from importlib import metadata

    files: list[Path] = []
    for name in _DEV_ONLY:
        with contextlib.suppress(metadata.PackageNotFoundError):
            dist = metadata.distribution(name)
            for f in dist.files or ():
                files.append(Path(os.path.normpath(str(dist.locate_file(f)))))
                if len(f.parts) > 1 and f.parts[0] != "..":  # its package directories too
                    files.append(Path(os.path.normpath(str(dist.locate_file(f.parts[0])))))
    return files


def _is_elf(path: str, st: os.stat_result) -> bool:
    if not stat.S_ISREG(st.st_mode) or st.st_size < 64:
        return False
    if not (st.st_mode & 0o111 or ".so" in os.path.basename(path)):
        return False
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _ldd(files: list[str]) -> set[str]:
    """Shared libraries the dynamic loader would map for ``files`` (absolute host paths)."""
    libs: set[str] = set()
    for i in range(0, len(files), 200):
        # ldd exits non-zero when any file is static; its output for the others is still good.
        out = subprocess.run(
            ["ldd", *files[i : i + 200]], capture_output=True, text=True, check=False
        ).stdout
        for line in out.splitlines():
            token = line.split("=>")[-1].strip().split(" (")[0].strip()
            if token.startswith("/"):
                libs.add(token)
    return libs


class _Tree:
    """Paths to put into the image, with every symlink on the way kept as a symlink."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self._seen: set[str] = set()
        self._real: dict[str, str] = {}

    def add(self, path: str, depth: int = 0) -> None:
        path = os.path.normpath(path)
        if path in self._seen or path == "/" or depth > 40:
            return
        parent = os.path.dirname(path)
        self.add(parent, depth + 1)
        real_parent = self._real.get(parent)
        if real_parent is None:
            real_parent = self._real[parent] = os.path.realpath(parent)
        if real_parent != parent:  # reached through a symlinked directory: add the real file
            self.add(os.path.join(real_parent, os.path.basename(path)), depth + 1)
            return
        if not os.path.lexists(path):
            return
        self._seen.add(path)
        self.order.append(path)
        if os.path.islink(path):
            target = os.path.join(parent, os.readlink(path))
            self.add(target, depth + 1)


@dataclass
class Plan:
    """What goes into the image: ``paths`` in tar order, named by ``digest``."""

    paths: list[str]
    elves: list[str]
    digest: str
    tree: _Tree

    def add_libraries(self) -> None:
        """The ``ldd`` closure; only needed when the image is really built (it takes ~1 s)."""
        for link in MERGED_USR:
            self.tree.add(link)
        for lib in sorted(_ldd(self.elves) | {LOADER}):
            self.tree.add(lib)


def _system_libraries_stamp() -> str:
    # The libraries themselves are found only when building; these files change with them.
    stamps = []
    for path in ("/etc/ld.so.cache", "/var/lib/dpkg/status", LOADER):
        with contextlib.suppress(OSError):
            stamps.append(f"{path}:{os.stat(path).st_mtime_ns}")
    return ";".join(stamps)


def collect(extra: Iterable[str] = ()) -> Plan:
    """Walk the roots and name the image by the file list with sizes and mtimes."""
    roots, skip = source_roots(extra)
    tree = _Tree()
    digest = hashlib.sha256(f"{sys.version}\n{_system_libraries_stamp()}\n".encode())
    elves: list[str] = []
    for root in roots:
        walk: Iterable[str] = _walk(root, skip) if root.is_dir() else [str(root)]
        for path in walk:
            st = os.lstat(path)
            # Bytecode caches change whenever anything imports; Python revalidates them against
            # their sources anyway, so they go into the image but not into its name.
            if "/__pycache__" not in path:
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode())
            tree.add(path)
            if _is_elf(path, st):
                elves.append(path)
    for skipped in skip:  # the base site-packages stays, empty: site.py looks for it
        if skipped.name == "site-packages":
            tree.add(str(skipped))
    return Plan(tree.order, elves, digest.hexdigest()[:16], tree)


def _tar_stream(paths: list[str], out: BinaryIO) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in _ETC.items():
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
        tmp = tarfile.TarInfo("tmp")
        tmp.type, tmp.mode = tarfile.DIRTYPE, 0o1777
        tar.addfile(tmp)
        for path in paths:
            if path == "/tmp":
                continue
            info = tar.gettarinfo(path, arcname=path.lstrip("/"))
            info.uname = info.gname = ""
            if info.isreg():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)


def _chunks(paths: list[str], errors: list[BaseException]) -> Iterator[bytes]:
    """Yield the tar as it is written, so 300 MB never sit in memory or on disk."""
    read_fd, write_fd = os.pipe()

    def produce() -> None:
        try:
            with os.fdopen(write_fd, "wb", buffering=1 << 20) as out:
                _tar_stream(paths, out)
        except BaseException as exc:
            errors.append(exc)

    writer = threading.Thread(target=produce, name="wedge-image-tar", daemon=True)
    writer.start()
    with os.fdopen(read_fd, "rb", buffering=0) as src:
        while chunk := src.read(1 << 20):
            yield chunk
    writer.join()


_cache: dict[tuple[str, tuple[str, ...]], ImageInfo] = {}


def default_extras() -> list[str]:
    """The interpreter by the path the stubs' command lines name (a symlinked venv's differs
    from ``sys.prefix``) and the project's Toxiproxy: without them the first stub costs a
    second image."""
    extras = [sys.executable]
    with contextlib.suppress(Exception):
        extras.append(find_toxiproxy(None, Path(__file__).resolve().parents[2]))
    return extras


def ensure_image(client: Any, extra: Iterable[str] = ()) -> ImageInfo:
    """The image for this interpreter, the default extras and ``extra``; built only if its tag
    is missing, looked up once per process and daemon."""
    import docker.errors

    extra = sorted({*default_extras(), *extra})
    key = (str(client.api.base_url), tuple(extra))
    if key in _cache:
        return _cache[key]
    started = time.monotonic()
    plan = collect(extra)
    digest, tag = plan.digest, f"{REPOSITORY}:{plan.digest}"
    # xdist workers share one daemon: one builds while the others wait and then find the tag.
    with exclusive_lock(Path(tempfile.gettempdir()) / "pytest-wedge-image.lock"):
        built = False
        try:
            image = client.images.get(tag)
        except docker.errors.ImageNotFound:
            errors: list[BaseException] = []
            plan.add_libraries()
            try:
                tar = _chunks(plan.paths, errors)
                with _read_timeout(client.api, IMPORT_READ_TIMEOUT_S):
                    client.api.import_image(
                        tar, REPOSITORY, digest, changes=_CHANGES, stream_src=True
                    )
                image = client.images.get(tag)
            except (docker.errors.DockerException, OSError) as exc:
                raise ImageBuildError(
                    "Could not build the offline image with `docker import`",
                    facts={
                        "tag": tag,
                        "files": len(plan.paths),
                        "error": exc,
                        "tar writer": errors[0] if errors else "ok",
                    },
                    fix="check free space under the daemon's data root and its log "
                    "(make docker-up writes it next to the socket)",
                ) from exc
            built = True
            _prune_old(client, keep=tag)
    size = int(image.attrs.get("Size", 0))
    info = ImageInfo(tag, built, time.monotonic() - started, size, frozenset(plan.paths))
    _cache[key] = info
    return info


@contextlib.contextmanager
def _read_timeout(api: Any, seconds: float) -> Iterator[None]:
    """``api``'s calls wait up to ``seconds`` for an answer (a longer wait harms no other call
    made meanwhile)."""
    usual = api.timeout
    if usual is not None:  # None: no timeout at all
        api.timeout = max(usual, seconds)
    try:
        yield
    finally:
        api.timeout = usual


def _prune_old(client: Any, keep: str) -> None:
    """Drop superseded builds but the three newest: one image per router venv, so runs that
    alternate router kinds reuse theirs. One used by a container stays (removal is not forced)."""
    images = sorted(client.images.list(name=REPOSITORY), key=lambda i: i.attrs.get("Created", ""))
    for image in images[:-3]:
        if keep not in image.tags:
            with contextlib.suppress(Exception):
                client.images.remove(image.id, force=False, noprune=False)
