"""The sampler's fetches: the same jobs as a snapshot's, run on one aiohttp session.

``truth_jobs`` and ``observed_jobs`` describe a read as ``partial(get, url, timeout_s)`` (and
``partial(link_bytes, topology, timeout_s)`` for Toxiproxy's counters). In the test process
they run on httpx in threads. The sampler runs them ten times a second, where httpx was half
of its CPU (py-spy: httpcore's connection pool and its sync streams), so here each such job is
one GET on an aiohttp session in one event loop: the jobs, URLs, results and failure texts stay
those of :mod:`pytest_wedge.evidence.fetch`; only the client differs. Any other job runs in a
thread, as it would there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import aiohttp

from pytest_wedge.evidence.fetch import get
from pytest_wedge.evidence.observe import link_bytes
from pytest_wedge.evidence.parse import parse_link_bytes


def new_session() -> aiohttp.ClientSession:
    """Kept-alive connections to every endpoint; deadlines per fetch, no proxy variables."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
        timeout=aiohttp.ClientTimeout(total=None),
        trust_env=False,
    )


async def _get(session: aiohttp.ClientSession, url: str) -> Any:
    """As :func:`fetch.get`: JSON when the answer says so, else text; an error status raises."""
    async with session.get(url) as response:
        response.raise_for_status()
        if "json" in response.content_type:
            return await response.json()
        return await response.text()


async def _run(session: aiohttp.ClientSession, job: Callable[[], Any]) -> Any:
    if isinstance(job, partial) and job.func is get:
        return await _get(session, job.args[0])
    if isinstance(job, partial) and job.func is link_bytes:
        topology = job.args[0]
        by_proxy = {link.proxy: name for name, link in topology.links.items()}
        text = await _get(session, topology.toxiproxy.base_url + "/metrics")
        return parse_link_bytes(text, by_proxy)
    return await asyncio.to_thread(job)


def why(exc: BaseException, timeout_s: float) -> str:
    """:func:`fetch.why` for aiohttp's failures, in the same words."""
    if isinstance(exc, TimeoutError):
        return f"did not answer within {timeout_s:.2f} s (TimeoutError)"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"answered {exc.status}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"did not answer: ConnectError: {exc}"[:200]
    return f"did not answer: {type(exc).__name__}: {exc}"[:200]


async def gather(
    session: aiohttp.ClientSession, jobs: dict[str, Callable[[], Any]], timeouts: dict[str, float]
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
