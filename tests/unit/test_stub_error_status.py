"""``error_status`` limited to the first n matching requests, or to a seeded fraction of them
(``ErrorStatus(first_n=..., probability=...)``): "a few 500s" that smg's retries can ride out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import ClientSession
from aiohttp.test_utils import TestServer

from pytest_wedge.faults import ErrorStatus
from pytest_wedge.stubs.config import StubConfig
from pytest_wedge.stubs.engine_faults import FaultError, StubFaultSet, parse_fault
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.server import make_app


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 20))


def chat(user: str = "h") -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 1,
        "user": user,
        "messages": [{"role": "user", "content": "err"}],
    }


async def statuses(
    fault: dict[str, Any], users: list[str], seed: int = 0
) -> tuple[list[int], list[dict[str, Any]]]:
    """The status of each request, sent one after another, to a decode with ``fault``; and the
    stub's listing of its faults afterwards."""
    engine = Engine(StubConfig(role="decode", port=1, itl_ms=0, seed=seed))
    server = TestServer(make_app(engine), host="127.0.0.1")
    await server.start_server()
    out = []
    async with ClientSession(str(server.make_url(""))) as s:
        assert (await s.post("/control/faults", json=fault)).status == 200
        for user in users:
            async with s.post("/v1/chat/completions", json=chat(user)) as resp:
                await resp.read()
                out.append(resp.status)
        listed = (await (await s.get("/control/faults")).json())["faults"]
    await server.close()
    return out, listed


def test_first_n_errors_only_the_first_n_matching_requests() -> None:
    async def body() -> None:
        fault = {"name": "e", "kind": "error_status", "status": 503, "first_n": 2, "origin": "h"}
        got, [listed] = await statuses(fault, ["h", "stray", "h", "h", "h"])
        assert got == [503, 200, 503, 200, 200]  # the stray request neither errs nor counts
        assert (listed["first_n"], listed["matched"], listed["fired"]) == (2, 4, 2)

    run(body)


def test_probability_is_seeded_the_same_seed_gives_the_same_requests_errors() -> None:
    async def body() -> None:
        fault = {"name": "e", "kind": "error_status", "probability": 0.5}
        users = ["h"] * 40
        first, _ = await statuses(fault, users, seed=7)
        again, _ = await statuses(fault, users, seed=7)
        other, _ = await statuses(fault, users, seed=8)
        assert first == again  # deterministic with the stub's seed
        assert first != other  # and the seed is what decides
        assert 5 < first.count(500) < 35  # a fraction, neither none nor all
        assert set(first) == {200, 500}

    run(body)


def test_first_n_and_probability_together_give_at_most_n_errors() -> None:
    async def body() -> None:
        fault = {"name": "e", "kind": "error_status", "probability": 0.5, "first_n": 3}
        got, [listed] = await statuses(fault, ["h"] * 40, seed=1)
        assert got.count(500) == 3 and got[-1] == 200
        assert listed["fired"] == 3

    run(body)


def test_the_unlimited_default_errors_every_request_and_lists_as_before() -> None:
    faults = StubFaultSet(seed=3)
    fault = parse_fault({"name": "e", "kind": "error_status"})
    assert (fault.first_n, fault.probability) == (0, 1.0)
    assert "first_n" not in fault.to_json() and "probability" not in fault.to_json()
    faults.add(fault)
    assert all(faults.fire("error_status", "any") is fault for _ in range(50))
    assert faults.find("error_status", "any") is fault  # find looks, it never counts
    assert faults.to_json()[0]["fired"] == 50


@pytest.mark.parametrize(
    ("params", "text"),
    [
        ({"first_n": -1}, "first_n must be within"),
        ({"first_n": 1.5}, "first_n must be an integer"),
        ({"probability": 1.5}, "probability must be a number within 0..1"),
        ({"probability": True}, "probability must be a number"),
        ({"probability": "half"}, "probability must be a number"),
    ],
)
def test_bad_limits_say_what_is_wrong(params: dict[str, Any], text: str) -> None:
    with pytest.raises(FaultError, match=text):
        parse_fault({"name": "e", "kind": "error_status", **params})


def test_the_error_status_class_sends_its_limits() -> None:
    fault = ErrorStatus("prefill-0", status=503, first_n=1, probability=0.25)
    payload = fault.payload()
    assert (payload["first_n"], payload["probability"]) == (1, 0.25)
    parsed = parse_fault(payload)
    assert (parsed.first_n, parsed.probability, parsed.status) == (1, 0.25, 503)
