"""One vocabulary for engine metrics (pure): each engine's exported names mapped onto the
canonical names the locators read, SGLang's without ``sglang:`` and ``_total``. A worker whose
``/metrics`` has ``vllm:`` lines is read as vLLM, any other as SGLang. A row is ``(exported
name, required labels, canonical name)``; samples mapping onto one name are summed. Canonical
names vLLM lacks (``VLLM_MISSING``) are absent for it, which the locators read as "not shown"."""

from __future__ import annotations

Row = tuple[str, tuple[tuple[str, str], ...], str]

GAUGES = (
    "gen_throughput",
    "num_running_reqs",
    "num_queue_reqs",
    "num_prefill_prealloc_queue_reqs",
    "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs",
)
COUNTERS = (
    "num_requests",
    "generation_tokens",
    "prompt_tokens",
    "num_aborted_requests",
    "num_bootstrap_failed_reqs",
    "num_transfer_failed_reqs",
)

SGLANG: tuple[Row, ...] = (
    *((f"sglang:{g}", (), g) for g in GAUGES),
    *((f"sglang:{c}_total", (), c) for c in COUNTERS),
)

_ABORT = (("finished_reason", "abort"),)
_DEFERRED = (("reason", "deferred"),)
VLLM: tuple[Row, ...] = (
    ("vllm:num_requests_running", (), "num_running_reqs"),
    # Waiting for a running slot or KV memory: SGLang's waiting queue.
    ("vllm:num_requests_waiting_by_reason", (("reason", "capacity"),), "num_queue_reqs"),
    # Skipped by the scheduler: on a PD decode, WAITING_FOR_REMOTE_KVS (the transfer queue).
    ("vllm:num_requests_waiting_by_reason", _DEFERRED, "num_decode_transfer_queue_reqs"),
    ("vllm:generation_tokens_total", (), "generation_tokens"),
    ("vllm:prompt_tokens_total", (), "prompt_tokens"),
    ("vllm:request_success_total", _ABORT, "num_aborted_requests"),
    ("vllm:nixl_num_failed_transfers_total", (), "num_transfer_failed_reqs"),
    # A prefill's KV that no decode came for before the deadline: SGLang's bootstrap failure.
    ("vllm:nixl_num_kv_expired_reqs_total", (), "num_bootstrap_failed_reqs"),
)
# vLLM counts requests when they finish (request_success), SGLang when they arrive.
VLLM_MISSING = (
    "gen_throughput",
    "num_prefill_prealloc_queue_reqs",
    "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs",
    "num_requests",
)


def vocabulary(text: str) -> tuple[Row, ...]:
    """The rows to read ``text`` with: vLLM's when it has ``vllm:`` samples, else SGLang's."""
    return VLLM if "\nvllm:" in text or text.startswith("vllm:") else SGLANG


def exported_names(rows: tuple[Row, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for name, _, _ in rows))


def canonical(
    rows: tuple[Row, ...], samples: list[tuple[str, dict[str, str], float]]
) -> dict[str, float]:
    """Sum ``samples`` (name, labels, value) into canonical names by ``rows``."""
    out: dict[str, float] = {}
    for name, labels, value in samples:
        for exported, required, key in rows:
            if name == exported and all(labels.get(k) == v for k, v in required):
                out[key] = out.get(key, 0.0) + value
    return out


# The router's per-worker series, by its dialect, onto the keys ``parse_router_metrics`` fills
# for smg. vllm-router 0.1.17 (routers.md B5) has a health gauge and per-worker error counters
# (status errors, refusals and timeouts), no breaker and no retries. Its in-flight gauges count
# a request per PD stage: at its prefill while the prefill answers (as smg's count of a
# prefill), and at its decode from the moment the router picked it, waiting for the prefill
# (pending) or streaming (active), as smg counts a decode from dispatch. Summed, they are
# smg's per-worker in-flight gauge.
VLLM_ROUTER_PER_WORKER = {
    "vllm_router_worker_health": "health",
    "vllm_router_pd_prefill_errors_total": "cb_failed",
    "vllm_router_pd_decode_errors_total": "cb_failed",
    "vllm_router_pd_prefill_occupancy": "requests_active",
    "vllm_router_pd_pending_decode_requests": "requests_active",
    "vllm_router_pd_active_decode_requests": "requests_active",
}
