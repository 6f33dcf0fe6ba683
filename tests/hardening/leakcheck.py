"""What a pytest-wedge session might leave behind, and the check that it left nothing.

An inner pytest runs with ``WEDGE_LEAK_MARK`` in its environment (the approach of
tests/plugin/test_plugin_surface.py): every process it starts inherits the mark, so a psutil
scan finds them all. Containers do not inherit it; they carry the owner label (the inner
pytest's owner tag, ``pid:start``). ``TMPDIR`` points at a private directory that must end empty,
and the inner test writes its Toxiproxy API address and proxies to a JSON file, which is also
how the outer test knows the topology is up.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

from pytest_wedge.runtime.owner_tags import process_identity
from pytest_wedge.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOXIPROXY = ROOT / "bin" / "toxiproxy-server"
MARK_ENV = "WEDGE_LEAK_MARK"
RECORD_ENV = "WEDGE_RECORD"
# The docker runtime's image-build lock: a lock file kept on purpose, not a temp dir.
KEPT_IN_TMP = {"pytest-wedge-image.lock"}

# `python -m pytest`, but SIGINT raises KeyboardInterrupt as at a terminal: an xdist worker
# ignores SIGINT, and a child inherits an ignored signal (Python then installs no handler).
PYTEST_WITH_SIGINT = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.exit(pytest.console_main())"
)

# Written next to the inner tests; records the topology once it is up (atomically).
RECORD = """
import json, os
from pathlib import Path


def record(wedge):
    topo = wedge.topology
    data = {"toxiproxy": topo.toxiproxy.base_url,
            "proxies": {link.proxy: link.listen_port for link in topo.links.values()}}
    path = Path(os.environ["WEDGE_RECORD"])
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(data))
    part.replace(path)
"""


def marked_processes(mark: str) -> list[str]:
    """Processes whose environment carries ``mark`` (zombies have none left to read)."""
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            if proc.environ().get(MARK_ENV) == mark:
                found.append(f"{proc.pid} {proc.info['name']}")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
    return found


def docker_client() -> tuple[Any, str]:
    """(client, "") when a Docker daemon answers, else (None, why not).

    "Why not" is only ever: no DOCKER_HOST, no docker-py, or nothing answering there. Any
    other error of the client (a daemon that answers with an error, a bad address) is raised.
    """
    if not os.environ.get("DOCKER_HOST"):
        return None, "DOCKER_HOST is not set (`make test` starts a private daemon and sets it)"
    from pytest_wedge.runtime.dockerd import NoDockerDaemon, connect

    try:
        client = connect()
    except NoDockerDaemon as exc:
        return None, str(exc)
    return client, ""


def owned_containers(owners: list[str]) -> list[str]:
    """Containers labelled as started by one of ``owners`` (empty when no daemon answers)."""
    from pytest_wedge.runtime.docker import LABEL_OWNER, LABEL_SESSION

    client, _ = docker_client()
    if client is None or not owners:
        return []
    try:
        containers = client.containers.list(all=True, filters={"label": LABEL_SESSION})
        return [c.name for c in containers if (c.labels or {}).get(LABEL_OWNER) in owners]
    finally:
        client.close()


class LeakProbe:
    """Runs inner pytest sessions in ``root`` and checks what they left behind."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mark = uuid.uuid4().hex
        self.tmpdir = root / "tmp"
        self.tmpdir.mkdir(parents=True)
        self.owners: list[str] = []  # owner tags of the inner pytest processes
        self.records: list[dict[str, Any]] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._runs = 0

    @property
    def record_path(self) -> Path:
        return self.root / f"record-{self._runs}.json"

    def write_tests(self, source: str, name: str = "test_inner.py") -> None:
        (self.root / name).write_text(RECORD + source)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            MARK_ENV: self.mark,
            "TMPDIR": str(self.tmpdir),
            RECORD_ENV: str(self.record_path),
            **extra,
        }

    def popen(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """An inner pytest in its own process group, its output in ``inner-N.log``."""
        self._runs += 1
        log = (self.root / f"inner-{self._runs}.log").open("wb")
        argv = [
            sys.executable,
            "-c",
            PYTEST_WITH_SIGINT,
            "-p",
            "no:cacheprovider",
            "-q",
            f"--wedge-toxiproxy={TOXIPROXY}",
            f"--wedge-artifacts={self.root / 'artifacts'}",
            *args,
        ]
        with log:
            proc = subprocess.Popen(
                argv,
                cwd=self.root,
                env=self.env(**env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append(proc)
        with contextlib.suppress(psutil.NoSuchProcess):
            self.owners.append(f"{proc.pid}:{process_identity(proc.pid)}")
        return proc

    def close(self) -> None:
        """Kill any inner pytest still running (a failed check must not leave one behind)."""
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def output(self) -> str:
        return (self.root / f"inner-{self._runs}.log").read_text(errors="replace")

    def run(self, *args: str, timeout_s: float = 90.0, **env: str) -> tuple[int, str]:
        proc = self.popen(*args, **env)
        try:
            code = proc.wait(timeout=timeout_s)
        finally:
            self.close()  # a hang is a failure; never leave it running
        self.load_record()
        return code, self.output()

    def wait_recorded(self, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
        """Until the inner test has written its record: its topology is up and faulted."""
        path = self.record_path

        def recorded() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"inner pytest exited with {proc.returncode}:\n" + self.output()
                )
            return path.exists()

        wait_for(
            recorded, timeout_s=timeout_s, what="the inner test's topology", describe=self.output
        )
        self.load_record()

    def load_record(self) -> None:
        path = self.record_path
        if path.exists() and path.stat().st_size:
            self.records.append(json.loads(path.read_text()))

    # -- what must be gone ------------------------------------------------------------------
    def live_proxies(self) -> list[str]:
        """Recorded proxies that a Toxiproxy server still lists at the recorded address."""
        found = []
        for record in self.records:
            try:
                listed = httpx.get(
                    record["toxiproxy"] + "/proxies", timeout=2, trust_env=False
                ).json()
            except (httpx.HTTPError, ValueError):
                continue  # nothing answers there any more: its proxies are gone with it
            for name, port in record["proxies"].items():
                proxy = listed.get(name) if isinstance(listed, dict) else None
                if proxy and str(proxy.get("listen", "")).endswith(f":{port}"):
                    found.append(f"{name} on {proxy['listen']}")
        return found

    def temp_entries(self) -> list[str]:
        return sorted(p.name for p in self.tmpdir.iterdir() if p.name not in KEPT_IN_TMP)

    def leftovers(self) -> dict[str, list[str]]:
        found = {
            "processes": marked_processes(self.mark),
            "containers": owned_containers(self.owners),
            "proxies": self.live_proxies(),
            "temp entries": self.temp_entries(),
        }
        return {kind: items for kind, items in found.items() if items}

    def assert_clean(self, timeout_s: float = 15.0) -> None:
        """Nothing of ours is left; polled, since processes die asynchronously (PDEATHSIG)."""
        wait_for(
            lambda: not self.leftovers(),
            timeout_s=timeout_s,
            what="every process, container, proxy and temp entry of the inner sessions to be gone",
            describe=lambda: repr(self.leftovers()),
        )
