"""A tiny OpenAI-like chat server on 127.0.0.1 for the load tests, plus its own sanity tests.

It runs in its own thread and event loop, because the loads under test run theirs. Each
request picks its behaviour with the body field ``test_mode`` (default: the server's mode),
so one server can serve every final state. Other load test modules load this file by path,
which works under any pytest import mode.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from aiohttp import web


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0, what: str = "") -> None:
    """Poll a condition against one deadline: readiness is observed, never assumed."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what or predicate}")
        time.sleep(0.005)


def _chunk(text: str) -> bytes:
    frame = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }
    return f"data: {json.dumps(frame)}\n\n".encode()


class ChatServer:
    """Modes: ok, ping, error_frame, no_done, hang, reset, status500."""

    def __init__(self, mode: str = "ok", token_delay_s: float = 0.0) -> None:
        self.mode = mode
        self.token_delay_s = token_delay_s
        self.requests: list[dict[str, Any]] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True, name="chat-server")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("chat test server did not start within 10s")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._stop_event().set)
        self._thread.join(10)

    def _stop_event(self) -> asyncio.Event:
        assert self._release is not None
        return self._release

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        await self._release.wait()
        await runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"body": body, "headers": dict(request.headers)})
        mode = body.get("test_mode", self.mode)
        delay = float(body.get("test_token_delay_s", self.token_delay_s))
        tokens = int(body.get("max_tokens", 4))
        if mode == "status500":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        if not body.get("stream"):
            return web.json_response(
                {
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
                    "usage": {"completion_tokens": tokens},
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if mode == "hang":
            await self._stop_event().wait()
            return response
        if mode == "ping":
            await response.write(b": ping\n\n")
        for n in range(tokens):
            if delay:
                await asyncio.sleep(delay)
            await response.write(_chunk(f"t{n} "))
            if mode == "error_frame":
                error = {"error": {"message": '{"error":"decode failed"}', "status": 500}}
                await response.write(f"data: {json.dumps(error)}\n\n".encode())
                await response.write_eof()
                return response
            if mode == "reset":
                assert request.transport is not None
                request.transport.abort()
                return response
        if mode != "no_done":
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


@pytest.mark.timeout(30)
def test_server_streams_tokens_and_done() -> None:
    with ChatServer() as server:
        body = {"model": "m", "messages": [], "max_tokens": 3, "stream": True}
        response = httpx.post(server.base_url + "/v1/chat/completions", json=body)
        assert response.text.count("data: ") == 4
        assert response.text.rstrip().endswith("data: [DONE]")
        assert len(server.requests) == 1


@pytest.mark.timeout(30)
def test_server_hang_holds_the_stream_open_until_shutdown() -> None:
    with ChatServer(mode="hang") as server:
        body = {"model": "m", "messages": [], "stream": True}
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=0.2)
