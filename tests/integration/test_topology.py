"""The topology itself: real smg in PD mode, real Toxiproxy on every hop, stub workers."""

from __future__ import annotations

import time

import httpx
import pytest

from pytest_wedge.evidence.prometheus import metric_value
from pytest_wedge.faults import Latency, SlowTokens
from pytest_wedge.load import Harness

pytestmark = pytest.mark.timeout(60)
CHAT = {"model": "stub-model", "messages": [{"role": "user", "content": "ping"}]}


def test_30_streams_through_router_each_complete_with_origin_and_room(wedge):
    harness = wedge.harness(agents=30, rounds=1, max_tokens=12, client_timeout_s=20)
    assert harness.wait(30)
    records = wedge.ledger.by_origin("harness")
    assert records.states() == {"ok": 30} | {s: 0 for s in records.states() if s != "ok"}
    # The client marks a stream ok only when it ended with [DONE].
    assert all(r.tokens == 12 and r.state == "ok" for r in records)

    ledgers = wedge.worker_ledgers()
    prefill = {e["request_id"]: e for e in ledgers["prefill-0"]["entries"]}
    decode = {e["request_id"]: e for e in ledgers["decode-0"]["entries"]}
    for record in records:
        p, d = prefill[record.request_id], decode[record.request_id]
        assert p["origin"] == d["origin"] == "harness"
        assert p["room"] == d["room"] and p["room"] is not None
        assert p["state"] == d["state"] == "ok"


def _ttft(url: str) -> float:
    body = CHAT | {"stream": True, "max_tokens": 2}
    started = time.monotonic()
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=10) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                return time.monotonic() - started
    raise AssertionError("no token arrived")


def test_latency_toxic_on_router_to_decode_raises_ttft(wedge):
    baseline = min(_ttft(wedge.url) for _ in range(3))
    with wedge.fault(Latency(link="router->decode-0", latency_ms=300)):
        slowed = min(_ttft(wedge.url) for _ in range(3))
    # The toxic adds 300 ms to the head; the best baseline is a little faster than the rest of
    # the slowed request, so allow 50 ms of measurement noise on the difference.
    assert slowed >= 0.3 and slowed - baseline >= 0.25, (baseline, slowed)


def test_toxic_from_previous_test_is_gone(wedge):
    # A toxic left active by a test would show here: reset removes them between tests.
    wedge.apply(Latency(link="router->decode-0", latency_ms=300))
    proxies = wedge.topology.toxiproxy.proxies()
    assert proxies[wedge.topology.links["router->decode-0"].proxy]["toxics"]


def test_no_toxic_survives_into_the_next_test(wedge):
    proxies = wedge.topology.toxiproxy.proxies()
    assert all(not proxy["toxics"] for proxy in proxies.values())
    assert _ttft(wedge.url) < 0.3


def test_router_sees_both_stubs_as_ready_sglang_workers(wedge):
    workers = httpx.get(wedge.topology.router_url + "/workers", timeout=5).json()["workers"]
    assert {w["worker_type"] for w in workers} == {"prefill", "decode"}
    for worker in workers:
        assert worker["runtime_type"] == "sglang"
        assert worker["is_healthy"] is True


def test_router_in_flight_gauge_rises_during_a_request(wedge):
    wedge.apply(SlowTokens(component="decode-0", itl_ms=100))
    metrics_url = wedge.topology.router_metrics_url

    def active() -> float:
        text = httpx.get(metrics_url, timeout=5).text
        return metric_value(text, "smg_worker_requests_active")

    assert active() == 0
    harness = wedge.harness(agents=1, rounds=1, max_tokens=20)
    deadline = time.monotonic() + 5
    seen = 0.0
    while time.monotonic() < deadline and not seen:
        seen = active()
    assert seen >= 1
    assert harness.wait(10)
    assert isinstance(harness, Harness)
