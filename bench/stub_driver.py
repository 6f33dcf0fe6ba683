"""Stub throughput measurement, called by the project's benchmark (bench/)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

_CONTENT = b'"content":'


async def _client(
    session: aiohttp.ClientSession, url: str, tokens: int, rounds: int, origin: str
) -> int:
    got = 0
    body = {
        "model": "stub-model",
        "stream": True,
        "max_tokens": tokens,
        "user": origin,
        "messages": [{"role": "user", "content": "benchmark"}],
    }
    for _ in range(rounds):
        async with session.post(url, json=body) as resp:
            resp.raise_for_status()
            tail = b""
            async for chunk in resp.content.iter_any():
                # Count across chunk boundaries without parsing every SSE frame.
                data = tail + chunk
                got += data.count(_CONTENT)
                tail = data[-len(_CONTENT) + 1 :] if not data.endswith(b"\n") else b""
    return got


async def ameasure_decode_tokens_per_s(
    port: int,
    clients: int = 64,
    tokens: int = 256,
    rounds: int = 3,
    host: str = "127.0.0.1",
    origin: str = "bench",
) -> float:
    """Streamed tokens/s that `clients` concurrent direct clients get from one decode stub.

    Requests carry no bootstrap fields, so the decode skips the KV transfer; start the stub
    with `--itl-ms 0` to measure the stub itself rather than its pacing.
    """
    url = f"http://{host}:{port}/v1/chat/completions"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        counts = await asyncio.gather(
            *(_client(session, url, tokens, rounds, origin) for _ in range(clients))
        )
        elapsed = time.perf_counter() - start
    return sum(counts) / elapsed


def measure_decode_tokens_per_s(
    port: int, clients: int = 64, tokens: int = 256, rounds: int = 3, host: str = "127.0.0.1"
) -> float:
    """Synchronous wrapper; runs its own event loop (do not call from inside one)."""
    return asyncio.run(ameasure_decode_tokens_per_s(port, clients, tokens, rounds, host))
