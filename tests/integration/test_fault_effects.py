"""Each fault's effect end to end, through the real router and Toxiproxy (one test per fault)."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from pytest_wedge.faults import (
    Bandwidth,
    Crash,
    Down,
    ErrorStatus,
    FaultNotApplied,
    Kill,
    LimitData,
    Pause,
    RefuseBootstrap,
    ResetPeer,
    Restart,
    Slicer,
    SlowClose,
    SlowTokens,
    StallBeforeFirstToken,
    Terminate,
    Timeout,
)
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
CLIENT_LINK = "client->router"


def chat(wedge, *, max_tokens=8, stream=False, timeout=10.0) -> httpx.Response:
    body = {
        "model": "stub-model",
        "messages": [{"role": "user", "content": "effect"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    return httpx.post(wedge.url + "/v1/chat/completions", json=body, timeout=timeout)


def timed(fn) -> float:
    started = time.monotonic()
    fn()
    return time.monotonic() - started


def stream_timings(wedge, max_tokens=6) -> list[float]:
    """Arrival time of each token of one streamed chat completion."""
    body = {
        "model": "stub-model",
        "messages": [{"role": "user", "content": "itl"}],
        "max_tokens": max_tokens,
        "stream": True,
    }
    started, times = time.monotonic(), []
    with httpx.stream("POST", wedge.url + "/v1/chat/completions", json=body, timeout=20) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"content"' in line:
                times.append(time.monotonic() - started)
    return times


# -- network faults (Toxiproxy toxics on client->router) -----------------------------------


def test_bandwidth_slows_the_response(wedge):
    baseline = timed(lambda: chat(wedge, max_tokens=64))
    wedge.apply(Bandwidth(CLIENT_LINK, rate_kb_per_s=1))
    slowed = timed(lambda: chat(wedge, max_tokens=64).raise_for_status())
    assert slowed - baseline >= 0.3, (baseline, slowed)


def test_slow_close_delays_the_close(wedge):
    port = wedge.topology.links[CLIENT_LINK].listen_port
    wedge.apply(SlowClose(CLIENT_LINK, delay_ms=500))

    def fetch_until_eof() -> None:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /liveness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while sock.recv(4096):
                pass

    assert timed(fetch_until_eof) >= 0.45


def test_timeout_zero_is_a_black_hole_that_holds_the_connection(wedge):
    wedge.apply(Timeout(CLIENT_LINK, timeout_ms=0))
    with pytest.raises(httpx.ReadTimeout):
        chat(wedge, timeout=1.0)


def test_reset_peer_resets_the_connection(wedge):
    wedge.apply(ResetPeer(CLIENT_LINK, stream="upstream"))
    with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
        chat(wedge)


def test_slicer_splits_the_stream_into_slow_small_writes(wedge):
    baseline = timed(lambda: chat(wedge, max_tokens=16))
    wedge.apply(Slicer(CLIENT_LINK, average_size_bytes=1, delay_us=2000))
    response = None

    def sliced() -> None:
        nonlocal response
        response = chat(wedge, max_tokens=16)

    assert timed(sliced) - baseline >= 0.3
    assert response is not None and response.json()["usage"]["completion_tokens"] == 16


def test_limit_data_cuts_the_response(wedge):
    wedge.apply(LimitData(CLIENT_LINK, bytes=60))
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        chat(wedge)


def test_down_refuses_connections(wedge):
    wedge.apply(Down(CLIENT_LINK))
    with pytest.raises(httpx.ConnectError):
        chat(wedge)


# -- component faults ----------------------------------------------------------------------


def test_kill_stops_a_worker_and_revert_starts_it(wedge):
    fault = wedge.apply(Kill("decode-0"))
    assert wedge.topology.runtime.state("decode-0") == "exited"
    assert chat(wedge).status_code >= 500
    wedge.revert(fault)
    assert wedge.topology.runtime.state("decode-0") == "running"
    assert httpx.get(wedge.worker_url("decode-0") + "/health", timeout=2).status_code == 200


def test_restart_gives_a_new_process_that_serves(wedge):
    before = wedge.topology.runtime.pid("prefill-0")
    wedge.apply(Restart("prefill-0"))
    assert wedge.topology.runtime.pid("prefill-0") != before
    assert chat(wedge).status_code == 200


def test_terminate_stops_a_worker_gracefully_and_kill_does_not(wedge):
    terminated = wedge.apply(Terminate("decode-0"))
    assert wedge.topology.runtime.exit_code("decode-0") == 0  # it ran its own shutdown
    assert chat(wedge).status_code >= 500
    wedge.revert(terminated)
    wedge.apply(Kill("decode-0"))
    assert wedge.topology.runtime.exit_code("decode-0") == -9
    window = wedge.faults.windows[-1]
    assert window.verified == "decode-0 exited (exit status -9)", window


def test_every_fault_family_records_what_showed_it_took_effect(wedge):
    for fault in (
        Pause("router"),
        Timeout(target=CLIENT_LINK, timeout_ms=0),
        Down(target="router->decode-0"),
        StallBeforeFirstToken(target="prefill-0"),
        Restart("prefill-0"),
    ):
        wedge.apply(fault)
        window = wedge.faults.windows[-1]
        assert window.verified_at is not None and window.verified_at >= window.started, window
        assert window.verified, window
        if fault.target == "router":
            wedge.revert(fault)
    verified = [w.verified for w in wedge.faults.windows]
    assert verified[0].endswith("of router stopped (T)")
    assert verified[1] == "Toxiproxy lists timeout downstream on client->router"
    assert verified[2] == "Toxiproxy shows router->decode-0 disabled"
    assert verified[3] == "prefill-0 reports stall_before_first_token active"
    assert verified[4].startswith("prefill-0 new pid ") and verified[4].endswith(" answering")


def test_a_pause_of_a_process_that_already_exited_fails_at_once(wedge):
    wedge.apply(Kill("decode-0"))
    started = time.monotonic()
    with pytest.raises(FaultNotApplied) as failure:
        wedge.apply(Pause("decode-0"))
    assert time.monotonic() - started < 2.0
    text = str(failure.value)
    assert "Pause on decode-0 did not take effect" in text
    assert "expected: every process of decode-0 stopped (state T)" in text
    assert "seen: runtime: exited; processes: none" in text


# -- engine faults in the stubs ------------------------------------------------------------


def test_stall_before_first_token_holds_the_stream(wedge):
    wedge.apply(StallBeforeFirstToken("decode-0"))
    with pytest.raises(httpx.ReadTimeout):
        chat(wedge, stream=True, timeout=1.0)


def test_error_status_reaches_the_client(wedge):
    wedge.apply(ErrorStatus("decode-0", status=503, message="overloaded"))
    response = chat(wedge)
    assert response.status_code == 503
    assert "overloaded" in response.text


def test_slow_tokens_stretch_inter_token_latency(wedge):
    wedge.apply(SlowTokens("decode-0", itl_ms=150))
    times = stream_timings(wedge)
    # The stub sleeps 150 ms before each token after the first, so the sixth cannot arrive
    # sooner than 5 x 150 ms after the request left. No single gap has a lower bound at the
    # client: a token that a busy machine delivers late arrives right before the next one.
    assert len(times) == 6 and times[-1] >= 5 * 0.15, times


def test_crash_exits_the_worker_on_its_next_request(wedge):
    fault = wedge.apply(Crash("decode-0", exit_code=3))
    assert chat(wedge).status_code >= 500
    wait_for(
        lambda: wedge.topology.runtime.exit_code("decode-0") == 3,
        timeout_s=5,
        what="decode-0 to exit with code 3",
    )
    wedge.revert(fault)
    assert wedge.topology.runtime.state("decode-0") == "running"


def test_refuse_bootstrap_fails_the_kv_transfer(wedge):
    wedge.apply(RefuseBootstrap())
    response = chat(wedge)
    assert response.status_code >= 500
    counters = wedge.stub("decode-0").state()["counters"]
    assert counters["bootstrap_failed"] >= 1
