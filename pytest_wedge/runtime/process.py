"""The process runtime: each component a local subprocess in its own process group.

Logs go to files under the artifacts directory (never an unread pipe). Children carry the
session tag in their environment, die with their parent (PR_SET_PDEATHSIG), and anything a
SIGKILLed session left behind is swept by the next one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from pytest_wedge.errors import MissingBinaryError
from pytest_wedge.runtime.base import OWNER_ENV, SESSION_ENV, ComponentState, LogFiles
from pytest_wedge.topology.spec import ComponentSpec

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec. SIGKILL, because a child that is SIGSTOPped
    # (a pause fault) would never act on a catchable signal.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ProcessRuntime(LogFiles):
    """Runtime protocol over ``subprocess.Popen``."""

    name = "process"

    def __init__(self, artifacts_dir: Path, session_id: str) -> None:
        self.logs_dir = artifacts_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.session_id = session_id
        self._owner = owner_tag()
        self._specs: dict[str, ComponentSpec] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._paused: set[str] = set()
        self._lock = threading.RLock()
        # PDEATHSIG fires when the *thread* that forked the child exits, so every spawn happens
        # on one thread that lives as long as this runtime (watchdogs restart from other threads).
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wedge-spawn")

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, component: ComponentSpec) -> None:
        self._spawner.submit(self._spawn, component).result()

    def _spawn(self, component: ComponentSpec) -> None:
        log_path = self.logs_dir / f"{component.name}.log"
        env = {**os.environ, **dict(component.env), SESSION_ENV: self.session_id,
               OWNER_ENV: self._owner, "PYTHONUNBUFFERED": "1"}  # fmt: skip
        with self._lock, open(log_path, "ab") as log:
            log.write(f"--- start: {' '.join(component.argv)}\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(
                    component.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            except FileNotFoundError as exc:
                raise MissingBinaryError(
                    f"Cannot start {component.name}: {component.argv[0]} not found",
                    facts={"command": " ".join(component.argv)},
                    fix="run `make install` (it installs smg and toxiproxy-server)",
                ) from exc
            self._specs[component.name] = component
            self._procs[component.name] = proc
            self._paused.discard(component.name)

    def _signal(self, name: str, sig: signal.Signals) -> None:
        proc = self._procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def stop(self, name: str) -> None:
        """Graceful stop (SIGTERM), then SIGKILL after 2 s; smg alone takes ~5 s to drain."""
        proc = self._procs.get(name)
        if proc is None:
            return
        self.resume(name)
        self._signal(name, signal.SIGTERM)
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.kill(name)

    def kill(self, name: str) -> None:
        proc = self._procs.get(name)
        if proc is None:
            return
        self._signal(name, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
        self._paused.discard(name)

    def pause(self, name: str) -> None:
        self._signal(name, signal.SIGSTOP)
        self._paused.add(name)

    def resume(self, name: str) -> None:
        if name in self._paused:
            self._signal(name, signal.SIGCONT)
            self._paused.discard(name)

    def restart(self, name: str) -> None:
        spec = self._specs[name]
        self.kill(name)
        self.start(spec)

    # -- introspection ---------------------------------------------------------------------
    def pid(self, name: str) -> int | None:
        proc = self._procs.get(name)
        return proc.pid if proc is not None and proc.poll() is None else None

    def exit_code(self, name: str) -> int | None:
        proc = self._procs.get(name)
        return None if proc is None else proc.poll()

    def state(self, name: str) -> ComponentState:
        proc = self._procs.get(name)
        if proc is None:
            return "absent"
        if proc.poll() is not None:
            return "exited"
        return "paused" if name in self._paused else "running"

    def logs(self, name: str, tail: int = 40) -> str:
        return self.tail_log_file(name, tail)

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs.values() if p.poll() is None]

    def close(self) -> None:
        """Kill everything this runtime started; SIGKILL so teardown never waits on a drain."""
        for name in list(self._procs):
            self.kill(name)
        self._procs.clear()
        self._spawner.shutdown(wait=True)


def owner_tag() -> str:
    """``pid:create_time`` of this process: a PID alone can be reused after a SIGKILL."""
    me = psutil.Process()
    return f"{me.pid}:{me.create_time():.3f}"


def owner_alive(tag: str) -> bool:
    pid_text, _, created = tag.partition(":")
    try:
        owner = psutil.Process(int(pid_text))
        return f"{owner.create_time():.3f}" == created
    except (ValueError, psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def sweep_leftovers() -> list[int]:
    """Kill processes tagged by a pytest-wedge session whose owning pytest is gone.

    Only processes carrying our session tag are touched, and only when their owner is dead,
    so a concurrent session's children are safe.
    """
    swept: list[int] = []
    for proc in psutil.process_iter(["pid"]):
        try:
            tag = proc.environ().get(OWNER_ENV)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
        if tag is None or owner_alive(tag):
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
            swept.append(proc.pid)
    return swept
