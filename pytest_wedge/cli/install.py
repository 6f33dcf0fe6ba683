"""``pytest-wedge install-toxiproxy``: Toxiproxy v2.12.0 where discovery finds it, built with
``go install`` as the Makefile does, else the release binary checked against its pinned SHA-256
(a mismatch leaves nothing behind; the URL and the table can point at a mirror).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from pytest_wedge.errors import WedgeError
from pytest_wedge.runtime.binaries import BINARY, TOXIPROXY_VERSION, probe_version

GO_MODULE = "github.com/Shopify/toxiproxy/v2"
RELEASE_URL = f"https://github.com/Shopify/toxiproxy/releases/download/v{TOXIPROXY_VERSION}"
URL_ENV = "PYTEST_WEDGE_TOXIPROXY_URL"
CHECKSUMS_ENV = "PYTEST_WEDGE_TOXIPROXY_CHECKSUMS"
# SHA-256 of the v2.12.0 release assets (toxiproxy-server-<os>-<arch>), as published in the
# release's checksums.txt. Windows is not pinned: there, install Go or pass --checksums.
SHA256: Mapping[str, str] = {
    "toxiproxy-server-linux-amd64": "556d891134a3c582dc1e1a3f7335fd55142e5965769855a00b944e13e48302fc",
    "toxiproxy-server-linux-arm64": "53e770c1c3035b5a9f1bc629fce537db1f95f62b26f4ebe6e756afd701cf077c",
    "toxiproxy-server-darwin-amd64": "9625bba4bd96117eedae49f982aba4c2f462b268dd406c9ff18186f9b1ef8afe",
    "toxiproxy-server-darwin-arm64": "aa299966b52f16a8594f1cd0d1e9049dc2e8fe2c04a90c19860e2719b2b95d15",
}
_OS = {"Linux": "linux", "Darwin": "darwin"}
_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "AMD64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
}


class InstallError(WedgeError):
    """Toxiproxy could not be installed."""


def default_dest() -> Path:
    """This environment's ``bin/`` (the venv's, when run from one): discovery looks there."""
    return Path(sys.prefix) / "bin"


def asset_name(system: str | None = None, machine: str | None = None) -> str:
    system, machine = system or platform.system(), machine or platform.machine()
    os_name, arch = _OS.get(system), _ARCH.get(machine)
    if os_name is None or arch is None:
        raise InstallError(
            f"No Toxiproxy release binary is known for this platform ({system} {machine})",
            facts={"known": ", ".join(sorted(SHA256))},
            fix="install Go and run `pytest-wedge install-toxiproxy --method go`, or build "
            "Toxiproxy yourself and pass --wedge-toxiproxy=PATH",
        )
    return f"{BINARY}-{os_name}-{arch}"


def read_checksums(path: Path) -> dict[str, str]:
    """``HEX  NAME`` lines (``sha256sum`` and the release's checksums.txt) as {name: hex}."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InstallError(
            f"Cannot read the checksum file {path}",
            facts={"error": exc},
            fix=f"pass --checksums (or {CHECKSUMS_ENV}) naming a readable "
            "file of `SHA256  NAME` lines",
        ) from exc
    table = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and len(parts[0]) == 64:
            table[parts[1].lstrip("*")] = parts[0].lower()
    return table


def install(
    dest: Path,
    *,
    method: str = "auto",
    base_url: str | None = None,
    checksums: Path | None = None,
    force: bool = False,
    say: Callable[[str], None] = print,
) -> Path:
    """Install toxiproxy-server into ``dest``; returns its path. Safe to run again."""
    dest = dest.resolve()  # go install wants an absolute GOBIN; `--dest bin` is relative
    target = dest / BINARY
    there = target.is_file() and probe_version([str(target), "-version"]) == TOXIPROXY_VERSION
    if there and not force:
        say(f"{target} is Toxiproxy {TOXIPROXY_VERSION} already (--force installs it again)")
        return target
    go = shutil.which("go")
    if method == "go" and go is None:
        raise InstallError(
            "--method go needs Go, which is not on PATH", fix="install Go, or use --method download"
        )
    created = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        if method == "go" or (method == "auto" and go is not None):
            assert go is not None
            say(f"building Toxiproxy v{TOXIPROXY_VERSION} with {go} install into {dest}")
            go_install(go, target)
        else:
            base = base_url or os.environ.get(URL_ENV) or RELEASE_URL
            checksums = checksums or (
                Path(os.environ[CHECKSUMS_ENV]) if os.environ.get(CHECKSUMS_ENV) else None
            )
            table = read_checksums(checksums) if checksums else dict(SHA256)
            download(base, target, table, say=say)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                dest.rmdir()  # only if nothing else is in it
        raise
    version = probe_version([str(target), "-version"])
    say(f"installed {target} (toxiproxy-server version {version or 'unknown'})")
    return target


def go_install(go: str, target: Path) -> None:
    """``go install`` into a private GOBIN next to ``target``, then rename ``server``."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".gobin-") as gobin:
        flags = f"{os.environ.get('GOFLAGS', '')} -mod=mod".strip()
        env = {**os.environ, "GOBIN": gobin, "GOFLAGS": flags}
        ldflags = f"-X {GO_MODULE}.Version={TOXIPROXY_VERSION}"
        argv = [go, "install", "-ldflags", ldflags, f"{GO_MODULE}/cmd/server@v{TOXIPROXY_VERSION}"]
        try:
            done = subprocess.run(
                argv, cwd=gobin, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=900
            )
        except subprocess.TimeoutExpired as exc:
            raise InstallError(
                "go install did not finish in 15 minutes",
                facts={"command": " ".join(argv)},
                fix="check the network path to the Go module proxy "
                "(GOPROXY), or use --method download",
            ) from exc
        built = Path(gobin) / "server"
        if done.returncode != 0 or not built.is_file():
            output = (done.stdout + done.stderr).decode(errors="replace")
            raise InstallError(
                "go install of Toxiproxy failed",
                facts={
                    "command": " ".join(argv),
                    "exit code": done.returncode,
                    "GOPROXY": os.environ.get("GOPROXY", "(default)"),
                },
                log_tail="\n".join(output.splitlines()[-15:]),
                fix="check the network path to the Go module proxy (GOPROXY), or use "
                "--method download",
            )
        os.replace(built, target)


def _opener(url: str) -> urllib.request.OpenerDirector:
    host = urllib.parse.urlparse(url).hostname or ""
    if host in ("127.0.0.1", "localhost", "::1"):
        # Proxy variables must never reroute a loopback download.
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def download(
    base_url: str, target: Path, checksums: Mapping[str, str], *, say: Callable[[str], None] = print
) -> None:
    """Fetch this platform's release asset into a temporary file, check its SHA-256, then
    move it into place (a failure leaves an earlier binary as it was)."""
    asset = asset_name()
    expected = checksums.get(asset)
    if expected is None:
        raise InstallError(
            f"No SHA-256 is pinned for {asset}",
            facts={"pinned": ", ".join(sorted(checksums)) or "(none)"},
            fix=f"pass --checksums FILE (or {CHECKSUMS_ENV}) with a `SHA256  {asset}` line, "
            "or install Go and use --method go",
        )
    url = f"{base_url.rstrip('/')}/{asset}"
    say(f"downloading {url}")
    digest = hashlib.sha256()
    size = 0
    handle, part = tempfile.mkstemp(dir=target.parent, prefix=f".{BINARY}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out, _opener(url).open(url, timeout=60) as response:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        if digest.hexdigest() != expected.lower():
            raise InstallError(
                f"The downloaded {asset} does not match its pinned SHA-256; it was not installed",
                facts={"url": url, "expected": expected, "got": digest.hexdigest(), "bytes": size},
                fix="the file was altered or truncated on the way (a proxy, a mirror, a "
                "partial download): retry, or point --base-url at a trusted copy",
            )
        os.chmod(part, 0o755)
        os.replace(part, target)
    except (urllib.error.URLError, OSError) as exc:
        raise InstallError(
            f"Cannot download {asset}",
            facts={"url": url, "error": exc},
            fix=f"check the network path to {base_url}, or set --base-url (or {URL_ENV}) "
            "to a mirror; with Go on PATH, --method go builds it instead",
        ) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)
