"""One vocabulary for both engines: SGLang's and vLLM's exported names read as the same
canonical quantities (evidence/metric_names.py), from text the stubs really render."""

from __future__ import annotations

from pytest_wedge.evidence.metric_names import SGLANG, VLLM, VLLM_MISSING, vocabulary
from pytest_wedge.evidence.parse import parse_engine_metrics
from pytest_wedge.stubs import exposition
from pytest_wedge.stubs.config import StubConfig
from pytest_wedge.stubs.engine_state import Engine
from pytest_wedge.stubs.worker_ledger import Entry


def engine(role: str, protocol: str) -> Engine:
    return Engine(StubConfig(role=role, port=1, model="m", protocol=protocol))


def entry(eng: Engine, state: str) -> Entry:
    e = Entry(
        request_id=state,
        origin="harness",
        room=1,
        path="/generate",
        stream=False,
        prompt_tokens=10,
        max_tokens=4,
    )
    eng.ledger.open(e, state)
    return e


def busy_decode(protocol: str) -> Engine:
    """A decode with one request in each of queued, prealloc, transfer, running, and counts."""
    eng = engine("decode", protocol)
    for state in ("queued", "prealloc", "transfer", "running"):
        entry(eng, state)
    eng.ledger.add_tokens(entry(eng, "running"), 7)
    eng.counters.transfer_failed, eng.counters.prompt_tokens = 2, 50
    return eng


def vllm_metrics_text(eng: Engine) -> str:
    return exposition.render(exposition.make_registry(eng)).decode()


def test_both_engines_read_as_the_same_canonical_quantities() -> None:
    sglang = parse_engine_metrics(
        exposition.render(exposition.make_registry(busy_decode("sglang"))).decode()
    )
    vllm = parse_engine_metrics(vllm_metrics_text(busy_decode("vllm")))
    shared = set(vllm)
    assert shared == {
        "num_running_reqs",
        "num_queue_reqs",
        "num_decode_transfer_queue_reqs",
        "generation_tokens",
        "prompt_tokens",
        "num_aborted_requests",
        "num_transfer_failed_reqs",
        "num_bootstrap_failed_reqs",
    }
    for key in (
        "num_running_reqs",
        "num_decode_transfer_queue_reqs",
        "generation_tokens",
        "prompt_tokens",
        "num_transfer_failed_reqs",
    ):
        assert vllm[key] == sglang[key], key
    # vLLM folds the preallocation wait into "capacity": SGLang's two queues, summed.
    assert (
        vllm["num_queue_reqs"]
        == sglang["num_queue_reqs"] + sglang["num_decode_prealloc_queue_reqs"]
    )
    assert vllm["num_running_reqs"] == 2.0 and vllm["num_decode_transfer_queue_reqs"] == 1.0


def test_vllm_text_has_only_vllm_names_and_one_engine_label() -> None:
    text = vllm_metrics_text(busy_decode("vllm"))
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines and all(line.startswith("vllm:") for line in lines)
    assert all('engine="0"' in line for line in lines)
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_waiting_by_reason",
        "vllm:generation_tokens_total",
        "vllm:nixl_num_failed_transfers_total",
    ):
        assert any(line.startswith(name + "{") for line in lines), name


def test_a_prefills_expired_kv_reads_as_a_bootstrap_failure() -> None:
    eng = engine("prefill", "vllm")
    eng.counters.bootstrap_failed = 3
    values = parse_engine_metrics(vllm_metrics_text(eng))
    assert values["num_bootstrap_failed_reqs"] == 3.0
    assert values["num_transfer_failed_reqs"] == 0.0


def test_the_vocabulary_follows_the_text() -> None:
    assert vocabulary("vllm:num_requests_running 1\n") is VLLM
    assert vocabulary("# HELP x\nvllm:num_requests_running 1\n") is VLLM
    assert vocabulary("sglang:num_running_reqs 1\n") is SGLANG
    assert vocabulary("") is SGLANG
    # What vLLM lacks stays absent: the locators read absent as "not shown", never as 0 seen.
    values = parse_engine_metrics(vllm_metrics_text(busy_decode("vllm")))
    assert not set(VLLM_MISSING) & set(values)


def test_dp_ranks_and_label_sets_are_summed() -> None:
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} 2\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 3\n'
        'vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 4\n'
        'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 9\n'
    )
    values = parse_engine_metrics(text)
    assert values == {"num_running_reqs": 5.0, "num_aborted_requests": 4.0}


def test_vllm_routers_own_names_are_read_into_smgs_keys() -> None:
    """vllm-router 0.1.17's health gauge, per-worker error counters and PD-stage gauges
    (routers.md B5) fill the keys the locators read for smg; labels are the worker URLs the
    router was given."""
    from pytest_wedge.evidence.parse import parse_router_metrics

    text = (
        "\n".join(
            [
                'vllm_router_worker_health{worker="http://127.0.0.1:1"} 1',
                'vllm_router_worker_health{worker="http://127.0.0.1:2"} 0',
                'vllm_router_pd_prefill_errors_total{worker="http://127.0.0.1:1"} 3',
                'vllm_router_pd_decode_errors_total{worker="http://127.0.0.1:2"} 2',
                'vllm_router_pd_active_decode_requests{worker="http://127.0.0.1:2",rank="aggregate"} 1',
                'vllm_router_pd_pending_decode_requests{worker="http://127.0.0.1:2",rank="aggregate"} 2',
                'vllm_router_pd_prefill_occupancy{worker="http://127.0.0.1:1",rank="aggregate"} 2',
            ]
        )
        + "\n"
    )
    names = {"http://127.0.0.1:1": "prefill-0", "http://127.0.0.1:2": "decode-0"}
    seen = parse_router_metrics(text, names)
    assert seen["health"] == {"prefill-0": 1.0, "decode-0": 0.0}
    assert seen["cb_failed"] == {"prefill-0": 3.0, "decode-0": 2.0}
    # A request counts at its prefill until the prefill answers, and at its decode from the
    # moment the router picked it (pending: its prefill still runs), as smg counts them.
    assert seen["requests_active"] == {"prefill-0": 2.0, "decode-0": 3.0}
    assert seen["cb_state"] == {}  # no breaker
