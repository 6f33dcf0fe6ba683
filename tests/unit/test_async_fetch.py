"""The sampler's HTTP client against real servers on 127.0.0.1: aiohttp.web where a well-behaved
server will do, a raw asyncio server where the test needs one that misbehaves."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
from aiohttp import web

from pytest_wedge.evidence import async_fetch
from pytest_wedge.evidence.async_fetch import HTTPStatusError, ServerDisconnectedError, why
from pytest_wedge.evidence.fetch import get

pytestmark = pytest.mark.timeout(20)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def web_server(
    routes: Mapping[str, Callable[[web.Request], Awaitable[web.StreamResponse]]],
) -> AsyncIterator[str]:
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


class RawServer:
    """Counts the connections it accepted and hands each to ``handler``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.accepted = 0
        self.ended: list[asyncio.Event] = []  # one per connection: set when the client closed it

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        ended = asyncio.Event()
        self.ended.append(ended)
        try:
            await self.handler(reader, writer)
        finally:
            ended.set()
            writer.close()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def answer(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "Content-Type: text/plain", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def keep_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        try:
            await read_request(reader)
        except asyncio.IncompleteReadError:
            return
        writer.write(answer(b"ok"))


def run(scenario: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(scenario())


def test_json_text_and_chunked_bodies() -> None:
    async def as_json(_: web.Request) -> web.StreamResponse:
        return web.json_response({"paused": False, "inflight": 3})

    async def as_text(_: web.Request) -> web.StreamResponse:
        return web.Response(
            body="é metrics 1\n".encode("latin-1"), content_type="text/plain", charset="latin-1"
        )

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for n in range(3):
            await response.write(f"line {n}\n".encode())
        await response.write_eof()
        return response

    async def scenario() -> None:
        routes = {"/json": as_json, "/text": as_text, "/chunked": chunked}
        async with web_server(routes) as base, async_fetch.new_session() as session:
            assert await session.get(base + "/json") == {"paused": False, "inflight": 3}
            assert await session.get(base + "/text") == "é metrics 1\n"
            assert await session.get(base + "/chunked") == "line 0\nline 1\nline 2\n"
            assert await session.get(base + "/json?again=1") == {"paused": False, "inflight": 3}

    run(scenario)


def test_a_body_read_until_close() -> None:
    async def old_style(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nno length, ")
        await writer.drain()
        writer.write(b"ends at close")
        await writer.drain()

    async def scenario() -> None:
        server = RawServer(old_style)
        async with server.running() as base, async_fetch.new_session() as session:
            assert await session.get(base + "/metrics") == "no length, ends at close"
            assert await session.get(base + "/metrics") == "no length, ends at close"
        assert server.accepted == 2  # read until close: never reused

    run(scenario)


def test_an_error_status_is_answered_503() -> None:
    async def busy(_: web.Request) -> web.StreamResponse:
        return web.json_response({"error": "overloaded"}, status=503)

    async def scenario() -> None:
        async with web_server({"/control/state": busy}) as base, async_fetch.new_session() as s:
            with pytest.raises(HTTPStatusError) as caught:
                await s.get(base + "/control/state")
        assert caught.value.status == 503
        assert why(caught.value, 0.2) == "answered 503"

    run(scenario)


def test_a_refused_connection_reads_as_connect_error() -> None:
    # A bound socket that does not listen refuses connections, and holds the port meanwhile.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]

        async def scenario() -> BaseException:
            async with async_fetch.new_session() as session:
                with pytest.raises(async_fetch.ConnectError) as caught:
                    await session.get(f"http://127.0.0.1:{port}/control/state")
            return caught.value

        text = why(run(scenario), 0.2)
    assert text.startswith("did not answer: ConnectError: Cannot connect to host 127.0.0.1:")
    assert len(text) <= 200


def test_a_silent_server_times_out_and_its_connection_is_dropped() -> None:
    async def silent(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client closes

    async def scenario() -> None:
        server = RawServer(silent)
        async with server.running() as base, async_fetch.new_session() as session:
            for _ in range(2):
                with pytest.raises(TimeoutError) as caught:
                    async with asyncio.timeout(0.2):
                        await session.get(base + "/control/state")
                assert why(caught.value, 0.2) == "did not answer within 0.20 s (TimeoutError)"
            await asyncio.wait_for(server.ended[0].wait(), 5)  # closed by the client
            assert server.accepted == 2

    run(scenario)


def test_connection_close_is_not_reused_and_keep_alive_is() -> None:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"bye", "Connection: close"))
        await reader.read()

    async def scenario() -> None:
        closer, keeper = RawServer(closing), RawServer(keep_answering)
        async with (
            closer.running() as closes,
            keeper.running() as keeps,
            async_fetch.new_session() as session,
        ):
            for _ in range(3):
                assert await session.get(closes + "/") == "bye"
                assert await session.get(keeps + "/") == "ok"
        assert closer.accepted == 3
        assert keeper.accepted == 1

    run(scenario)


def test_a_server_that_closed_an_idle_connection() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"ok"))  # keep-alive, as far as the client can tell
        await writer.drain()

    async def scenario() -> None:
        server = RawServer(once)
        async with server.running() as base, async_fetch.new_session() as session:
            assert await session.get(base + "/") == "ok"
            await asyncio.wait_for(server.ended[0].wait(), 5)
            assert await session.get(base + "/") == "ok"
            assert server.accepted == 2

    run(scenario)


def test_a_stale_connection_lost_before_answering_is_retried_once() -> None:
    # The server's close crosses the client's next request: the client sees it only after
    # writing, with no byte of an answer.
    async def answers_then_drops(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(answer(b"ok"))
        await read_request(reader)

    async def scenario() -> None:
        server = RawServer(answers_then_drops)
        async with server.running() as base, async_fetch.new_session() as session:
            assert await session.get(base + "/") == "ok"
            assert await session.get(base + "/") == "ok"
            assert server.accepted == 2

    run(scenario)


def test_only_one_retry_for_a_server_that_never_answers_before_closing() -> None:
    async def drops(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async def scenario() -> None:
        server = RawServer(drops)
        async with server.running() as base, async_fetch.new_session() as session:
            with pytest.raises(ServerDisconnectedError) as caught:
                await session.get(base + "/")
            assert server.accepted == 2
        assert why(caught.value, 0.2).startswith("did not answer: ServerDisconnectedError: ")

    run(scenario)


def test_a_connection_lost_mid_answer_is_not_retried() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer(b"0123456789")[:-4])
        await writer.drain()

    async def scenario() -> None:
        server = RawServer(half)
        async with server.running() as base, async_fetch.new_session() as session:
            with pytest.raises(ServerDisconnectedError):
                await session.get(base + "/")
            assert server.accepted == 1

    run(scenario)


def test_two_concurrent_gets_to_one_port_each_have_a_connection() -> None:
    arrived = 0
    both: asyncio.Event | None = None

    async def meet(request: web.Request) -> web.StreamResponse:
        nonlocal arrived
        assert both is not None
        arrived += 1
        if arrived == 2:
            both.set()
        await both.wait()  # answers only once both requests are in: one connection would hang
        return web.json_response({"path": request.path})

    async def scenario() -> None:
        nonlocal both
        both = asyncio.Event()
        routes = {"/control/state": meet, "/metrics": meet}
        async with web_server(routes) as base, async_fetch.new_session() as session:
            async with asyncio.timeout(5):
                state, metrics = await asyncio.gather(
                    session.get(base + "/control/state"), session.get(base + "/metrics")
                )
        assert state == {"path": "/control/state"}
        assert metrics == {"path": "/metrics"}

    run(scenario)


def test_gather_mixes_gets_failures_and_thread_jobs() -> None:
    async def state(_: web.Request) -> web.StreamResponse:
        return web.json_response({"paused": True})

    async def busy(_: web.Request) -> web.StreamResponse:
        return web.Response(status=503)

    async def silent(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await reader.read()

    def in_a_thread() -> str:
        return threading.current_thread().name

    async def scenario() -> tuple[dict[str, Any], dict[str, str]]:
        routes = {"/control/state": state, "/busy": busy}
        async with web_server(routes) as base, RawServer(silent).running() as mute:
            jobs: dict[str, Callable[[], Any]] = {
                "decode-0": partial(get, base + "/control/state", 0.5),
                "router": partial(get, base + "/busy", 0.5),
                "prefill-0": partial(get, mute + "/control/state", 0.2),
                "processes": in_a_thread,
            }
            timeouts = {"decode-0": 2.0, "router": 2.0, "prefill-0": 0.2, "processes": 2.0}
            async with async_fetch.new_session() as session:
                return await async_fetch.gather(session, jobs, timeouts)

    results, failed = run(scenario)
    assert results["decode-0"] == {"paused": True}
    assert results["processes"] != threading.main_thread().name
    assert failed == {
        "router": "answered 503",
        "prefill-0": "did not answer within 0.20 s (TimeoutError)",
    }


def test_https_is_refused_clearly() -> None:
    async def scenario() -> None:
        async with async_fetch.new_session() as session:
            with pytest.raises(ValueError, match="only http://"):
                await session.get("https://127.0.0.1:1/control/state")

    run(scenario)
