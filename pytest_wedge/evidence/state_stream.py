"""The stubs' states, streamed to the sampler: one open connection per stub, one line per tick.

The probe reads every stub's state every tick (ten times a second by default). As a GET each
time, that was the largest part of what the probe cost: the stub's web server handling a request
(about 0.3 ms of its CPU) and the sampler sending it (0.2 ms), per stub and tick, so 160 requests
a second on an 8P+8D topology. A stub's ``/control/state/stream?interval_s=...`` instead writes
its state as one JSON line on an open connection every interval, which costs both ends a
fraction of that. The sampler keeps each stub's latest line and when it arrived; a tick takes
the latest ones.

A state counts only while it is fresh: a paused or wedged stub stops writing, and its state
then reads as unanswered, as a GET to it would time out. A lost connection (the stub stopped or
restarted) is opened again at the next tick. Slow ticks still GET the states: the oracle's
per-origin rates need a state read at the sample's own moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httptools

STREAM_PATH = "/control/state/stream"


class _StateLines(asyncio.Protocol):
    """One stub's stream: each complete line of the body is a state."""

    def __init__(self, name: str, streams: StateStreams) -> None:
        self.name = name
        self.streams = streams
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.pending = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.streams.failed(self.name, f"sent a malformed answer: {exc}"[:200])
            self.close()

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status != 200:
            self.streams.failed(self.name, f"answered {status}")
            self.close()

    def on_body(self, body: bytes) -> None:
        self.pending += body
        *lines, self.pending = self.pending.split(b"\n")
        if lines:
            try:
                state = json.loads(lines[-1])  # the newest line is all a tick needs
            except ValueError as exc:
                self.streams.failed(self.name, f"sent a line that is not JSON: {exc}"[:200])
                return
            self.streams.received(self.name, state)

    def on_message_complete(self) -> None:
        self.close()  # the stub ended its stream: open a new one at the next tick

    def connection_lost(self, exc: Exception | None) -> None:
        self.streams.lost(self.name, self, exc)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class StateStreams:
    """Every stub's latest streamed state; :meth:`tick` keeps the connections open and
    :meth:`states` reads the fresh ones as a gather's results and failures."""

    def __init__(self, stubs: Mapping[str, str], interval_s: float, timeout_s: float) -> None:
        self.stubs = dict(stubs)  # name -> control API base URL
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._latest: dict[str, tuple[float, Any]] = {}  # name -> (monotonic time, state)
        self._why: dict[str, str] = {}  # name -> why its stream is not open
        self._open: dict[str, _StateLines] = {}
        self._connecting: dict[str, asyncio.Task[None]] = {}

    # -- the protocol's callbacks ----------------------------------------------------------
    def received(self, name: str, state: Any) -> None:
        self._latest[name] = (time.monotonic(), state)
        self._why.pop(name, None)

    def failed(self, name: str, why: str) -> None:
        self._why[name] = why

    def lost(self, name: str, stream: _StateLines, exc: Exception | None) -> None:
        if self._open.get(name) is stream:
            del self._open[name]
        self._why.setdefault(name, f"closed its state stream ({type(exc).__name__})"
                             if exc else "closed its state stream")  # fmt: skip

    # -- the sampler's side ----------------------------------------------------------------
    def tick(self) -> None:
        """Open a stream to every stub that has none (nor one being opened)."""
        for name in self.stubs:
            if name not in self._open and name not in self._connecting:
                self._connecting[name] = asyncio.create_task(self._connect(name))

    async def _connect(self, name: str) -> None:
        address = urlsplit(self.stubs[name])
        host, port = address.hostname or "127.0.0.1", address.port or 80
        request = (f"GET {STREAM_PATH}?interval_s={self.interval_s:g} HTTP/1.1\r\n"
                   f"Host: {host}:{port}\r\n\r\n").encode()  # fmt: skip
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout_s):
                _, stream = await loop.create_connection(lambda: _StateLines(name, self),
                                                         host, port)  # fmt: skip
        except (OSError, TimeoutError) as exc:
            self._why[name] = f"did not answer: ConnectError: {exc}"[:200]
            return
        finally:
            self._connecting.pop(name, None)
        assert stream.transport is not None
        stream.transport.write(request)
        self._open[name] = stream

    def states(self) -> tuple[dict[str, Any], dict[str, str]]:
        """``{"<stub> state": state}`` for each stub whose latest line is fresh (no older than
        an interval plus the probe's timeout), and why for each other one, keyed as a GET's."""
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
        for stream in list(self._open.values()):
            stream.close()
        self._open.clear()
