"""The topology itself: real smg in PD mode, real Toxiproxy on every hop, stub workers."""

from __future__ import annotations

import time

import httpx
import pytest

from pytest_wedge.faults import Latency, SlowTokens
from pytest_wedge.metrics_text import metric_value
from pytest_wedge.waiting import wait_for

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
    # The client is built before the clock starts: a new httpx client loads the CA bundle
    # (about 25 ms of CPU, several times that on a loaded machine), which is no part of a TTFT.
    with httpx.Client(timeout=10, trust_env=False) as client:
        started = time.monotonic()
        with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    return time.monotonic() - started
    raise AssertionError("no token arrived")


def test_latency_toxic_on_router_to_decode_raises_ttft(wedge):
    baseline = min(_ttft(wedge.url) for _ in range(3))
    with wedge.fault(Latency("router->decode-0", latency_ms=300)):
        slowed = min(_ttft(wedge.url) for _ in range(3))
    # The toxic adds 300 ms to the head; the best baseline is a little faster than the rest of
    # the slowed request, so allow 50 ms of measurement noise on the difference.
    assert slowed >= 0.3 and slowed - baseline >= 0.25, (baseline, slowed)


def _toxics(wedge) -> dict[str, list[str]]:
    """The toxics on each of the topology's proxies, by link."""
    proxies = wedge.topology.toxiproxy.proxies()
    return {
        name: [toxic["name"] for toxic in proxies[link.proxy]["toxics"]]
        for name, link in wedge.topology.links.items()
    }


def test_apply_puts_the_toxic_on_its_link_only(wedge):
    fault = wedge.apply(Latency("router->decode-0", latency_ms=300))
    toxics = _toxics(wedge)
    assert toxics.pop("router->decode-0") == [fault.toxic_name]
    assert all(not names for names in toxics.values()), toxics


def test_no_toxic_survives_into_the_next_test(wedge, wedge_factory):
    # Leave a toxic behind the way a crashed test would: straight on the proxy, so the handle
    # knows nothing of it and cannot revert it.
    leaked = Latency("router->decode-0", latency_ms=300)
    wedge.topology.toxiproxy.add_toxic(wedge.topology.links[leaked.target].proxy, leaked.payload())
    assert _toxics(wedge)[leaked.target] == [leaked.toxic_name]
    # The next test's handle: opening it resets the topology, whatever the last test left.
    following = wedge_factory()
    assert following.topology is wedge.topology
    assert _toxics(following) == {name: [] for name in following.topology.links}
    assert _ttft(following.url) < 0.3


def test_router_sees_both_stubs_as_ready_sglang_workers(wedge):
    workers = httpx.get(wedge.topology.router_url + "/workers", timeout=5).json()["workers"]
    assert {w["worker_type"] for w in workers} == {"prefill", "decode"}
    for worker in workers:
        assert worker["runtime_type"] == "sglang"
        assert worker["is_healthy"] is True


def test_router_in_flight_gauge_rises_during_a_request(wedge):
    wedge.apply(SlowTokens("decode-0", itl_ms=100))
    metrics_url = wedge.topology.router_metrics_url

    def active() -> float:
        text = httpx.get(metrics_url, timeout=5).text
        return metric_value(text, "smg_worker_requests_active")

    assert active() == 0
    harness = wedge.harness(agents=1, rounds=1, max_tokens=20)
    seen = wait_for(active, timeout_s=5, what="the router's in-flight gauge to rise")
    assert seen >= 1
    assert harness.wait(10)
    [record] = wedge.ledger.by_origin("harness")
    assert (record.state, record.tokens) == ("ok", 20)
    # ...and falls back once the request is done: the gauge counts requests, not history.
    wait_for(
        lambda: active() == 0,
        timeout_s=5,
        what="the router's in-flight gauge to return to 0",
        describe=lambda: f"smg_worker_requests_active={active():g}",
    )
