"""The launcher's client of the stub fork server (``pytest_wedge.stubs.forkserver``). The
workers are the server's children, so it reports each one's end, and :class:`ForkedProcess`
offers what the runtime uses of ``subprocess.Popen``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

from pytest_wedge.errors import ComponentStartError, PortInUseError, file_tail
from pytest_wedge.stubs.listen_fds import LISTEN_FDS_ENV, format_listen_fds

SERVER_MODULE = "pytest_wedge.stubs.forkserver"
# The server imports aiohttp before its first answer: generous, since a loaded CI box is slow.
FIRST_FORK_TIMEOUT_S = 60.0


class ForkedProcess:
    """A worker the fork server forked; its exit code arrives through the server."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = threading.Event()

    def ended(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode


# The server's own environment, for its imports only (each worker gets its component's
# environment at the fork). Importing aiohttp builds two verified TLS client contexts, each
# reading the system's CA bundle: about 0.1 s of the server's 0.45 s of imports, paid before
# any stub of a topology can start. Stubs never speak TLS (they serve and fetch plain HTTP
# on 127.0.0.1), so OpenSSL is pointed at no bundle at all while they import.
IMPORT_ENV = {"SSL_CERT_FILE": os.devnull, "SSL_CERT_DIR": os.devnull}

# spawn(argv, extra environment, log path, descriptors the child inherits)
Spawn = Callable[[Sequence[str], Mapping[str, str], Path, Sequence[int]], "subprocess.Popen[bytes]"]


def bind_listening(ports: Sequence[int]) -> list[socket.socket]:
    """A listening socket on each of ``ports``, as the stub's own server would open it."""
    sockets: list[socket.socket] = []
    try:
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(1024)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise PortInUseError(
            f"Cannot listen on 127.0.0.1:{port} for a stub worker",
            facts={"error": f"{type(exc).__name__}: {exc}", "ports": ", ".join(map(str, ports))},
            fix="stop the program listening there (`ss -ltnp`), or let pytest-wedge pick ports",
        ) from exc
    return sockets


class StubForkClient:
    """One running fork server and the workers it forked for us; its environment carries the
    session's tags, which its workers inherit for the leftover sweep."""

    def __init__(
        self, python: str, spawn: Spawn, log_path: Path, listening: Sequence[socket.socket] = ()
    ) -> None:
        """``listening``: sockets bound to workers' ports, handed to the workers that serve
        them (the caller closes its own copies once the server is spawned)."""
        self.log_path = log_path
        sockets = {sock.getsockname()[1]: sock.fileno() for sock in listening}
        env = {**IMPORT_ENV, LISTEN_FDS_ENV: format_listen_fds(sockets)} if sockets else IMPORT_ENV
        self.proc = spawn((python, "-m", SERVER_MODULE), env, log_path, tuple(sockets.values()))
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin: IO[bytes] = self.proc.stdin
        self._write_lock = threading.Lock()
        self._next_id = 0
        self._replies: dict[int, Future[int]] = {}
        self._workers: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._gone = False  # its output ended: no request can be answered any more
        self._guard = threading.Lock()
        self._reader = threading.Thread(
            target=self._read, args=(self.proc.stdout,), name="wedge-forkserver-reader", daemon=True
        )
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and self._reader.is_alive()

    @property
    def idle(self) -> bool:
        """No worker of ours is running or being forked: closing the server costs nothing."""
        with self._guard:
            return not self._workers and not self._replies

    def fork(
        self, args: Sequence[str], env: Mapping[str, str], log_path: Path, name: str
    ) -> ForkedProcess:
        """Fork one worker running the stub with ``args``; returns once it has a PID."""
        reply: Future[int] = Future()
        with self._guard:
            if self._gone:
                raise self._failed(name, RuntimeError("the fork server exited"))
            self._next_id += 1
            request_id = self._next_id
            self._replies[request_id] = reply
        request = {"id": request_id, "args": list(args), "env": dict(env)}
        request |= {"cwd": os.getcwd(), "log": str(log_path)}
        try:
            with self._write_lock:
                self._stdin.write((json.dumps(request) + "\n").encode())
                self._stdin.flush()
            pid = reply.result(timeout=FIRST_FORK_TIMEOUT_S)
        except (OSError, TimeoutError, RuntimeError) as exc:
            raise self._failed(name, exc) from exc
        with self._guard:
            worker = self._workers.setdefault(pid, ForkedProcess(pid))
            if pid in self._early_exits:  # it ended before we filed it
                worker.ended(self._early_exits.pop(pid))
        return worker

    def _failed(self, name: str, exc: BaseException) -> ComponentStartError:
        return ComponentStartError(
            f"Cannot start {name}: the stub fork server did not fork it",
            facts={
                "error": f"{type(exc).__name__}: {exc}",
                "fork server": f"pid {self.proc.pid}, exit code {self.proc.poll()}",
                "log": str(self.log_path),
            },
            log_tail=file_tail(self.log_path, 25),
            fix="read the fork server's log tail; `python -m pytest_wedge.stubs --help` shows "
            "whether the stub modules import in this environment",
        )

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            message: dict[str, Any] = json.loads(line)
            with self._guard:
                if "exited" in message:
                    self._file_exit(int(message["exited"]), int(message["code"]))
                    continue
                reply = self._replies.pop(int(message["id"]))
            if "pid" in message:
                reply.set_result(int(message["pid"]))
            else:
                reply.set_exception(RuntimeError(str(message.get("error"))))
        # End of output: the server is gone, and its workers died with it (PDEATHSIG SIGKILL).
        with self._guard:
            self._gone = True
            for reply in self._replies.values():
                reply.set_exception(RuntimeError("the fork server exited"))
            self._replies.clear()
            for worker in self._workers.values():
                worker.ended(-signal.SIGKILL)

    def _file_exit(self, pid: int, code: int) -> None:
        worker = self._workers.pop(pid, None)
        if worker is None:
            self._early_exits[pid] = code
        else:
            worker.ended(code)

    def close(self) -> None:
        """End of input: the server kills whatever it still runs and exits."""
        try:
            with self._write_lock:
                self._stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._reader.join(timeout=5.0)
