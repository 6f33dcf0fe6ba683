"""The `pytest-wedge` command: install-toxiproxy (download and go paths), up, doctor, docs.

Every download comes from a release served on 127.0.0.1 (see loopback_release.py); the go path
builds from the local Go module cache with GOPROXY pointing at it, so nothing leaves the host.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import psutil
import pytest
from loopback_release import TOXIPROXY, Release, serve_release

from pytest_wedge.cli.install import SHA256, asset_name
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(180)
SCRIPT = Path(sys.executable).with_name("pytest-wedge")
ROOT = Path(__file__).resolve().parents[2]
SESSION_ENV = "PYTEST_WEDGE_SESSION"


def cli(
    *args: object, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )


def version_of(binary: Path) -> str:
    return subprocess.run(
        [str(binary), "-version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


@pytest.fixture
def release(tmp_path: Path):
    with serve_release(tmp_path / "release") as served:
        yield served


def test_the_console_script_is_installed() -> None:
    done = cli("--help")
    assert done.returncode == 0
    for command in ("install-toxiproxy", "up", "doctor"):
        assert command in done.stdout


# -- install-toxiproxy: the download path ---------------------------------------------------


def test_download_installs_the_checked_release_binary(release: Release, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    done = cli(
        "install-toxiproxy",
        "--method",
        "download",
        "--base-url",
        release.url,
        "--checksums",
        release.checksums,
        "--dest",
        dest,
    )
    assert done.returncode == 0, done.stderr
    assert f"downloading {release.url}/{release.asset}" in done.stdout
    installed = dest / "toxiproxy-server"
    assert sorted(p.name for p in dest.iterdir()) == ["toxiproxy-server"]  # no partial file
    assert os.access(installed, os.X_OK)
    assert hashlib.sha256(installed.read_bytes()).hexdigest() == release.sha256
    assert version_of(installed) == "toxiproxy-server version 2.12.0"
    again = cli(
        "install-toxiproxy",
        "--method",
        "download",
        "--base-url",
        release.url,
        "--checksums",
        release.checksums,
        "--dest",
        dest,
    )
    assert again.returncode == 0 and "already" in again.stdout


def test_base_url_and_checksums_can_come_from_the_environment(
    release: Release, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "PYTEST_WEDGE_TOXIPROXY_URL": release.url,
        "PYTEST_WEDGE_TOXIPROXY_CHECKSUMS": str(release.checksums),
    }
    done = cli("install-toxiproxy", "--method", "download", "--dest", tmp_path / "d", env=env)
    assert done.returncode == 0, done.stderr
    assert version_of(tmp_path / "d" / "toxiproxy-server") == "toxiproxy-server version 2.12.0"


def test_a_checksum_mismatch_is_refused_and_leaves_nothing(
    release: Release, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.txt"
    wrong.write_text(f"{'0' * 64}  {release.asset}\n")
    dest = tmp_path / "new-dest"
    done = cli(
        "install-toxiproxy",
        "--method",
        "download",
        "--base-url",
        release.url,
        "--checksums",
        wrong,
        "--dest",
        dest,
    )
    assert done.returncode == 1
    assert "does not match its pinned SHA-256; it was not installed" in done.stderr
    assert f"expected: {'0' * 64}" in done.stderr
    assert f"got: {release.sha256}" in done.stderr
    assert "To fix this:" in done.stderr
    assert not dest.exists()  # the directory it created is gone again


def test_a_checksum_mismatch_keeps_an_earlier_binary_untouched(
    release: Release, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.txt"
    wrong.write_text(f"{'f' * 64}  {release.asset}\n")
    dest = tmp_path / "bin"
    dest.mkdir()
    earlier = dest / "toxiproxy-server"
    earlier.write_text("#!/bin/sh\necho toxiproxy-server version 2.11.0\n")
    earlier.chmod(0o755)
    done = cli(
        "install-toxiproxy",
        "--method",
        "download",
        "--base-url",
        release.url,
        "--checksums",
        wrong,
        "--dest",
        dest,
    )
    assert done.returncode == 1
    assert sorted(p.name for p in dest.iterdir()) == ["toxiproxy-server"]
    assert "2.11.0" in earlier.read_text()


def test_the_pinned_table_is_what_a_download_is_checked_against(
    release: Release, tmp_path: Path
) -> None:
    """Our locally built binary is not the published release file: the pinned SHA-256 of
    this platform's asset refuses it."""
    pinned = SHA256[asset_name()]
    if release.sha256 == pinned:
        pytest.skip("this machine's toxiproxy-server is the release file itself")
    done = cli(
        "install-toxiproxy",
        "--method",
        "download",
        "--base-url",
        release.url,
        "--dest",
        tmp_path / "dest",
    )
    assert done.returncode == 1
    assert f"expected: {pinned}" in done.stderr
    assert not (tmp_path / "dest").exists()


def test_a_missing_release_file_is_a_plain_error(release: Release, tmp_path: Path) -> None:
    done = cli(
        "install-toxiproxy",
        "--method",
        "download",
        "--base-url",
        release.url + "/v0",
        "--checksums",
        release.checksums,
        "--dest",
        tmp_path / "dest",
    )
    assert done.returncode == 1
    assert f"Cannot download {release.asset}" in done.stderr
    assert "404" in done.stderr
    assert not (tmp_path / "dest").exists()


# -- install-toxiproxy: the go path ---------------------------------------------------------


def _module_cache() -> Path | None:
    go = shutil.which("go")
    if go is None:
        return None
    cache = subprocess.run(
        [go, "env", "GOMODCACHE"], capture_output=True, text=True, timeout=30, check=False
    ).stdout.strip()
    download = Path(cache) / "cache" / "download" / "github.com" / "!shopify" / "toxiproxy"
    return Path(cache) / "cache" / "download" if download.is_dir() else None


def test_go_install_builds_the_pinned_module_version(tmp_path: Path) -> None:
    cache = _module_cache()
    if cache is None:
        pytest.skip("Go, or Toxiproxy in its module cache, is missing: this test stays offline")
    # The module cache served as a GOPROXY: the real `go install` path, offline.
    env = {**os.environ, "GOPROXY": f"file://{cache}", "GOSUMDB": "off"}
    dest = tmp_path / "dest"
    done = cli("install-toxiproxy", "--method", "go", "--dest", dest, env=env, timeout=170)
    assert done.returncode == 0, done.stderr
    assert "go install" in done.stdout
    assert sorted(p.name for p in dest.iterdir()) == ["toxiproxy-server"]  # no GOBIN left
    assert version_of(dest / "toxiproxy-server") == "toxiproxy-server version 2.12.0"


# -- doctor ---------------------------------------------------------------------------------


def test_doctor_lists_what_it_found(tmp_path: Path) -> None:
    done = cli("doctor", "--toxiproxy", TOXIPROXY, cwd=tmp_path)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()

    def line(name: str) -> str:
        return next(entry for entry in lines if re.match(rf"\s+(ok|--|!!)\s+{name}\s", entry))

    assert line("python").split()[0] == "ok" and sys.version.split()[0] in line("python")
    assert "2.12.0" in line("toxiproxy") and str(TOXIPROXY) in line("toxiproxy")
    assert line("smg").split()[0] == "ok" and "1.13" in line("smg")
    assert "pytest-wedge 0.1.0" in line("packages")
    assert line("docker").split()[0] in ("ok", "--")  # either way, it says which and why
    assert line("go").split()[0] in ("ok", "--")
    assert line("xdist").split()[:3] == ["ok", "xdist", "pytest-xdist"], line("xdist")
    assert lines[-1] == "ready: the process runtime can run (router smg)"


def test_doctor_says_why_toxiproxy_is_missing(tmp_path: Path) -> None:
    if (Path(sys.prefix) / "bin" / "toxiproxy-server").exists():
        pytest.skip("this venv has its own toxiproxy-server")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_WEDGE_TOXIPROXY", "GOBIN")}
    env["PATH"] = "/usr/bin:/bin"
    done = cli("doctor", cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert re.search(r"!!\s+toxiproxy\s+toxiproxy-server was not found", done.stdout)
    assert "run `pytest-wedge install-toxiproxy`" in done.stdout
    assert "make" not in done.stdout.split("toxiproxy-server was not found")[1].splitlines()[0]
    assert "not ready: toxiproxy" in done.stdout


# -- up -------------------------------------------------------------------------------------


def tagged(session: str) -> list[psutil.Process]:
    """Processes carrying this session's tag: what the runtime started for it."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(SESSION_ENV) == session and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


class Output:
    """The lines a child prints, read on a thread, so a test waits on content, not time."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_up_prints_every_url_and_link_serves_and_stops_cleanly(
    tmp_path: Path, stop: signal.Signals
) -> None:
    proc = subprocess.Popen(
        [
            str(SCRIPT),
            "up",
            "--toxiproxy",
            str(TOXIPROXY),
            "--decode",
            "2",
            "--artifacts",
            str(tmp_path / "artifacts"),
            "--",
            "--request-timeout-secs",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    out = Output(proc)
    try:
        wait_for(
            lambda: any(line.startswith("up;") for line in out.lines) or proc.poll() is not None,
            timeout_s=90,
            what="pytest-wedge up to print its URLs",
            describe=out.text,
        )
        assert proc.poll() is None, out.text()
        text = out.text()
        client = re.search(r"^client\s+(http://127\.0\.0\.1:\d+)\s", text, re.M)
        session = re.search(r"^session: (\S+) \(process runtime\)", text, re.M)
        assert client and session, text
        for name in ("router", "prefill-0", "decode-0", "decode-1", "toxiproxy"):
            assert re.search(rf"^{name}\s+http://127\.0\.0\.1:\d+", text, re.M), name
        for link in (
            "client->router",
            "router->prefill-0",
            "router->decode-0",
            "router->decode-1",
            "decode-0->prefill-0",
            "decode-1->prefill-0",
        ):
            assert re.search(
                rf"^\s+{re.escape(link)}\s+127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+", text, re.M
            ), link
        with httpx.Client(trust_env=False, timeout=10) as http:
            models = http.get(client.group(1) + "/v1/models")
            assert models.status_code == 200 and "stub-model" in models.text
            assert http.get(client.group(1) + "/health").status_code == 200
        # smg rewrites its process title over its environment, so the router is found as a
        # child of `up`; the stubs and Toxiproxy carry the session tag as well.
        descendants = psutil.Process(proc.pid).children(recursive=True)
        tags = tagged(session.group(1))
        assert {p.pid for p in tags} <= {p.pid for p in descendants}
        names = sorted(p.name() for p in descendants)
        assert "toxiproxy-server" in names and any("smg" in n for n in names), names
        assert len(descendants) >= 5 and len(tags) >= 4  # toxiproxy, router, three workers
        # The logs are inside the run rotation, as a pytest run's are.
        logs = re.search(r"^logs: (.+)$", text, re.M)
        assert logs and logs.group(1).startswith(str(tmp_path / "artifacts" / "run-1")), text
        assert (tmp_path / "artifacts" / "latest").resolve() == tmp_path / "artifacts" / "run-1"
        proc.send_signal(stop)
        assert proc.wait(timeout=60) == 0, out.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    wait_for(lambda: not out._thread.is_alive(), timeout_s=10, what="the output reader to finish")
    assert f"{stop.name}: stopping" in out.text()
    assert "stopped; nothing left running" in out.text()
    assert tagged(session.group(1)) == []
    assert [p for p in descendants if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


def test_up_with_a_missing_toxiproxy_says_which_and_how_to_fix(tmp_path: Path) -> None:
    done = cli("up", "--toxiproxy", tmp_path / "nope" / "toxiproxy-server", cwd=tmp_path)
    assert done.returncode == 1
    assert "given by --toxiproxy is not an executable file" in done.stderr
    assert "To fix this:" in done.stderr


def test_up_rejects_an_unknown_stub_option_plainly(tmp_path: Path) -> None:
    done = cli("up", "--toxiproxy", TOXIPROXY, "--stub", "itl=5", cwd=tmp_path)
    assert done.returncode == 1
    assert "Unknown stub option(s): itl" in done.stderr


# -- docs -----------------------------------------------------------------------------------

# The guides a pip user reads (architecture.md is the contributors' map; reference/ is generated).
USER_DOCS = sorted(path for path in (ROOT / "docs").glob("*.md") if path.name != "architecture.md")


def test_docs_lists_the_pages_and_prints_one(tmp_path: Path) -> None:
    listed = cli("docs", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    for name in ("writing-a-hang-test", "creating-faults", "reference/faults"):
        assert re.search(rf"^\s+{re.escape(name)}\s+\S", listed.stdout, re.M), listed.stdout
    page = cli("docs", "writing-a-hang-test", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    assert page.stdout == (ROOT / "docs" / "writing-a-hang-test.md").read_text()
    typo = cli("docs", "writing-a-hang", cwd=tmp_path)
    assert typo.returncode == 1
    assert "No doc named 'writing-a-hang'" in typo.stderr
    assert "did you mean: writing-a-hang-test" in typo.stderr and "To fix this:" in typo.stderr


def _strings_outside_docstrings(tree: ast.AST) -> list[str]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    ]


def test_every_hint_names_the_docs_command_and_a_page_that_exists() -> None:
    """A wheel has no docs/ folder: messages name `pytest-wedge docs NAME`, never a path."""
    from pytest_wedge.cli.docs import pages

    known = pages(ROOT / "docs")
    named: list[str] = []
    for module in sorted((ROOT / "pytest_wedge").rglob("*.py")):
        for text in _strings_outside_docstrings(ast.parse(module.read_text())):
            where = module.relative_to(ROOT)
            assert not re.search(r"\bdocs/[\w/.-]*\.md", text), f"{where}: {text!r}"
            named += re.findall(r"pytest-wedge docs ([\w/-]+)", text)
    assert named, "no hint names `pytest-wedge docs NAME`"
    assert sorted(set(named) - {*known, "NAME"}) == []


def test_each_user_doc_has_a_pip_path_that_never_mentions_make() -> None:
    for doc in USER_DOCS:
        blocks = doc.read_text().split("\n\n")
        pip = [block for block in blocks if "pip install pytest-wedge" in block]
        assert pip, f"{doc.name}: no `pip install pytest-wedge` path"
        assert all("make" not in block for block in pip), (doc.name, pip)
        assert all("pytest-wedge install-toxiproxy" in block for block in pip), (doc.name, pip)
