"""smg facts that decide whether a watchdog can work, each shown against the real router.

docs/validating-watchdogs.md cites these tests: a watchdog plan built on a wrong belief about
the router fails in production, so each belief is checked here.
"""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from pytest_wedge.faults import Pause, SlowTokens, StallAfterTokens
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.mark.wedge(router_args=["--request-timeout-secs", "2"])
def test_request_timeout_is_a_hard_cap_that_cuts_healthy_long_streams(wedge):
    # 12 tokens at 300 ms each is a healthy 3.6 s stream; the 2 s cap ends it anyway.
    wedge.apply(SlowTokens("decode-0", itl_ms=300))
    harness = wedge.harness(agents=1, rounds=1, max_tokens=12, client_timeout_s=20)
    assert harness.wait(15)
    (record,) = wedge.ledger.by_origin("harness")
    assert record.state == "error" and record.status == 200
    assert 3 <= record.tokens < 12
    assert "timed out" in (record.error or "")
    assert 1.8 <= record.finished - record.sent <= 3.0


@pytest.mark.wedge(router_args=["--sse-keepalive-secs", "1"])
def test_sse_keepalives_defeat_a_client_idle_timeout(wedge):
    # A client that gives up after 2 s of silence never does: the router's `: ping` comments
    # arrive every second while the decode stays stalled.
    wedge.apply(StallAfterTokens("decode-0", tokens=1))
    body = {
        "model": "stub-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 8,
        "stream": True,
    }
    timeout = httpx.Timeout(connect=2.0, read=2.0, write=2.0, pool=2.0)
    pings, started = 0, time.monotonic()
    with httpx.stream("POST", wedge.url + "/v1/chat/completions", json=body, timeout=timeout) as r:
        for line in r.iter_lines():
            pings += line.startswith(":")
            if time.monotonic() - started > 4.5:
                break
    assert pings >= 3, "the read timeout would have fired without keep-alives"


@pytest.mark.wedge(
    router_args=["--health-check-interval-secs", "1", "--health-check-timeout-secs", "1"]
)
def test_health_state_never_cancels_requests_already_in_flight(wedge):
    harness = wedge.harness(agents=1, rounds=1, max_tokens=400, client_timeout_s=30)
    wait_for(
        lambda: any(r.tokens for r in wedge.ledger.by_origin("harness")),
        timeout_s=5,
        what="the stream to start",
    )
    wedge.apply(SlowTokens("decode-0", itl_ms=50))
    wedge.apply(Pause("decode-0"))
    wait_for(
        lambda: wedge.metric("router", "smg_worker_health") < 2,
        timeout_s=10,
        what="the router to mark the paused decode unhealthy",
    )
    (record,) = wedge.ledger.by_origin("harness")
    assert record.state == "pending", "the router cancelled an in-flight request"
    harness.stop()


@pytest.mark.wedge(router_args=["--stream-body-stall-timeout-secs", "1"])
def test_stream_body_stall_timeout_bounds_a_stalled_client_upload(wedge):
    port = wedge.topology.links["client->router"].listen_port
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 500\r\n\r\n{"model": "stub-model",'
    )
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head)  # ...and never the rest of the body
        answer = sock.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 408")
    assert "request_body_stalled" in answer
    assert 0.9 <= time.monotonic() - started <= 2.5
    assert not wedge.stub("decode-0").ledger()["entries"], "nothing reached the workers"
