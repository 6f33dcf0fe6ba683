"""The vLLM stubs in a full topology. smg 1.13 classifies a worker that serves ``/version``
as vLLM and switches to sequential PD (router-protocol.md §1): the prefill first, then the
decode with the prefill's ``kv_transfer_params``. The catalog's KV black hole must be located
on its link from vLLM's metric names, as it is from SGLang's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest

from pytest_wedge.handle import Wedge
from pytest_wedge.scenarios.catalog import Scenario, catalog
from pytest_wedge.scenarios.runner import run_scenario

pytestmark = pytest.mark.timeout(180)
CATALOG = {s.name: s for s in catalog()}


def on_vllm_stubs(scenario: Scenario) -> Scenario:
    stub = dataclasses.replace(scenario.spec.stub, protocol="vllm")
    return dataclasses.replace(scenario, spec=dataclasses.replace(scenario.spec, stub=stub))


def open_on(wedge_factory: Any, scenario: Scenario) -> Wedge:
    spec = scenario.spec
    wedge: Wedge = wedge_factory(
        prefill=spec.prefill, decode=spec.decode, router_args=spec.router_args, stub=spec.stub
    )
    return wedge


def test_smg_runs_vllm_stubs_sequentially_with_the_prefills_handle(wedge_factory: Any) -> None:
    wedge = open_on(wedge_factory, on_vllm_stubs(CATALOG["kv-transfer-blackhole"]))
    body = {
        "model": "stub-model",
        "messages": [{"role": "user", "content": "hi " * 20}],
        "max_tokens": 4,
        "stream": False,
        "user": "harness",
    }
    answer = httpx.post(
        f"{wedge.url}/v1/chat/completions", json=body, headers={"X-Request-ID": "seq-1"}, timeout=20
    )
    assert answer.status_code == 200, answer.text
    (prefill,) = [
        e
        for e in wedge.topology.stub("prefill-0").ledger()["entries"]
        if e["request_id"] == "seq-1"
    ]
    (decode,) = [
        e for e in wedge.topology.stub("decode-0").ledger()["entries"] if e["request_id"] == "seq-1"
    ]
    assert prefill["max_tokens"] == 1 and decode["max_tokens"] == 4
    # Sequential, and the decode pulled the very KV the prefill held (the same room).
    assert prefill["t"]["kv_ready"] <= decode["t"]["arrived"]
    assert decode["room"] == prefill["room"] and "kv_received" in decode["t"]
    metrics = wedge.topology.stub("decode-0").metrics()
    assert "vllm:num_requests_running" in metrics and "sglang:" not in metrics


def test_a_kv_black_hole_is_located_from_vllm_metric_names(wedge_factory: Any) -> None:
    scenario = on_vllm_stubs(CATALOG["kv-transfer-blackhole"])
    wedge = open_on(wedge_factory, scenario)
    result = run_scenario(wedge, scenario)  # located, red herring named, cleared in budget
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.location == "decode-0->prefill-0"
    assert diagnosis.locator == "blind" and not diagnosis.disagrees(), diagnosis.render()
