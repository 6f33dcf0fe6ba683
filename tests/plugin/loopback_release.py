"""A Toxiproxy "release" served on 127.0.0.1, for testing ``pytest-wedge install-toxiproxy``
offline: this platform's asset (a copy of the project's own toxiproxy-server) and a
``checksums.txt`` in the release's ``sha256sum`` format."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pytest_wedge.cli.install import asset_name

TOXIPROXY = Path(__file__).resolve().parents[2] / "bin" / "toxiproxy-server"


@dataclass(frozen=True)
class Release:
    url: str
    directory: Path
    asset: str
    sha256: str

    @property
    def checksums(self) -> Path:
        return self.directory / "checksums.txt"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_release(directory: Path, binary: Path = TOXIPROXY) -> Iterator[Release]:
    directory.mkdir(parents=True, exist_ok=True)
    asset = directory / asset_name()
    shutil.copy2(binary, asset)
    sha256 = hashlib.sha256(asset.read_bytes()).hexdigest()
    (directory / "checksums.txt").write_text(f"{sha256}  {asset.name}\n")
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory))
    )
    thread = threading.Thread(target=server.serve_forever, name="loopback-release", daemon=True)
    thread.start()
    try:
        yield Release(f"http://127.0.0.1:{server.server_port}", directory, asset.name, sha256)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
