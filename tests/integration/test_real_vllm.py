"""Real vLLM on CPU as prefill and decode (the ``vllm`` worker kind): the decode pulls the
prompt's KV from the prefill over NIXL behind both real routers, and the seed incident is
located at the router on the real engine. The engine's environment and tiny model are made on
first use (minutes on a fresh machine), and a 1P+1D takes about 7 GB of RAM, so these tests
share one group: one xdist worker, one 1P+1D at a time.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import psutil
import pytest

from pytest_wedge.faults import PauseEngineProcess
from pytest_wedge.handle import Wedge
from pytest_wedge.metrics_text import metric_value
from pytest_wedge.scenarios.catalog import catalog
from pytest_wedge.scenarios.on_engine import VLLM as ENGINE
from pytest_wedge.scenarios.on_engine import on_vllm
from pytest_wedge.scenarios.runner import run_scenario
from pytest_wedge.waiting import wait_for

# First use makes a 5.7 GB environment (3-6 min) before two engines start (1-3 min).
pytestmark = [pytest.mark.timeout(1500), pytest.mark.xdist_group("real-vllm")]
SEED = {s.name: s for s in catalog()}["stray-requester-masks-router-wedge"]
BY_SOURCE = "vllm:prompt_tokens_by_source_total"
GENERATED = "vllm:generation_tokens_total"


def open_on(wedge_factory: Any, router: str) -> Wedge:
    """The seed scenario's topology (so its test reuses this bring-up) on real engines."""
    spec = on_vllm(SEED, router).spec
    wedge: Wedge = wedge_factory(
        router=router, stub=spec.stub, prefill_worker=ENGINE, decode_worker=ENGINE
    )
    assert wedge.topology.spec == spec
    return wedge


def pulled_tokens(wedge: Wedge) -> float:
    text = httpx.get(wedge.topology.worker_url("decode-0") + "/metrics").text
    return metric_value(text, BY_SOURCE, source="external_kv_transfer")


def engine_group(wedge: Wedge, name: str) -> list[psutil.Process]:
    """Every process of one engine: its API server's process group (the engine forks)."""
    pgid = wedge.topology.pids()[name]
    assert pgid is not None
    return [p for p in psutil.process_iter() if _pgid(p.pid) == pgid]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


# `make test` keeps one real bring-up (vllm-router); `make real-engine` adds smg's.
ALL = os.environ.get("WEDGE_REAL_VLLM") == "all"
ONLY_IN_MAKE_REAL = pytest.mark.skipif(not ALL, reason="a second bring-up: make real-engine")


@pytest.mark.parametrize("router", ["vllm-router", pytest.param("smg", marks=ONLY_IN_MAKE_REAL)])
def test_the_decode_pulls_the_prompts_kv_from_the_prefill(wedge_factory: Any, router: str) -> None:
    wedge = open_on(wedge_factory, router)
    # API server, EngineCore (running the model) and helpers, all in the API server's process group.
    assert len(engine_group(wedge, "decode-0")) >= 3
    before = pulled_tokens(wedge)
    prompt = "the router sends the prefill a request and the decode waits for its kv " * 4
    body = {"model": wedge.topology.spec.stub.model, "prompt": prompt, "max_tokens": 8}
    answer = httpx.post(wedge.topology.url + "/v1/completions", json=body, timeout=120.0)
    assert answer.status_code == 200, answer.text
    prompt_tokens = answer.json()["usage"]["prompt_tokens"]
    assert prompt_tokens > 50
    # Every prompt token reached the decode by NIXL transfer, none recomputed there.
    assert pulled_tokens(wedge) - before == prompt_tokens


def test_the_seed_incident_is_located_at_the_router_on_real_vllm(wedge_factory: Any) -> None:
    scenario = on_vllm(SEED, "vllm-router")
    wedge = open_on(wedge_factory, "vllm-router")
    result = run_scenario(wedge, scenario)  # asserts located_at = router, stray-1 named
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.location == "router", diagnosis
    assert diagnosis.locator == "blind"


def test_engine_core_stopped_leaves_health_200_and_the_metrics_frozen(wedge_factory: Any) -> None:
    """The seed incident's "health is fine, nothing moves", on a real engine: with the decode's
    EngineCore stopped, its API server still answers /health 200, a request hangs, and
    generation stops; SIGCONT lets the request finish."""
    wedge = open_on(wedge_factory, "vllm-router")
    decode = wedge.topology.worker_url("decode-0")
    stopped = wedge.apply(PauseEngineProcess(target="decode-0", process="engine-core"))
    body = {"model": wedge.topology.spec.stub.model, "prompt": "the kv " * 20, "max_tokens": 4}
    try:
        generated = metric_value(httpx.get(decode + "/metrics").text, GENERATED)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(wedge.topology.url + "/v1/completions", json=body, timeout=10.0)
        assert httpx.get(decode + "/health", timeout=5.0).status_code == 200
        # Ten seconds with a request sent, and not one token more.
        assert metric_value(httpx.get(decode + "/metrics").text, GENERATED) == generated
    finally:
        wedge.revert(stopped)
    # vllm-router may have marked the decode unhealthy while its engine stood still (a health
    # check that timed out on a loaded machine), and answers 503 "No available workers" until
    # its next check takes it back (routers.md B4).
    wait_for(
        lambda: httpx.get(wedge.topology.router_url + "/readiness", timeout=5.0).is_success,
        timeout_s=60,
        what="vllm-router to count decode-0 healthy again",
    )
    answer = httpx.post(wedge.topology.url + "/v1/completions", json=body, timeout=120.0)
    assert answer.status_code == 200, answer.text
