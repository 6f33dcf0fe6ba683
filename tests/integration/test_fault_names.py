"""Equal faults side by side, through the real router, Toxiproxy and stubs: each fault
instance has its own name, so two of one kind both apply and each reverts only itself."""

from __future__ import annotations

import time

import httpx
import pytest

from pytest_wedge.faults import ErrorStatus, Latency

pytestmark = pytest.mark.timeout(60)
CLIENT_LINK = "client->router"


def chat(wedge, origin: str = "harness") -> httpx.Response:
    body = {
        "model": "stub-model",
        "messages": [{"role": "user", "content": "names"}],
        "max_tokens": 4,
        "user": origin,
        "wedge_origin": origin,
    }
    return httpx.post(
        wedge.url + "/v1/chat/completions",
        json=body,
        timeout=10.0,
        headers={"x-request-id-origin": origin},
    )


def timed_ok(wedge) -> float:
    started = time.monotonic()
    chat(wedge).raise_for_status()
    return time.monotonic() - started


def toxic_names(wedge, link: str) -> set[str]:
    proxy = wedge.topology.links[link].proxy
    return {toxic["name"] for toxic in wedge.topology.toxiproxy.toxics(proxy)}


def test_two_latency_toxics_on_one_link_both_apply_and_revert_alone(wedge):
    first = wedge.apply(Latency(CLIENT_LINK, latency_ms=300))
    second = wedge.apply(Latency(CLIENT_LINK, latency_ms=300))
    assert toxic_names(wedge, CLIENT_LINK) == {first.toxic_name, second.toxic_name}
    assert timed_ok(wedge) >= 0.55  # the toxics chain: 2 x 300 ms, more than one could add

    wedge.revert(first)
    assert toxic_names(wedge, CLIENT_LINK) == {second.toxic_name}
    assert timed_ok(wedge) >= 0.28  # the other one still delays


# smg retries a worker error five times and charges every attempt to both workers' breakers:
# a few errors would open them and fail the other origins' requests too.
@pytest.mark.wedge(router_args=["--disable-retries", "--disable-circuit-breaker"])
def test_two_origin_scoped_error_faults_revert_one_at_a_time(wedge):
    decode = wedge.stub("decode-0")
    alpha = wedge.apply(ErrorStatus("decode-0", origin="alpha", status=503, message="alpha-f"))
    beta = wedge.apply(ErrorStatus("decode-0", origin="beta", status=503, message="beta-f"))
    assert {f["name"] for f in decode.faults()} == {alpha.fault_name, beta.fault_name}
    answer = chat(wedge, "alpha")
    assert answer.status_code == 503 and "alpha-f" in answer.text
    answer = chat(wedge, "beta")
    assert answer.status_code == 503 and "beta-f" in answer.text
    assert chat(wedge, "harness").status_code == 200  # neither fault's origin

    wedge.revert(alpha)
    left = decode.faults()
    assert [(f["name"], f["origin"]) for f in left] == [(beta.fault_name, "beta")]
    assert chat(wedge, "alpha").status_code == 200
    answer = chat(wedge, "beta")
    assert answer.status_code == 503 and "beta-f" in answer.text

    wedge.revert(beta)
    assert decode.faults() == []
    assert chat(wedge, "beta").status_code == 200
