"""Prometheus text under vLLM's metric names (``--protocol vllm``), from engine state at scrape.

Names and labels are vLLM v1's (``vllm/v1/metrics/loggers.py`` and the NIXL connector's
``KVConnectorPromMetrics``): ``model_name`` and one ``engine`` label. vllm-router counts the
distinct ``engine`` values of ``vllm:`` lines as data-parallel ranks and splits the worker
into ``URL@rank`` workers when it sees more than one, so there is exactly one, ``"0"``.

How the stub's states map onto them, as vLLM's scheduler counts its requests:

- ``num_requests_running``: the running batch (prefilling on a prefill);
- ``num_requests_waiting``: every request in the waiting queue, split by
  ``num_requests_waiting_by_reason``: ``capacity`` (no running slot or no KV memory yet:
  the stub's ``queued`` and ``prealloc``) and ``deferred`` (skipped by the scheduler: the
  stub's ``transfer``, vLLM's ``WAITING_FOR_REMOTE_KVS``, plus slots a failed transfer left
  behind, as in vLLM issue #35943);
- a prefill's KV held for a decode (the stub's ``inflight``) is in no queue, as in vLLM:
  it shows only in ``kv_cache_usage_perc`` and, when it expires, in
  ``nixl_num_kv_expired_reqs``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .engine_state import Engine
from .exposition import Exposition, header, sample_prefix

LABELS = ("model_name", "engine")
WAITING_BY_REASON = (
    "vllm:num_requests_waiting_by_reason",
    "Number of requests waiting, by reason.",
)
SUCCESS = ("vllm:request_success", "Count of successfully processed requests.")


def waiting(engine: Engine) -> tuple[float, float]:
    """The waiting queue by reason: (capacity, deferred)."""
    led, decode = engine.ledger, engine.config.role == "decode"
    capacity = led.count("queued") + (led.count("prealloc") if decode else 0)
    deferred = led.count("transfer") + engine.prealloc.orphaned if decode else 0
    return float(capacity), float(deferred)


def gauges(engine: Engine) -> dict[str, tuple[str, float]]:
    cfg, led = engine.config, engine.ledger
    decode = cfg.role == "decode"
    capacity, deferred = waiting(engine)
    running = led.count("running") if decode else led.count("prefilling")
    return {
        "num_requests_running": ("Number of requests in model execution batches.", running),
        "num_requests_waiting": (
            "Number of requests waiting to be processed.",
            capacity + deferred,
        ),
        "kv_cache_usage_perc": (
            "KV-cache usage. 1 means 100 percent usage.",
            min(1.0, engine.used_tokens() / cfg.max_total_tokens),
        ),
    }


def counters(engine: Engine) -> dict[str, tuple[str, float]]:
    c, decode = engine.counters, engine.config.role == "decode"
    return {
        "prompt_tokens": ("Number of prefill tokens processed.", c.prompt_tokens),
        "generation_tokens": ("Number of generation tokens processed.", engine.ledger.tokens_total),
        "num_preemptions": ("Cumulative number of preemption from the engine.", 0),
        "nixl_num_failed_transfers": (
            "Number of failed NIXL KV Cache transfers.",
            c.bootstrap_failed + c.transfer_failed if decode else 0,
        ),
        "nixl_num_kv_expired_reqs": (
            "Number of requests that had their KV expire.",
            0 if decode else c.bootstrap_failed,
        ),
    }


class VllmCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        engine = self.engine
        labels = [engine.config.model, "0"]
        for name, (doc, value) in gauges(engine).items():
            g = GaugeMetricFamily(f"vllm:{name}", doc, labels=LABELS)
            g.add_metric(labels, float(value))
            yield g
        why = GaugeMetricFamily(*WAITING_BY_REASON, labels=(*LABELS, "reason"))
        capacity, deferred = waiting(engine)
        why.add_metric([*labels, "capacity"], capacity)
        why.add_metric([*labels, "deferred"], deferred)
        yield why
        for name, (doc, value) in counters(engine).items():
            c = CounterMetricFamily(f"vllm:{name}", doc, labels=LABELS)
            c.add_metric(labels, float(value))
            yield c
        done = CounterMetricFamily(*SUCCESS, labels=(*LABELS, "finished_reason"))
        done.add_metric([*labels, "length"], float(engine.ledger.count("ok")))
        done.add_metric([*labels, "abort"], float(engine.counters.aborted))
        yield done


def make_registry(engine: Engine) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmCollector(engine))
    return registry


def exposition(engine: Engine) -> Exposition:
    """The served text: :class:`VllmCollector`'s, byte for byte, without building families."""
    labels = {"model_name": engine.config.model, "engine": "0"}
    lines = [
        header(f"vllm:{name}", doc, "gauge") + sample_prefix(f"vllm:{name}", labels)
        for name, (doc, _) in gauges(engine).items()
    ]
    why = WAITING_BY_REASON[0]
    lines += [
        header(*WAITING_BY_REASON, "gauge") + sample_prefix(why, {**labels, "reason": "capacity"}),
        sample_prefix(why, {**labels, "reason": "deferred"}),
    ]
    lines += [
        header(f"vllm:{name}", doc, "counter") + sample_prefix(f"vllm:{name}_total", labels)
        for name, (doc, _) in counters(engine).items()
    ]
    done = SUCCESS[0]
    lines += [
        header(*SUCCESS, "counter")
        + sample_prefix(f"{done}_total", {**labels, "finished_reason": "length"}),
        sample_prefix(f"{done}_total", {**labels, "finished_reason": "abort"}),
    ]

    def values() -> list[float]:
        return [
            *(value for _, value in gauges(engine).values()),
            *waiting(engine),
            *(value for _, value in counters(engine).values()),
            engine.ledger.count("ok"),
            engine.counters.aborted,
        ]

    return Exposition(lines, values)
