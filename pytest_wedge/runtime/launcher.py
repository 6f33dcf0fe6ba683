"""The one way the process runtime starts a process (:meth:`Launcher.launch`). Our stub is forked
by its interpreter's stub fork server (up in milliseconds, not a quarter second); anything else
is spawned. Either way the child has its own session, the session's tags, its log file, and
dies with this process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Protocol

from pytest_wedge.errors import MissingBinaryError
from pytest_wedge.runtime.stub_forks import StubForkClient, bind_listening
from pytest_wedge.spec.component import STUB_MODULE, ComponentSpec

_PR_SET_PDEATHSIG = 1


class Proc(Protocol):
    """What the runtime needs of a child: ``subprocess.Popen`` and a forked worker alike."""

    @property
    def pid(self) -> int: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


def stub_args(argv: Sequence[str]) -> list[str] | None:
    """The stub's own arguments when ``argv`` is ``python -m pytest_wedge.stubs ...``."""
    if len(argv) >= 3 and tuple(argv[1:3]) == ("-m", STUB_MODULE):
        return list(argv[3:])
    return None


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


class Launcher:
    """Launches components for one process runtime; ``tags`` go into every child's environment."""

    def __init__(self, logs_dir: Path, tags: Mapping[str, str]) -> None:
        self.logs_dir = logs_dir
        self._tags = dict(tags)
        # PDEATHSIG fires when the *thread* that forked the child exits, so every spawn happens
        # on one thread that lives as long as this launcher (watchdogs restart from others).
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wedge-spawn")
        self._fork_clients: dict[str, StubForkClient] = {}  # by interpreter path
        self._guard = threading.Lock()

    def launch(self, component: ComponentSpec, log_path: Path) -> Proc:
        """Start ``component``'s process, its output appended to ``log_path``."""
        args = None if component.foreign else stub_args(component.argv)
        if args is None:
            return self._spawner.submit(self._spawn, component, log_path).result()
        client = self._fork_client(component.argv[0])
        return client.fork(args, self.env(component.env), log_path, component.name)

    def warm_up(self, python: str, listen_ports: Sequence[int] = ()) -> frozenset[int]:
        """Spawn ``python``'s stub fork server now, with ``listen_ports`` already listening (an
        early connect waits rather than being refused); returns the ports so bound."""
        with self._guard:
            client = self._fork_clients.get(python)
            if client is not None and client.alive:
                return frozenset()
            listening = bind_listening(listen_ports)
            try:
                self._fork_clients[python] = self._start_fork_server(python, listening)
            finally:
                for sock in listening:  # the fork server has its own copies now
                    sock.close()
        return frozenset(listen_ports)

    def release_idle(self) -> None:
        """Close the fork servers that run no worker: an idle one holds 40 MB for nothing."""
        with self._guard:
            idle = {python: c for python, c in self._fork_clients.items() if c.idle}
            for python in idle:
                del self._fork_clients[python]
        for client in idle.values():
            client.close()

    def close(self) -> None:
        """Close the fork servers (their workers die with them) and the spawner thread."""
        with self._guard:
            clients = list(self._fork_clients.values())
            self._fork_clients.clear()
        for client in clients:
            client.close()
        self._spawner.shutdown(wait=True)

    def env(self, extra: Mapping[str, str] | Sequence[tuple[str, str]]) -> dict[str, str]:
        return {**os.environ, **dict(extra), **self._tags, "PYTHONUNBUFFERED": "1"}

    def _fork_client(self, python: str) -> StubForkClient:
        with self._guard:
            client = self._fork_clients.get(python)
            if client is None or not client.alive:
                client = self._fork_clients[python] = self._start_fork_server(python)
            return client

    def _start_fork_server(
        self, python: str, listening: Sequence[socket.socket] = ()
    ) -> StubForkClient:
        # On the spawner thread, as every child: PDEATHSIG follows the thread that forked.
        log_path = self.logs_dir / "stub-forkserver.log"
        return self._spawner.submit(
            StubForkClient, python, self._spawn_piped, log_path, listening
        ).result()

    def _spawn(self, component: ComponentSpec, log_path: Path) -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as log:
            try:
                return _popen(component.argv, self.env(component.env), log)
            except FileNotFoundError as exc:
                raise MissingBinaryError(
                    f"Cannot start {component.name}: {component.argv[0]} not found",
                    facts={"command": " ".join(component.argv)},
                    fix="run `pytest-wedge doctor`: it says which program is missing and how to install it",
                ) from exc

    def _spawn_piped(
        self,
        argv: Sequence[str],
        extra_env: Mapping[str, str],
        log_path: Path,
        pass_fds: Sequence[int] = (),
    ) -> subprocess.Popen[bytes]:
        """A process whose stdin and stdout are our pipes (the fork server's protocol)."""
        with open(log_path, "ab") as log:
            return _popen(argv, self.env(extra_env), log, piped=True, pass_fds=pass_fds)


def _popen(
    argv: Sequence[str],
    env: Mapping[str, str],
    log: IO[bytes],
    *,
    piped: bool = False,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """Its own session, death with the spawner thread; output to ``log`` unless ``piped``."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
        stdout=subprocess.PIPE if piped else log,
        stderr=log if piped else subprocess.STDOUT,
        env=env,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
        preexec_fn=_die_with_parent,
    )
