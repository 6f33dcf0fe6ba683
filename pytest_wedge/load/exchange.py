"""The two HTTP libraries under ``send_chat``: one request and response on each, the ``sent``
stamp, the load's pool gauge, and library failures in one vocabulary.

aiohttp is the default: httpx cost the load thread ten times the CPU per request
(encode/httpcore#1035; bench/load.py). httpx stays where its pool is the subject (incident 6).
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx

from pytest_wedge.load.client_ledger import RequestRecord, State

ChatClient = httpx.AsyncClient | aiohttp.ClientSession

# httpcore fires these on a connected socket, right before it writes the request head: the
# moment the request is handed to the network (aiohttp's chunk-sent hook is the same moment).
# Until then a request may only be queued for a pooled connection, which is exactly what
# incident 6 must tell apart.
_SENT_EVENTS = frozenset(
    {"http11.send_request_headers.started", "http2.send_request_headers.started"}
)


class PoolGauge:
    """Connections of one load's client checked out by its requests: from the moment a request
    is given a connection until its response is closed (a leaked stream keeps its own).

    A request waiting for a connection carries the pool's ``pool_limit`` and the current
    ``pool_in_use`` on its record, kept up to date until it gets one (then frozen), so a
    snapshot of the ledger shows an exhausted pool (``pool_in_use >= pool_limit``) for exactly
    the requests it holds. Only the load's event loop thread writes; other threads may read.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.in_use = 0
        self._waiting: dict[str, RequestRecord] = {}

    def ask(self, record: RequestRecord) -> None:
        record.pool_limit = self.limit
        record.pool_in_use = self.in_use
        self._waiting[record.request_id] = record

    def got(self, record: RequestRecord) -> None:
        self._waiting.pop(record.request_id, None)
        self.in_use += 1
        self._publish()

    def gave_back(self, record: RequestRecord, held: bool) -> None:
        self._waiting.pop(record.request_id, None)
        if held:
            self.in_use -= 1
            self._publish()

    def waiting(self) -> int:
        return len(self._waiting)

    def _publish(self) -> None:
        for record in self._waiting.values():
            record.pool_in_use = self.in_use


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # httpx builds one per client otherwise (tens of ms of CPU, more on a loaded machine).
    return httpx.create_ssl_context()


def new_httpx_client(
    max_connections: int | None = None, pool_timeout_s: float | None = None
) -> httpx.AsyncClient:
    """The client a load gets when its httpx pool is the subject. Per-request deadlines are
    the client's total deadline (asyncio.timeout); httpx's own timeouts stay off except the
    pool wait, a knob of incident 6."""
    return httpx.AsyncClient(
        # As many kept alive as allowed: httpcore 1.0.9 may close a surplus keep-alive that it
        # has just handed to another request (encode/httpcore#1110).
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        timeout=httpx.Timeout(None, pool=pool_timeout_s),
        trust_env=False,
        verify=_ssl_context(),
    )


def new_aiohttp_session() -> aiohttp.ClientSession:
    """The default client of a load: unbounded connections (one per request in flight, reused
    by each agent's next request), no library timeouts, and the trace that stamps ``sent``.
    Create it inside the event loop that uses it."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_end.append(_on_connection)
    trace.on_connection_reuseconn.append(_on_connection)
    trace.on_request_chunk_sent.append(_on_chunk_sent)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
        timeout=aiohttp.ClientTimeout(total=None),
        trust_env=False,
        trace_configs=[trace],
    )


class Exchange(ABC):
    """One request and its response on one library; the record's stamps and the pool gauge."""

    def __init__(self, record: RequestRecord, pool: PoolGauge | None) -> None:
        self.record = record
        self.pool = pool
        self.holds_connection = False

    def asking_for_connection(self) -> None:
        if self.pool is not None:
            self.pool.ask(self.record)

    def got_connection(self) -> None:
        if not self.holds_connection and self.pool is not None:
            self.holds_connection = True
            self.pool.got(self.record)

    def written(self) -> None:
        if self.record.sent is None:
            self.record.sent = time.time()

    def released(self) -> None:
        if self.pool is not None:
            self.pool.gave_back(self.record, self.holds_connection)
        self.holds_connection = False

    @abstractmethod
    async def open(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        """Send the request; return the status once the response head is in."""

    @abstractmethod
    def lines(self) -> AsyncIterator[str]:
        """The response body line by line, without line ends."""

    @abstractmethod
    async def read(self) -> bytes:
        """The whole response body."""

    @abstractmethod
    async def close(self, *, completed: bool) -> None:
        """Give the connection back (``completed``) or close it; release the pool gauge."""


class HttpxExchange(Exchange):
    def __init__(
        self, client: httpx.AsyncClient, record: RequestRecord, pool: PoolGauge | None
    ) -> None:
        super().__init__(record, pool)
        self.client = client
        self.response: httpx.Response | None = None

    async def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        self.got_connection()  # any connection event: the pool handed this request one
        if event in _SENT_EVENTS:
            self.written()

    async def open(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        url = self.record.target + self.record.path
        request = self.client.build_request(
            "POST", url, json=body, headers=headers, extensions={"trace": self._trace}
        )
        self.asking_for_connection()
        self.response = await self.client.send(request, stream=True)
        return self.response.status_code

    def lines(self) -> AsyncIterator[str]:
        assert self.response is not None
        return self.response.aiter_lines()

    async def read(self) -> bytes:
        assert self.response is not None
        return await self.response.aread()

    async def close(self, *, completed: bool) -> None:
        # Closing a half-read stream may itself fail on a dead socket; the state is known.
        if self.response is not None:
            with contextlib.suppress(httpx.HTTPError, OSError):
                await self.response.aclose()
        self.released()


class AiohttpExchange(Exchange):
    def __init__(
        self, session: aiohttp.ClientSession, record: RequestRecord, pool: PoolGauge | None
    ) -> None:
        super().__init__(record, pool)
        self.session = session
        self.response: aiohttp.ClientResponse | None = None

    async def open(self, body: dict[str, Any], headers: dict[str, str]) -> int:
        url = self.record.target + self.record.path
        self.asking_for_connection()
        self.response = await self.session.post(
            url, json=body, headers=headers, trace_request_ctx={"exchange": self}
        )
        return self.response.status

    async def lines(self) -> AsyncIterator[str]:
        assert self.response is not None
        async for raw in self.response.content:
            yield raw.decode(errors="replace").rstrip("\r\n")

    async def read(self) -> bytes:
        assert self.response is not None
        return await self.response.read()

    async def close(self, *, completed: bool) -> None:
        if self.response is not None:
            # A finished response gives its connection back for the agent's next request;
            # anything else closes it, so the server sees the client go (an abort).
            if completed:
                self.response.release()
            else:
                self.response.close()
        self.released()


def _exchange_of(context: SimpleNamespace) -> Exchange | None:
    found = (getattr(context, "trace_request_ctx", None) or {}).get("exchange")
    return found if isinstance(found, Exchange) else None


async def _on_connection(session: object, context: SimpleNamespace, params: object) -> None:
    if (exchange := _exchange_of(context)) is not None:
        exchange.got_connection()


async def _on_chunk_sent(session: object, context: SimpleNamespace, params: object) -> None:
    # Awaited right before the first body chunk (coalesced with the buffered head) goes to the
    # transport, with no suspension in between: the moment the request is written.
    if (exchange := _exchange_of(context)) is not None:
        exchange.written()


# aiohttp failures in httpx's words, so error texts (and the hop walk that reads them) do not
# depend on the library: a failed connect, a broken read or write, a malformed answer.
_AIOHTTP_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (aiohttp.ClientConnectorError, "ConnectError"),
    (aiohttp.ServerDisconnectedError, "RemoteProtocolError"),
    (aiohttp.ClientPayloadError, "RemoteProtocolError"),
    (aiohttp.ClientResponseError, "RemoteProtocolError"),
    (aiohttp.ClientOSError, "ReadError"),
    (aiohttp.ClientConnectionError, "ReadError"),
)


def failure(exc: Exception, sent: bool) -> tuple[State, str] | None:
    """The final state and error text of a library failure; None if ``exc`` is not one."""
    named = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.TimeoutException):  # e.g. PoolTimeout: a client-side timeout
        return "timeout", named
    if isinstance(exc, httpx.TransportError):
        # Once the head is on the wire the server may have acted on it: the outcome is unknown.
        return ("unknown" if sent else "error"), named
    if isinstance(exc, httpx.HTTPError):  # e.g. an undecodable body: the server answered badly
        return "error", named
    for cls, kind in _AIOHTTP_KINDS:
        if isinstance(exc, cls):
            return ("unknown" if sent else "error"), f"{kind} ({type(exc).__name__}): {exc}"
    if isinstance(exc, aiohttp.ClientError | ValueError):  # e.g. an SSE line too long
        return "error", named
    return None
