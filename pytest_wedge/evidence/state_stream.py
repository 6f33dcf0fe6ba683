"""The stubs' states, streamed to the sampler: one open connection per stub, one line per tick.

The probe samples every stub's state every tick (ten times a second by default). As a GET each
time, that was the largest part of what the probe cost: the stub's web server handling a request
(about 0.3 ms of its CPU) and the sampler sending it (0.2 ms), per stub and tick, so 160 requests
a second on an 8P+8D topology. A stub's ``/control/state/stream?interval_s=...`` instead writes
its state as one JSON line on an open connection every interval (the state says when it was
taken: ``at``, by the stub's clock). The sampler does not even wake up for the lines: their
sockets are not watched by its event loop, and it reads them in batches, on its slow ticks (the
kernel keeps them meanwhile). Every line is kept for a few seconds, so the state at any recent
moment can be read back: that is how the sampler fills in the fast samples between two slow
ones without waking up for each (on this machine a wake-up alone cost a process about 0.3 ms).

A stub's clock need not be the sampler's (a remote Docker engine): a moment is mapped onto the
stub's clock by the smallest delay between a line's ``at`` and its reading seen lately, which
is the clocks' difference plus the shortest wait of a line in the kernel (0 until a few
readings agree, unless one shows the stub's clock ahead).

A state counts only while it is fresh: a paused or wedged stub stops writing, and once no line
has come for an interval plus the probe's timeout its state reads as unanswered, as a GET to it
would time out. A lost connection (the stub stopped or restarted) is opened again at the next
tick. Slow samples take the streamed states too, and GET only the state of a stub whose stream
has none fresh. A state says when it was taken (``at``): the oracle's per-origin rates are
timed by it, not by the sample that carries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections import deque
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httptools

STREAM_PATH = "/control/state/stream"
READ_BYTES = 1 << 16


class _StateLines:
    """One stub's stream on a non-blocking socket that nothing watches: :meth:`drain` reads
    what has arrived and keeps the newest complete line."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parser = httptools.HttpResponseParser(self)
        self.pending = b""
        self.lines: list[bytes] = []
        self.ended: str | None = None  # why the stream is over, once it is

    def drain(self) -> list[bytes]:
        """The complete lines that arrived since the last drain, oldest first."""
        self.lines = []
        while self.ended is None:
            try:
                data = self.sock.recv(READ_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:
                self.end(f"closed its state stream ({type(exc).__name__})")
                break
            if not data:
                self.end("closed its state stream")
                break
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError as exc:
                self.end(f"sent a malformed answer: {exc}"[:200])
        return self.lines

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status != 200:
            self.end(f"answered {status}")

    def on_body(self, body: bytes) -> None:
        lines = (self.pending + body).split(b"\n")
        self.pending = lines.pop()
        self.lines += lines

    def on_message_complete(self) -> None:
        self.end("ended its state stream")

    def end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
            self.sock.close()


# How many recent (reading time - newest line's "at") delays give a stub's clock offset, and
# how many it takes before a positive one is believed: the first readings of a stream that
# stopped at once (a pause right after the probe started) would shift every line by the pause.
OFFSET_READINGS = 20
OFFSET_TRUSTED_AFTER = 5


class StateStreams:
    """Every stub's recent streamed states: :meth:`tick` reads the streams (and opens the
    missing ones), :meth:`states` gives the states fresh at a moment as a gather's results and
    failures. ``keep_s``: how far back states can be read."""

    def __init__(
        self, stubs: Mapping[str, str], interval_s: float, timeout_s: float, keep_s: float = 2.0
    ) -> None:
        self.stubs = dict(stubs)  # name -> control API base URL
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.keep_s = keep_s
        # name -> (when the stub took it, by its clock, or when it was read; state)
        self._history: dict[str, deque[tuple[float, Any]]] = {}
        self._delays: dict[str, deque[float]] = {}  # name -> recent reading delays
        self._why: dict[str, str] = {}  # name -> why its stream gives no state
        self._open: dict[str, _StateLines] = {}
        self._connecting: dict[str, asyncio.Task[None]] = {}

    def tick(self) -> None:
        """Read every open stream; open one to every stub that has none (nor one opening)."""
        now = time.time()
        for name in self.stubs:
            stream = self._open.get(name)
            if stream is not None:
                self._file(name, stream.drain(), now)
                if stream.ended is not None:
                    self._why[name] = stream.ended
                    del self._open[name]  # opened again at the next tick
            elif name not in self._connecting:
                self._connecting[name] = asyncio.create_task(self._connect(name))
            history = self._history.get(name)
            oldest = now - self._offset(name) - self.keep_s
            while history and len(history) > 1 and history[0][0] < oldest:
                history.popleft()

    def _offset(self, name: str) -> float:
        """Seconds to add to a time on stub ``name``'s clock to get this one's: the smallest
        delay between a line's ``at`` and its reading, which is the clocks' difference plus
        the shortest wait of a line in the kernel; 0 until there are enough readings, unless
        one already shows the stub's clock ahead."""
        delays = self._delays.get(name)
        if not delays:
            return 0.0
        smallest = min(delays)
        return smallest if smallest < 0 or len(delays) >= OFFSET_TRUSTED_AFTER else 0.0

    def _file(self, name: str, lines: list[bytes], now: float) -> None:
        states: list[Any] = []
        for line in lines:
            try:
                states.append(json.loads(line))
            except ValueError as exc:
                self._why[name] = f"sent a line that is not JSON: {exc}"[:200]
        if not states:
            return
        self._why.pop(name, None)
        stamped = isinstance(states[-1], dict) and isinstance(states[-1].get("at"), int | float)
        if stamped:
            delays = self._delays.setdefault(name, deque(maxlen=OFFSET_READINGS))
            delays.append(now - states[-1]["at"])
        history = self._history.setdefault(name, deque())
        for state in states:
            at = state.get("at") if stamped and isinstance(state, dict) else None
            history.append((at if isinstance(at, int | float) else now - self._offset(name), state))

    async def _connect(self, name: str) -> None:
        address = urlsplit(self.stubs[name])
        host, port = address.hostname or "127.0.0.1", address.port or 80
        request = (
            f"GET {STREAM_PATH}?interval_s={self.interval_s:g} HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\n\r\n"
        ).encode()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(self.timeout_s):
                await asyncio.get_running_loop().sock_connect(sock, (host, port))
            sock.send(request)  # a few dozen bytes into an empty buffer: never blocks
        except (OSError, TimeoutError) as exc:
            sock.close()
            self._why[name] = f"did not answer: ConnectError: {exc}"[:200]
            return
        finally:
            self._connecting.pop(name, None)
        self._open[name] = _StateLines(sock)

    def states(self, at: float | None = None) -> tuple[dict[str, Any], dict[str, str]]:
        """``{"<stub> state": state}`` for each stub whose newest state at the moment ``at``
        (seconds since the epoch; default now) was taken no longer than an interval plus the
        probe's timeout before it, and why for each other one, keyed as a GET's would be."""
        results: dict[str, Any] = {}
        failed: dict[str, str] = {}
        moment = time.time() if at is None else at
        max_age_s = self.interval_s + self.timeout_s
        for name in self.stubs:
            theirs = moment - self._offset(name)  # the moment on the stub's clock
            taken = next(
                ((t, state) for t, state in reversed(self._history.get(name, ())) if t <= theirs),
                None,
            )
            if taken is not None and theirs - taken[0] <= max_age_s:
                results[f"{name} state"] = taken[1]
            elif name in self._why:
                failed[f"{name} state"] = self._why[name]
            else:
                failed[f"{name} state"] = f"sent no state within {max_age_s:.2f} s"
        return results, failed

    async def close(self) -> None:
        for task in list(self._connecting.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for stream in self._open.values():
            stream.end("closed")
        self._open.clear()
