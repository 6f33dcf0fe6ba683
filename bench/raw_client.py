"""The yardstick of the harness: a minimal aiohttp client sending the harness's requests.

Same request shape as :class:`pytest_wedge.load.Harness`: one chat completion per round per
agent, sequentially, with the same growing history (the agents' scripts from the same seed),
the same tags, streaming, read line by line to ``[DONE]``. Nothing else: no ledger, no trace,
no deadlines, no error vocabulary. Whatever the harness costs beyond this is its overhead.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
from faker import Faker

from pytest_wedge.load.harness import _script


async def _agent(
    session: aiohttp.ClientSession,
    url: str,
    fake: Faker,
    agent: int,
    rounds: int,
    max_tokens: int,
    latencies: list[float],
) -> int:
    script = _script(fake, 0, agent, rounds)
    history: list[dict[str, Any]] = list(script.opening)
    ok = 0
    for round_, (call, result) in enumerate(script.turns):
        request_id = f"raw-a{agent}-r{round_}"
        body = {
            "model": "stub-model",
            "messages": history,
            "max_tokens": max_tokens,
            "stream": True,
            "user": "raw",
            "wedge_origin": "raw",
            "wedge_request_id": request_id,
        }
        headers = {"X-Request-ID": request_id, "x-request-id-origin": "raw"}
        started = time.perf_counter()
        async with session.post(url, json=body, headers=headers) as response:
            done = False
            async for line in response.content:
                done = done or line.startswith(b"data: [DONE]")
        latencies.append(time.perf_counter() - started)
        ok += response.status == 200 and done
        history = [*history, call, result]
    return ok


async def _run(url: str, agents: int, rounds: int, max_tokens: int) -> tuple[int, list[float]]:
    fake = Faker()
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
        tasks = [
            _agent(
                session, url + "/v1/chat/completions", fake, agent, rounds, max_tokens, latencies
            )
            for agent in range(agents)
        ]
        async with asyncio.timeout(120):
            done = await asyncio.gather(*tasks)
    return sum(done), latencies


def raw_run(url: str, agents: int, rounds: int, max_tokens: int) -> tuple[int, float, list[float]]:
    """(requests that ended 200 with ``[DONE]``, seconds from start to the last, latencies)."""
    started = time.perf_counter()
    ok, latencies = asyncio.run(_run(url, agents, rounds, max_tokens))
    return ok, time.perf_counter() - started, latencies
