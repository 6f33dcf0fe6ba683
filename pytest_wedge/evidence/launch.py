"""How the probe starts its sampler: forked by the zygote (``evidence/zygote.py``).

One zygote per test process imports the sampler's modules once, in its own process, and forks
a sampler per probe, so a probe costs a fork instead of an interpreter's start-up (about 0.3 s
of CPU, most of what the probe cost a short test). The probe hands the zygote the sampler's
stdin, stdout and stderr as file descriptors; the sampler is the zygote's child, so the zygote
reports each one's exit code, and kills one only while it has not reaped it.

The zygote starts with the first probe and lives as long as this process: it exits at the end
of its input, when this process closes its socket (at exit, waiting for it) or dies in any way.
A zygote that died is replaced at the next probe's start.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from typing import IO, Any

from pytest_wedge.errors import WedgeError
from pytest_wedge.runtime.stub_forks import ForkedProcess

PROGRAM = "pytest_wedge.evidence.zygote"
MAX_MESSAGE = 65536
# What the zygote can become (evidence/zygote.py): the probe's sampler.
PROGRAMS = ("sampler",)

# The zygote imports the evidence modules before its first answer: seconds on a
# loaded CI machine, so a generous bound.
FIRST_FORK_TIMEOUT_S = 60.0
LOG_TAIL_BYTES = 4000


class ProbeError(WedgeError):
    """The probe's sampler process failed: it exited while the test ran, or would not start."""


class ForkedChild(ForkedProcess):
    """A sampler the zygote forked: ``pid``, ``poll()``, ``wait()`` and ``kill()``."""

    def __init__(self, pid: int, zygote: SamplerZygote) -> None:
        super().__init__(pid)
        self._zygote = zygote

    def kill(self) -> None:
        if self.returncode is None:
            self._zygote.kill(self.pid)


class SamplerZygote:
    """One running zygote and the samplers it forked for this process."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Unlinked at once: nothing is left in TMPDIR whatever happens to this process.
        self._log = tempfile.TemporaryFile(prefix="wedge-zygote-")  # noqa: SIM115 - lives with us
        try:
            # Its own session: a Ctrl-C meant for pytest reaches neither it nor its samplers
            # (a probe stops its sampler itself, and the test's own error is what must show).
            self.proc = subprocess.Popen(
                [sys.executable, "-m", PROGRAM],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                start_new_session=True,
            )
        finally:
            theirs.close()
        self._sock = ours
        self._send_lock = threading.Lock()
        self._guard = threading.Lock()
        self._next_id = 0
        self._replies: dict[int, Future[int]] = {}
        self._samplers: dict[int, ForkedChild] = {}
        self._early_exits: dict[int, int] = {}
        self._gone = False
        self.forked = False  # it has forked a child: its imports are done
        self._reader = threading.Thread(target=self._read, name="wedge-zygote-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        with self._guard:
            return not self._gone

    def fork(self, program: str, stdin: int, stdout: int, stderr: int) -> ForkedChild:
        """``program`` (one of :data:`PROGRAMS`) with these descriptors as its stdio; returns
        once it has a PID. The caller closes its own copies of the child's ends afterwards."""
        reply: Future[int] = Future()
        with self._guard:
            if self._gone:
                raise self._failed(RuntimeError("the zygote exited"))
            self._next_id += 1
            request_id = self._next_id
            self._replies[request_id] = reply
        try:
            with self._send_lock:
                request = {"id": request_id, "program": program}
                socket.send_fds(self._sock, [json.dumps(request).encode()], [stdin, stdout, stderr])
            pid = reply.result(timeout=FIRST_FORK_TIMEOUT_S)
        except (OSError, TimeoutError, RuntimeError) as exc:
            with self._guard:
                self._replies.pop(request_id, None)
            raise self._failed(exc) from exc
        with self._guard:
            sampler = self._samplers.setdefault(pid, ForkedChild(pid, self))
            if pid in self._early_exits:  # it ended before we filed it
                sampler.ended(self._early_exits.pop(pid))
        return sampler

    def kill(self, pid: int) -> None:
        with contextlib.suppress(OSError), self._send_lock:
            self._sock.send(json.dumps({"kill": pid}).encode())

    def _failed(self, exc: BaseException) -> ProbeError:
        return ProbeError(
            "The probe's sampler could not be forked",
            facts={
                "error": f"{type(exc).__name__}: {exc}",
                "zygote": f"pid {self.proc.pid}, exit code {self.proc.poll()}",
                "command": f"{sys.executable} -m {PROGRAM}",
            },
            log_tail=self.log_tail(),
            fix="the log tail says why; check that this Python can run "
            f"`python -m {PROGRAM}` (it imports the evidence modules)",
        )

    def log_tail(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._log.seek(0, 2)
            self._log.seek(max(0, self._log.tell() - LOG_TAIL_BYTES))
            return self._log.read().decode(errors="replace")
        return ""

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MAX_MESSAGE)
            except OSError:
                break
            if not data:
                break
            self._file(json.loads(data))
        # End of output: the zygote is gone, and its samplers died with it (PDEATHSIG SIGKILL).
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)
        with self._guard:
            self._gone = True
            for reply in self._replies.values():
                reply.set_exception(RuntimeError(f"the zygote exited (code {self.proc.poll()})"))
            self._replies.clear()
            for sampler in self._samplers.values():
                sampler.ended(-signal.SIGKILL)

    def _file(self, message: dict[str, Any]) -> None:
        with self._guard:
            if "exited" in message:
                pid, code = int(message["exited"]), int(message["code"])
                sampler = self._samplers.pop(pid, None)
                if sampler is None:
                    self._early_exits[pid] = code
                else:
                    sampler.ended(code)
                return
            reply = self._replies.pop(int(message["id"]), None)
        if reply is None:
            return  # its fork() gave up waiting
        if "pid" in message:
            self.forked = True
            reply.set_result(int(message["pid"]))
        else:
            reply.set_exception(RuntimeError(str(message.get("error"))))

    def close(self) -> None:
        """End of input: the zygote exits (its samplers end at their own end of input)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)
        self._log.close()


_shared: SamplerZygote | None = None
_shared_lock = threading.Lock()


def shared_zygote() -> SamplerZygote:
    """This process's zygote, started (or replaced, if it died) on first use."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive:
            _shared = SamplerZygote()
        return _shared


@atexit.register
def _close_at_exit() -> None:
    """The zygote and its children are gone before this process is: a session's end leaves no
    process behind, not even for the moment the zygote takes to see its end of input."""
    if _shared is not None and _shared.alive:
        _shared.close()


def _zygote() -> SamplerZygote:
    try:
        return shared_zygote()
    except OSError as exc:  # no SOCK_SEQPACKET here, no descriptors left, no fork
        raise ProbeError(
            "The probe's sampler could not be forked: its zygote did not start",
            facts={
                "error": f"{type(exc).__name__}: {exc}",
                "command": f"{sys.executable} -m {PROGRAM}",
            },
            fix="the probe needs Linux's AF_UNIX SOCK_SEQPACKET sockets and fork; "
            "--wedge-probe-interval=0 turns it off",
        ) from exc


def zygote_warm() -> bool:
    """Whether a fork now takes milliseconds: this process's zygote runs and has forked."""
    zygote = _shared
    return zygote is not None and zygote.alive and zygote.forked


def fork_child(program: str, stderr: int) -> tuple[ForkedChild, IO[bytes], IO[bytes]]:
    """``program`` forked by this process's zygote, with two pipes: its stdin (only this process
    ever holds the write end, so its end of file is our stop or this process's death) and its
    stdout. ``ProbeError`` when it cannot be forked."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        child = _zygote().fork(program, in_r, out_w, stderr)
    except ProbeError:
        for fd in (in_w, out_r):
            os.close(fd)
        raise
    finally:  # the zygote and the child hold their own copies of these ends
        os.close(in_r)
        os.close(out_w)
    return child, os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb")


def reap(child: ForkedChild) -> None:
    """Last resort (its owner was dropped or the interpreter exits without a stop)."""
    if child.poll() is None:
        with contextlib.suppress(OSError):
            child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(2)


def log_tail() -> str:
    """The current zygote's log tail (empty without one)."""
    return _shared.log_tail() if _shared is not None else ""
