"""`python -m pytest_wedge.stubs.forkserver`: one pre-imported parent that forks stub workers.

It pays the worker's imports (0.25 s of CPU, 40 MB) once and freezes the heap out of the GC, so
workers share its pages. Each worker has its own PID, session and log, and dies with the server
(``PR_SET_PDEATHSIG``). Single-threaded, no event loop: a fork copies locks no thread releases.
One JSON object per line: requests ``{"id", "args", "env", "cwd", "log"}`` on stdin; answers
``{"id", "pid"}`` or ``{"id", "error"}``, and ``{"exited": pid, "code": n}`` on stdout. A
pre-bound socket (``LISTEN_FDS_ENV``) goes to the first worker on its port. Stdin EOF kills all.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import random
import selectors
import signal
import sys
import traceback
from typing import Any

# The worker's own modules, imported before any fork: this is what the workers share.
from .config import parse_args
from .listen_fds import LISTEN_FDS_ENV, format_listen_fds, parse_listen_fds
from .server import main as serve_worker

_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's prctl, resolved before any fork (never dlopen in a fresh child)."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not glibc Linux: workers then rely on the end-of-stdin kill and the sweep


_PRCTL = _prctl()


def _send(message: dict[str, Any]) -> None:
    # os.write, not sys.stdout: a forked child must never inherit half a buffered line.
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def _close_all_but(keep: set[int], first: int = 3, end: int = 65536) -> None:
    for fd in sorted(keep | {end}):
        if fd >= first:
            os.closerange(first, fd)
            first = fd + 1


def _become_worker(request: dict[str, Any], server_pid: int, sockets: dict[int, int]) -> None:
    """In the forked child: detach, redirect, then run the stub. Never returns."""
    code = 1
    try:
        os.setsid()  # its own session and process group: killpg reaches this worker only
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server_pid:  # the server died before prctl took effect
            os._exit(1)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        # The server's pipes, its selector and other workers' sockets are not this worker's.
        _close_all_but(set(sockets.values()))
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(LISTEN_FDS_ENV, None)
        if sockets:
            os.environ[LISTEN_FDS_ENV] = format_listen_fds(sockets)
        os.chdir(request["cwd"])
        random.seed()  # a fork copies the parent's random state; a spawned worker seeds afresh
        gc.enable()
        serve_worker(parse_args(request["args"]))  # ends with os._exit(0)
        code = 0
    except SystemExit as exc:  # argparse's usage errors exit 2, as the spawned command does
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


class ForkServer:
    """The request loop: fork on each request, report each worker's end, stop at stdin EOF."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.workers: set[int] = set()
        # Listening sockets by port, each handed to the first worker that serves that port.
        self.listening = parse_listen_fds(os.environ.pop(LISTEN_FDS_ENV, ""))
        self.pending = b""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        self.wake_r = wake_r
        # SIGCHLD wakes the loop through this pipe; the handler itself does nothing.
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector = selectors.DefaultSelector()
        self.selector.register(0, selectors.EVENT_READ, "stdin")
        self.selector.register(wake_r, selectors.EVENT_READ, "child")

    def run(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "child":
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 512):
                            pass
                    self.reap()
                elif not self.read_requests():
                    self.shutdown()
                    return

    def read_requests(self) -> bool:
        """Handle every complete request line; False at end of stdin."""
        chunk = os.read(0, 65536)
        if not chunk:
            return False
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            if line.strip():
                self.fork(json.loads(line))
        return True

    def fork(self, request: dict[str, Any]) -> None:
        sockets = self.sockets_for(request["args"])
        try:
            pid = os.fork()
        except OSError as exc:
            pid = -1
            _send({"id": request["id"], "error": f"fork failed: {exc}"})
        if pid == 0:
            _become_worker(request, self.pid, sockets)
        for fd in sockets.values():  # the worker's now (or nobody's: the fork failed)
            os.close(fd)
        if pid < 0:
            return
        self.workers.add(pid)
        _send({"id": request["id"], "pid": pid})

    def sockets_for(self, args: list[str]) -> dict[int, int]:
        """The pre-bound sockets of the ports a worker with ``args`` serves, taken from the
        server: a later worker on the same port binds it itself."""
        if not self.listening:
            return {}
        try:
            config = parse_args(args)
        except SystemExit:  # the worker reports its own usage error
            return {}
        ports = (config.port, config.bootstrap_port)
        return {port: self.listening.pop(port) for port in ports if port in self.listening}

    def reap(self) -> None:
        while self.workers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.workers.discard(pid)
            _send({"exited": pid, "code": os.waitstatus_to_exitcode(status)})

    def shutdown(self) -> None:
        """The owner closed stdin (or died): no worker may outlive it."""
        for pid in list(self.workers):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for pid in list(self.workers):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        for fd in self.listening.values():
            os.close(fd)
        self.listening.clear()


def main() -> None:
    # Objects imported so far are shared with every worker; freezing them keeps the
    # collector from writing to (and so copying) their pages in each worker.
    gc.collect()
    gc.freeze()
    gc.disable()  # nothing here allocates much; each worker turns collection back on
    ForkServer().run()


if __name__ == "__main__":
    main()
