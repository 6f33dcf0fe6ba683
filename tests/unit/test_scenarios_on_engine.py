"""A catalog scenario on real vLLM engines: what only the stubs can do is named, the load is
scaled, one bring-up serves the scenarios of one router and shape, and the fidelity table
calls a real cell different exactly when its outcome or location differs from the stubs'."""

from __future__ import annotations

import pytest

import bench.fidelity as fidelity
from bench.fidelity import Explanation, differences, explained, text
from pytest_wedge.scenarios.catalog import catalog
from pytest_wedge.scenarios.on_engine import AGENTS, OVERDUE_S, on_vllm, stub_only_parts

CATALOG = {s.name: s for s in catalog()}


def test_stub_engine_faults_and_stub_deadlines_are_named_as_stub_only() -> None:
    assert stub_only_parts(CATALOG["stray-requester-masks-router-wedge"]) == []
    [fault] = stub_only_parts(CATALOG["half-open-decode-stream"])
    assert fault == "StallAfterTokens on decode-0 is a stub engine fault"
    [deadline] = stub_only_parts(CATALOG["kv-transfer-blackhole"])
    assert "stub's own deadline" in deadline


def test_a_probe_of_a_path_vllm_does_not_serve_is_stub_only() -> None:
    [probe] = stub_only_parts(CATALOG["liveness-on-health-generate-kills-a-healthy-decode"])
    assert probe == (
        "the liveness probe of decode-0 asks /health_generate, which vLLM does not serve (SGLang's)"
    )
    assert stub_only_parts(CATALOG["engine-core-stopped-health-200"]) == []


def test_the_load_is_scaled_to_a_cpu_engine_and_the_workers_are_real() -> None:
    seed = on_vllm(CATALOG["stray-requester-masks-router-wedge"], "vllm-router")
    assert seed.spec.prefill_worker.kind == seed.spec.decode_worker.kind == "vllm"
    assert seed.spec.router.kind == "vllm-router" and seed.spec.worker_protocol == "vllm"
    assert seed.harness["agents"] == AGENTS and seed.harness["max_tokens"] == 2
    assert all(s["rate_per_s"] == 0.5 for s in seed.strays)
    # Two rounds, each within the client's 20 s deadline, and 10 s to spare.
    assert seed.expect.finish_within_s == 2 * 20.0 + 10.0
    # A healthy request of a CPU engine takes seconds: the stubs' 1 s would call it overdue.
    assert seed.expect.overdue_after_s == OVERDUE_S > CATALOG[seed.name].expect.overdue_after_s
    # ...and the router's pause lasts as much longer, or it would end before its wedge shows.
    [pause], [stub_pause] = seed.faults, CATALOG[seed.name].faults
    assert pause.fault == stub_pause.fault and stub_pause.for_s is not None
    assert pause.for_s == stub_pause.for_s + OVERDUE_S - CATALOG[seed.name].expect.overdue_after_s


def test_scenarios_of_one_router_and_shape_share_one_bring_up() -> None:
    """The stubs' options shape the stubs only: dropped, two scenarios that set different ones
    ask for the same topology of real engines (a bring-up costs a minute)."""
    seed, pool = CATALOG["stray-requester-masks-router-wedge"], CATALOG["client-pool-deadlock"]
    assert seed.spec.stub != pool.spec.stub  # the seed's stubs answer faster
    assert on_vllm(seed, "smg").spec == on_vllm(pool, "smg").spec
    assert on_vllm(seed, "smg").spec.stub.model == seed.spec.stub.model


def test_a_real_cell_differs_when_its_outcome_or_location_does() -> None:
    passed = {"outcome": "passed", "located_at": "router", "lost": 0}
    table = {
        "same": {"stubs": passed, "vllm-router": dict(passed), "smg": dict(passed)},
        "elsewhere": {"stubs": passed, "vllm-router": passed | {"located_at": "decode-0"}},
        "fails": {"stubs": passed, "smg": passed | {"outcome": "failed", "reason": "x"}},
    }
    found = differences(table, ["stubs", "vllm-router", "smg"])
    assert found == [("elsewhere", "vllm-router"), ("fails", "smg")]
    assert text(table["fails"]["smg"]) == "failed: x; at router; lost 0"


def test_an_explanation_holds_only_while_the_cell_shows_what_was_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    why = Explanation(shows="the watchdogs did not leave healthy work alone", why="slow TTFT")
    monkeypatch.setattr(fidelity, "EXPLAINED", {("s", "smg"): why})
    cut = {"outcome": "failed", "reason": "x", "detail": why.shows, "lost": 0}
    assert explained("s", "smg", cut) == "slow TTFT"
    assert explained("s", "vllm-router", cut) is None
    assert explained("s", "smg", cut | {"detail": "lost 4 requests"}) is None


def test_a_bounded_pool_keeps_its_agents_on_an_engine() -> None:
    # More agents than connections is the scenario: capped to 4 on a pool of 4, none would wait.
    pool = on_vllm(CATALOG["client-pool-deadlock"], "smg")
    assert pool.harness["agents"] == CATALOG["client-pool-deadlock"].harness["agents"] > AGENTS
    assert pool.harness["max_connections"] < pool.harness["agents"]
