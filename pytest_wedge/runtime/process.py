"""The process runtime: each component a local process in its own process group.

Stub workers are forked by a pre-imported stub fork server (``runtime/stub_forks.py``), one per
runtime; everything else (and a stub of a foreign command line) is spawned. Logs go to files
under the artifacts directory (never an unread pipe). Children carry the session tag in their
environment, die with their parent (PR_SET_PDEATHSIG; a forked worker with its fork server,
which dies with us), and anything a SIGKILLed session left behind is swept by the next one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_wedge.errors import AlreadyRunningError, ComponentStartError, MissingBinaryError
from pytest_wedge.runtime.base import (
    OWNER_ENV,
    SESSION_ENV,
    ComponentState,
    LogFiles,
    wait_stopped,
)
from pytest_wedge.runtime.owner_tags import owner_tag
from pytest_wedge.runtime.stub_forks import ForkServer, Proc, bind_listening, stub_args
from pytest_wedge.spec.topology import ComponentSpec

_PR_SET_PDEATHSIG = 1


def _resolve_prctl() -> Callable[[int, int], int] | None:
    """libc's ``prctl``, looked up in the parent: ``dlopen`` in a child forked from a
    multi-threaded parent can deadlock on a loader lock another thread held at fork time."""
    try:
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not glibc Linux: children then rely on the sweep alone
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong)
    prctl.restype = ctypes.c_int
    resolved: Callable[[int, int], int] = prctl
    return resolved


_PRCTL = _resolve_prctl()


def _die_with_parent() -> None:
    # Runs in the child between fork and exec, so it only calls what the parent resolved.
    # SIGKILL, because a child that is SIGSTOPped (a pause fault) would never act on a
    # catchable signal.
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class _Child:
    """One started component. Replaced whole on every change, so a reader never sees the
    process of one start with the paused flag of another."""

    spec: ComponentSpec
    proc: Proc
    paused: bool = False

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class ProcessRuntime(LogFiles):
    """Runtime protocol over ``subprocess.Popen``.

    Every action on a component holds that component's lock, so a watchdog thread's restart
    and a fault's pause of the same component run one after the other, never interleaved;
    actions on different components run in parallel. Reads (``state``, ``pid``) take no lock:
    they see one whole :class:`_Child` record.
    """

    name = "process"

    def __init__(self, artifacts_dir: Path, session_id: str) -> None:
        self.logs_dir = artifacts_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.session_id = session_id
        self._owner = owner_tag()
        self._children: dict[str, _Child] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self._closed = False
        # PDEATHSIG fires when the *thread* that forked the child exits, so every spawn happens
        # on one thread that lives as long as this runtime (watchdogs restart from other threads).
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wedge-spawn")
        self._forkservers: dict[str, ForkServer] = {}  # by interpreter path
        self._forkservers_guard = threading.Lock()

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[_Child | None]:
        """Hold ``name``'s lock (re-entrant: restart calls kill and start under it)."""
        with self._locks_guard:
            lock = self._locks.setdefault(name, threading.RLock())
        with lock:
            yield self._children.get(name)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, component: ComponentSpec) -> None:
        """Start ``component``. A name that is running or paused raises AlreadyRunningError
        rather than replacing it: the old process would be left running with no owner."""
        with self._locked(component.name) as child:
            if self._closed:
                raise ComponentStartError(
                    f"Cannot start {component.name}: its process runtime is closed",
                    facts={"session": self.session_id},
                    fix="start components only while their session is open",
                )
            if child is not None and child.alive:
                raise AlreadyRunningError(
                    f"Cannot start {component.name}: it is already running",
                    facts={
                        "pid": child.proc.pid,
                        "state": self.state(component.name),
                        "running command": " ".join(child.spec.argv),
                    },
                    fix=f"call restart({component.name!r}) to replace it, or stop it first",
                )
            log_path = self.logs_dir / f"{component.name}.log"
            with open(log_path, "ab") as log:
                log.write(f"--- start: {' '.join(component.argv)}\n".encode())
            # A command worker runs as its user wrote it, even when that is our stub.
            args = None if component.foreign else stub_args(component.argv)
            if args is None:
                proc: Proc = self._spawner.submit(self._spawn, component, log_path).result()
            else:
                server = self._forkserver(component.argv[0])
                proc = server.fork(args, self._env(component.env), log_path, component.name)
            self._children[component.name] = _Child(component, proc)

    def warm_up(self, python: str, listen_ports: Sequence[int] = ()) -> frozenset[int]:
        """Start the stub fork server of ``python`` now. It returns once the server is
        spawned, not imported: the imports overlap whatever the caller does next.

        ``listen_ports`` (the stub workers' ports) are bound and listening before the server
        starts, and each goes to the first worker that serves it: from then on a client (the
        router) that connects waits in the accept queue instead of being refused. Returns the
        ports so bound: none when the server was already running."""
        if self._closed:
            return frozenset()
        with self._forkservers_guard:
            server = self._forkservers.get(python)
            if server is not None and server.alive:
                return frozenset()
            listening = bind_listening(listen_ports)
            try:
                self._forkservers[python] = self._start_forkserver(python, listening)
            finally:
                for sock in listening:  # the fork server has its own copies now
                    sock.close()
        return frozenset(listen_ports)

    def release_idle(self) -> None:
        """Close the fork servers that run no worker (a topology closed without its runtime,
        as a session does when it evicts one): an idle server is 40 MB held for nothing.
        The next stub start boots a new one."""
        with self._forkservers_guard:
            idle = {python: s for python, s in self._forkservers.items() if s.idle}
            for python in idle:
                del self._forkservers[python]
        for server in idle.values():
            server.close()

    def _forkserver(self, python: str) -> ForkServer:
        """The running fork server for ``python``, started if need be."""
        with self._forkservers_guard:
            server = self._forkservers.get(python)
            if server is None or not server.alive:
                server = self._forkservers[python] = self._start_forkserver(python)
            return server

    def _start_forkserver(self, python: str, listening: Sequence[socket.socket] = ()) -> ForkServer:
        # On the spawner thread, as every child: PDEATHSIG follows the thread that forked.
        log_path = self.logs_dir / "stub-forkserver.log"
        return self._spawner.submit(
            ForkServer, python, self._popen_piped, log_path, listening
        ).result()

    def _env(self, extra: Mapping[str, str] | Sequence[tuple[str, str]]) -> dict[str, str]:
        return {
            **os.environ,
            **dict(extra),
            SESSION_ENV: self.session_id,
            OWNER_ENV: self._owner,
            "PYTHONUNBUFFERED": "1",
        }

    def _spawn(self, component: ComponentSpec, log_path: Path) -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as log:
            try:
                return self._popen(component.argv, self._env(component.env), log)
            except FileNotFoundError as exc:
                raise MissingBinaryError(
                    f"Cannot start {component.name}: {component.argv[0]} not found",
                    facts={"command": " ".join(component.argv)},
                    fix="run `make install` (it installs smg and toxiproxy-server)",
                ) from exc

    def _popen_piped(
        self,
        argv: Sequence[str],
        extra_env: Mapping[str, str],
        log_path: Path,
        pass_fds: Sequence[int] = (),
    ) -> subprocess.Popen[bytes]:
        """A process whose stdin and stdout are our pipes (the fork server's protocol)."""
        with open(log_path, "ab") as log:
            return self._popen(
                argv,
                self._env(extra_env),
                log,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=pass_fds,
            )

    @staticmethod
    def _popen(
        argv: Sequence[str],
        env: Mapping[str, str],
        log: Any,
        stdin: int = subprocess.DEVNULL,
        stdout: int | None = None,
        pass_fds: Sequence[int] = (),
    ) -> subprocess.Popen[bytes]:
        """Its own session (signals reach its group only), death with this runtime's spawner
        thread (it runs on that thread); output to ``log`` unless ``stdout`` is a pipe."""
        return subprocess.Popen(
            argv,
            stdin=stdin,
            stdout=log if stdout is None else stdout,
            stderr=subprocess.STDOUT if stdout is None else log,
            env=env,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            preexec_fn=_die_with_parent,
        )

    @staticmethod
    def _signal(child: _Child, sig: signal.Signals) -> bool:
        """Signal the child's process group; False when it has already exited."""
        if not child.alive:
            return False
        try:
            os.killpg(child.proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self, name: str) -> None:
        """Graceful stop (SIGTERM), then SIGKILL after 2 s; smg alone takes ~5 s to drain."""
        with self._locked(name) as child:
            if child is None:
                return
            self.resume(name)
            self._signal(child, signal.SIGTERM)
            try:
                child.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.kill(name)

    def kill(self, name: str) -> None:
        with self._locked(name) as child:
            if child is None:
                return
            self._signal(child, signal.SIGKILL)  # a stopped (paused) process dies too
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=5.0)
            self._children[name] = replace(child, paused=False)

    def pause(self, name: str) -> None:
        """SIGSTOP, returning once the process is stopped (the signal is delivered when the
        kernel next schedules it, which on a loaded machine comes after ``killpg`` returns);
        a no-op on a component that is not running (there is nothing to hold)."""
        with self._locked(name) as child:
            if child is not None and self._signal(child, signal.SIGSTOP):
                self._children[name] = replace(child, paused=True)
                wait_stopped(name, child.proc.pid)

    def resume(self, name: str) -> None:
        with self._locked(name) as child:
            if child is not None and child.paused:
                self._signal(child, signal.SIGCONT)
                self._children[name] = replace(child, paused=False)

    def restart(self, name: str) -> None:
        """Kill and start again from the same spec: a new process with a new PID."""
        with self._locked(name) as child:
            if child is None:
                raise KeyError(name)
            self.kill(name)
            self.start(child.spec)

    # -- introspection ---------------------------------------------------------------------
    def pid(self, name: str) -> int | None:
        child = self._children.get(name)
        return child.proc.pid if child is not None and child.alive else None

    def exit_code(self, name: str) -> int | None:
        child = self._children.get(name)
        return None if child is None else child.proc.poll()

    def state(self, name: str) -> ComponentState:
        child = self._children.get(name)
        if child is None:
            return "absent"
        if not child.alive:
            return "exited"
        return "paused" if child.paused else "running"

    def logs(self, name: str, tail: int = 40) -> str:
        return self.tail_log_file(name, tail)

    def pids(self) -> list[int]:
        return [c.proc.pid for c in list(self._children.values()) if c.alive]

    def close(self) -> None:
        """Kill everything this runtime started; SIGKILL so teardown never waits on a drain.

        A start racing ``close`` either finishes first (and is killed here) or sees the
        runtime closed and raises; no child outlives the runtime.
        """
        self._closed = True
        with self._locks_guard:
            names = list(self._locks)
        for name in names:
            with self._locked(name):
                self.kill(name)
                self._children.pop(name, None)
        with self._forkservers_guard:
            servers = list(self._forkservers.values())
            self._forkservers.clear()
        for server in servers:
            server.close()
        self._spawner.shutdown(wait=True)
