"""The stubs' states, streamed to the sampler: one open connection per stub, one line per tick.

The probe reads every stub's state every tick (ten times a second by default). As a GET each
time, that was the largest part of what the probe cost: the stub's web server handling a request
(about 0.3 ms of its CPU) and the sampler sending it (0.2 ms), per stub and tick, so 160 requests
a second on an 8P+8D topology. A stub's ``/control/state/stream?interval_s=...`` instead writes
its state as one JSON line on an open connection every interval, which costs both ends a
fraction of that. The sampler does not even wake up for the lines: their sockets are not
watched by its event loop, and each tick reads whatever has arrived since the last one without
waiting (the kernel keeps it meanwhile) and keeps each stub's newest line.

A state counts only while it is fresh: a paused or wedged stub stops writing, and once no line
has come for an interval plus the probe's timeout its state reads as unanswered, as a GET to it
would time out. A lost connection (the stub stopped or
restarted) is opened again at the next tick. Slow ticks still GET the states: the oracle's
per-origin rates need a state read at the sample's own moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
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
        self.newest: bytes | None = None
        self.ended: str | None = None  # why the stream is over, once it is

    def drain(self) -> bytes | None:
        """The newest complete line that arrived since the last drain (None: no new line)."""
        self.newest = None
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
        return self.newest

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status != 200:
            self.end(f"answered {status}")

    def on_body(self, body: bytes) -> None:
        lines = (self.pending + body).split(b"\n")
        self.pending = lines.pop()
        if lines:
            self.newest = lines[-1]  # the newest line is all a tick needs

    def on_message_complete(self) -> None:
        self.end("ended its state stream")

    def end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
            self.sock.close()


class StateStreams:
    """Every stub's latest streamed state: :meth:`tick` reads the streams (and opens the
    missing ones), :meth:`states` gives the fresh states as a gather's results and failures."""

    def __init__(self, stubs: Mapping[str, str], interval_s: float, timeout_s: float) -> None:
        self.stubs = dict(stubs)  # name -> control API base URL
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._latest: dict[str, tuple[float, Any]] = {}  # name -> (monotonic time, state)
        self._why: dict[str, str] = {}  # name -> why its stream gives no state
        self._open: dict[str, _StateLines] = {}
        self._connecting: dict[str, asyncio.Task[None]] = {}

    def tick(self) -> None:
        """Read every open stream; open one to every stub that has none (nor one opening)."""
        now = time.monotonic()
        for name in self.stubs:
            stream = self._open.get(name)
            if stream is not None:
                line = stream.drain()
                if line is not None:
                    try:
                        self._latest[name] = (now, json.loads(line))
                        self._why.pop(name, None)
                    except ValueError as exc:
                        self._why[name] = f"sent a line that is not JSON: {exc}"[:200]
                if stream.ended is not None:
                    self._why[name] = stream.ended
                    del self._open[name]  # opened again at the next tick
            elif name not in self._connecting:
                self._connecting[name] = asyncio.create_task(self._connect(name))

    async def _connect(self, name: str) -> None:
        address = urlsplit(self.stubs[name])
        host, port = address.hostname or "127.0.0.1", address.port or 80
        request = (f"GET {STREAM_PATH}?interval_s={self.interval_s:g} HTTP/1.1\r\n"
                   f"Host: {host}:{port}\r\n\r\n").encode()  # fmt: skip
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

    def states(self) -> tuple[dict[str, Any], dict[str, str]]:
        """``{"<stub> state": state}`` for each stub whose latest line is fresh (read no longer
        ago than an interval plus the probe's timeout), and why for each other one, keyed as a
        GET's would be."""
        results: dict[str, Any] = {}
        failed: dict[str, str] = {}
        now = time.monotonic()
        max_age_s = self.interval_s + self.timeout_s
        for name in self.stubs:
            at, state = self._latest.get(name, (None, None))
            if at is not None and now - at <= max_age_s:
                results[f"{name} state"] = state
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
