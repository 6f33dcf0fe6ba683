"""The sampler's fetches: the same jobs as a snapshot's, on a minimal keep-alive HTTP/1.1 client.

``truth_jobs`` and ``observed_jobs`` describe a read as ``partial(get, url, timeout_s)`` (and
``partial(link_bytes, topology, timeout_s)`` for Toxiproxy's counters). In the test process
they run on httpx in threads. The sampler runs them ten times a second, so here each such job is
one GET in one event loop: the jobs, URLs, results and failure texts stay those of
:mod:`pytest_wedge.evidence.fetch`; only the client differs. Any other job runs in a thread, as
it would there.

The client is an ``asyncio.Protocol`` fed to httptools' C parser rather than aiohttp: the
sampler's CPU is taken from the user's load, and aiohttp cost about twice as much client CPU per
GET of a stub's state (0.35 ms against 0.17 ms). It does only what the sampler needs: plain
``http://``, GET, no proxies, no compression, a pool of idle connections per (host, port).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httptools

from pytest_wedge.evidence.fetch import get
from pytest_wedge.evidence.parse import parse_link_bytes
from pytest_wedge.evidence.read_public import link_bytes


class ConnectError(Exception):
    """The connection could not be opened (refused, unreachable, unknown host)."""


class ServerDisconnectedError(Exception):
    """The server closed the connection in the middle of its answer."""


class HTTPStatusError(Exception):
    """The server answered with an error status (>= 400)."""

    def __init__(self, status: int, url: str) -> None:
        super().__init__(f"answered {status}: {url}")
        self.status = status
        self.url = url


class _LostBeforeAnswer(Exception):
    """Closed before any byte of the answer: a stale kept-alive connection, worth one retry."""


class _Target(NamedTuple):
    host: str
    port: int
    request: bytes


@lru_cache(maxsize=512)
def _target(url: str) -> _Target:
    # The sampler asks the same few URLs ten times a second: split them and build the request once.
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"only http:// URLs are supported (no TLS, no proxies): {url}")
    if not parts.hostname:
        raise ValueError(f"no host in {url}")
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    authority = parts.netloc.rpartition("@")[2]
    if parts.port is None:
        authority = f"{authority}:{port}"
    # No Accept-Encoding: servers then never compress, and nothing here would inflate.
    request = f"GET {target} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode("latin-1")
    return _Target(parts.hostname, port, request)


def _decode(content_type: bytes, body: bytes) -> Any:
    """As :func:`fetch.get`: JSON when the Content-Type says so, else text in its charset."""
    media, _, params = content_type.partition(b";")
    if b"json" in media.lower():
        return json.loads(body)
    charset = "utf-8"
    for param in params.split(b";"):
        name, _, value = param.partition(b"=")
        if name.strip().lower() == b"charset" and value.strip(b' \t"'):
            charset = value.strip(b' \t"').decode("latin-1")
    try:
        return body.decode(charset, "replace")
    except LookupError:  # a charset Python does not know: evidence is still worth reading
        return body.decode("utf-8", "replace")


class _Connection(asyncio.Protocol):
    """One TCP connection carrying one request at a time; httptools calls the ``on_*`` methods."""

    def __init__(self, idle: list[_Connection], every: set[_Connection]) -> None:
        self._idle = idle  # its (host, port)'s pool, to leave it when the server closes it
        self._every = every
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[tuple[int, bytes, bytes]] | None = None
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._answered = False  # a byte of the current answer arrived
        self._headers_done = False
        self._framed = False  # Content-Length or Transfer-Encoding: the body does not end at close
        self._content_type = b""
        self._body: list[bytes] = []
        self.reusable = True

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._every.add(self)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # nothing was asked: whatever this is, the stream is not ours
            self.abort()
            return
        self._answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        if self in self._idle:
            self._idle.remove(self)
        self._every.discard(self)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            if self._headers_done and not self._framed:  # a body read until close ends here
                waiter.set_result(self._answer())
            elif self._answered:
                waiter.set_exception(ServerDisconnectedError("Server disconnected"))
            else:
                waiter.set_exception(_LostBeforeAnswer())
        if not self._lost.done():
            self._lost.set_result(None)

    # httptools' side

    def on_message_begin(self) -> None:
        if self._waiter is None:  # a second answer to one request
            self.reusable = False

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self._content_type = value
        elif name in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        if not self._parser.should_keep_alive():  # Connection: close, or HTTP/1.0
            self.reusable = False
        if waiter is not None and not waiter.done():
            waiter.set_result(self._answer())

    # the session's side

    async def request(self, request: bytes) -> tuple[int, bytes, bytes]:
        """Status, Content-Type and body of the answer to ``request``."""
        assert self._transport is not None
        if self._transport.is_closing():
            raise _LostBeforeAnswer()
        self._answered = self._headers_done = self._framed = False
        self._content_type = b""
        self._body = []
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return await self._waiter

    def abort(self) -> None:
        self.reusable = False
        if self._transport is not None:
            self._transport.abort()

    async def closed(self) -> None:
        await self._lost

    def _answer(self) -> tuple[int, bytes, bytes]:
        return self._parser.get_status_code(), self._content_type, b"".join(self._body)

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.abort()


class Session:
    """Kept-alive connections to every endpoint; deadlines are the caller's (``asyncio.timeout``).

    A GET takes an idle connection of its (host, port) or opens one, so concurrent GETs to one
    port each have their own. Only a connection whose answer completed and allowed keep-alive
    goes back to the pool: one that timed out, was cancelled or failed is closed.
    """

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._every: set[_Connection] = set()
        self._closed = False

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection, idle or busy, and wait until asyncio has let go of them."""
        self._closed = True
        connections = list(self._every)
        self._idle.clear()
        for connection in connections:
            connection.abort()
        await asyncio.gather(*(connection.closed() for connection in connections))

    async def get(self, url: str) -> Any:
        """GET ``url``: JSON when the answer says so, else text; an error status raises
        :class:`HTTPStatusError`."""
        target = _target(url)
        idle = self._idle.setdefault((target.host, target.port), [])
        connection = idle.pop() if idle else None
        try:
            connection = connection or await self._connect(target, idle)
            answer = await connection.request(target.request)
        except _LostBeforeAnswer:
            # Closed before answering, most often a kept-alive connection the server dropped
            # while idle: GET is idempotent, so once more on a new connection, as clients do.
            connection = await self._connect(target, idle)
            answer = await self._once_more(connection, target.request)
        except BaseException:
            if connection is not None:
                connection.abort()
            raise
        status, content_type, body = answer
        if connection.reusable and not self._closed:
            idle.append(connection)
        else:
            connection.abort()
        if status >= 400:
            raise HTTPStatusError(status, url)
        return _decode(content_type, body)

    async def _once_more(self, connection: _Connection, request: bytes) -> tuple[int, bytes, bytes]:
        try:
            return await connection.request(request)
        except _LostBeforeAnswer:
            raise ServerDisconnectedError("Server disconnected before answering") from None
        except BaseException:
            connection.abort()
            raise

    async def _connect(self, target: _Target, idle: list[_Connection]) -> _Connection:
        if self._closed:
            raise RuntimeError("the session is closed")
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                lambda: _Connection(idle, self._every), target.host, target.port
            )
        except OSError as exc:
            detail = exc.strerror or str(exc)
            raise ConnectError(
                f"Cannot connect to host {target.host}:{target.port} [{detail}]"
            ) from exc
        return connection


def new_session() -> Session:
    """Kept-alive connections to every endpoint; deadlines per fetch, no proxy variables."""
    return Session()


async def _run(session: Session, job: Callable[[], Any]) -> Any:
    if isinstance(job, partial) and job.func is get:
        return await session.get(job.args[0])
    if isinstance(job, partial) and job.func is link_bytes:
        topology = job.args[0]
        by_proxy = {link.proxy: name for name, link in topology.links.items()}
        text = await session.get(topology.toxiproxy.base_url + "/metrics")
        return parse_link_bytes(text, by_proxy)
    return await asyncio.to_thread(job)


def why(exc: BaseException, timeout_s: float) -> str:
    """:func:`fetch.why` for this client's failures, in the same words (a failed connection is
    a :class:`ConnectError`, so it reads ``did not answer: ConnectError: ...``)."""
    if isinstance(exc, TimeoutError):
        return f"did not answer within {timeout_s:.2f} s (TimeoutError)"
    if isinstance(exc, HTTPStatusError):
        return f"answered {exc.status}"
    return f"did not answer: {type(exc).__name__}: {exc}"[:200]


async def gather(
    session: Session, jobs: dict[str, Callable[[], Any]], timeouts: dict[str, float]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run every job at once, each under its own deadline; results and failures by key."""

    async def one(key: str, job: Callable[[], Any]) -> Any:
        async with asyncio.timeout(timeouts.get(key)):
            return await _run(session, job)

    outcomes = await asyncio.gather(*(one(k, j) for k, j in jobs.items()), return_exceptions=True)
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for key, outcome in zip(jobs, outcomes, strict=True):
        if isinstance(outcome, Exception):
            failed[key] = why(outcome, timeouts.get(key, 0.0))
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            results[key] = outcome
    return results, failed
