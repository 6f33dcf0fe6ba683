"""`python -m pytest_wedge.evidence.zygote`: one pre-imported parent that forks probe samplers.

A sampler started as a fresh interpreter spends about 0.3 s of CPU importing aiohttp, httpx,
prometheus_client and the evidence modules before its first sample; on a busy 2-core machine
that alone was most of what a probe cost a short test. This program pays it once per test
process: it imports the sampler, freezes the heap out of the garbage collector (a collection in
a sampler then does not touch, and copy, the shared pages), and forks one sampler per probe.

Each sampler keeps the lifetime of a spawned one: it reads its configuration and its stdin's end
of file from a pipe only the probe writes (so it exits when the probe stops and when the test
process dies in any way), and it dies with this program by ``PR_SET_PDEATHSIG``.

Protocol: stdin is one end of an ``AF_UNIX`` ``SOCK_SEQPACKET`` pair (one message per request,
so file descriptors never mix between requests). Requests, JSON:

- ``{"id": 1, "program": "sampler"}`` with three descriptors (``socket.send_fds``): the child's
  stdin, stdout and stderr. Answer ``{"id": 1, "pid": 4242}`` or ``{"id": 1, "error": "..."}``.
  ``program`` is ``sampler`` (the probe's, ``evidence/sampler.py``, which also meters the
  links), the one program there is; the field leaves room for others.
- ``{"kill": 4242}``: SIGKILL to a sampler this program forked and has not reaped (so never to
  a reused PID).

When a sampler ends: ``{"exited": 4242, "code": -9}`` (negative: the signal, as ``subprocess``
reports it). End of input means the owner is gone or exiting: this program kills and reaps the
samplers it still has, and exits.

The program stays single-threaded and never runs an event loop: forking a process that has
threads copies locks that no thread will ever release in the child.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import selectors
import signal
import socket
import sys
import traceback
from typing import Any, NoReturn

# What every child shares: the HTTP client, the parsers, the snapshot functions.
from pytest_wedge.evidence import sampler
from pytest_wedge.evidence.launch import MAX_MESSAGE

SERVE = {"sampler": sampler.serve}
SAMPLER_FDS = 3  # stdin, stdout, stderr
_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's prctl, resolved before any fork (never dlopen in a fresh child)."""
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not glibc Linux: samplers then rely on their end of input alone


_PRCTL = _prctl()


def _become(program: str, fds: list[int], zygote_pid: int) -> NoReturn:
    """In the forked child: take the owner's pipes as stdio, then run ``program``. Never
    returns."""
    code = 1
    try:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote_pid:  # the zygote died before prctl took effect
            os._exit(1)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 65536)  # the zygote's socket, wake-up pipe and selector are not ours
        gc.enable()
        code = SERVE[program](os.fdopen(0, "rb"), os.fdopen(1, "wb"))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


class Zygote:
    """The request loop: fork on each request, report each sampler's end, stop at end of input."""

    def __init__(self, sock: socket.socket) -> None:
        self.pid = os.getpid()
        self.sock = sock
        self.samplers: set[int] = set()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        self.wake_r = wake_r
        # SIGCHLD wakes the loop through this pipe; the handler itself does nothing.
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector = selectors.DefaultSelector()
        self.selector.register(sock, selectors.EVENT_READ, "request")
        self.selector.register(wake_r, selectors.EVENT_READ, "child")

    def _send(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the owner is gone: the next read ends the loop
            self.sock.send(json.dumps(message).encode())

    def run(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "child":
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 512):
                            pass
                    self.reap()
                elif not self.handle():
                    self.shutdown()
                    return

    def handle(self) -> bool:
        """One request; False at end of input."""
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, SAMPLER_FDS)
        except ConnectionResetError:
            return False
        if not data:
            return False
        try:
            request = json.loads(data)
            if "kill" in request:
                self.kill(int(request["kill"]))
            else:
                self.fork(request, fds)
        finally:
            for fd in fds:  # only the sampler and the probe hold the pipes now
                os.close(fd)
        return True

    def fork(self, request: dict[str, Any], fds: list[int]) -> None:
        program = request.get("program", "sampler")
        if program not in SERVE:
            self._send({"id": request.get("id"), "error": f"no program {program!r}"})
            return
        if len(fds) != SAMPLER_FDS:
            self._send(
                {
                    "id": request.get("id"),
                    "error": f"got {len(fds)} descriptors, "
                    f"not {SAMPLER_FDS} (stdin, stdout, stderr)",
                }
            )
            return
        try:
            pid = os.fork()
        except OSError as exc:
            self._send({"id": request.get("id"), "error": f"fork failed: {exc}"})
            return
        if pid == 0:
            self.sock.detach()  # its descriptor is closed with the rest, never by a finalizer
            _become(program, fds, self.pid)
        self.samplers.add(pid)
        self._send({"id": request.get("id"), "pid": pid})

    def kill(self, pid: int) -> None:
        if pid in self.samplers:  # not reaped yet: the PID is still this sampler's
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def shutdown(self) -> None:
        """The owner is gone (or exiting): its samplers go now, not at their own end of input
        a moment later, so nothing of the owner's outlives its exit."""
        for pid in list(self.samplers):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in list(self.samplers):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def reap(self) -> None:
        while self.samplers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.samplers.discard(pid)
            self._send({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def main() -> None:
    sock = socket.socket(fileno=0)
    # Objects imported so far are shared with every sampler; freezing them keeps the
    # collector from writing to (and so copying) their pages in each sampler.
    gc.collect()
    gc.freeze()
    gc.disable()  # nothing here allocates much; each sampler turns collection back on
    Zygote(sock).run()


if __name__ == "__main__":
    main()
