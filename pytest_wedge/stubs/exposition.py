"""``/metrics``: Prometheus text under SGLang's names (or vLLM's), from engine state at scrape.
Byte for byte ``generate_latest``'s, with all but the values prepared once per engine: building
families at each of the probe's scrapes cost most of its CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import escape_label_name, escape_metric_name
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from .engine_state import Engine

LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank")

GAUGES: dict[str, str] = {
    "num_running_reqs": "The number of running requests.",
    "num_queue_reqs": "The number of requests in the waiting queue.",
    "num_used_tokens": "The number of used tokens.",
    "token_usage": "The token usage.",
    "gen_throughput": "The generation throughput (token/s).",
    "cache_hit_rate": "The prefix cache hit rate.",
    "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
    "utilization": "The utilization.",
    "num_prefill_prealloc_queue_reqs": "Requests in the prefill bootstrap queue.",
    "num_prefill_inflight_queue_reqs": "Requests prefilled, KV transfer not yet done.",
    "num_decode_prealloc_queue_reqs": "Requests handshaking with the prefill.",
    "num_decode_transfer_queue_reqs": "Requests waiting for KV to arrive.",
}
COUNTERS: dict[str, str] = {
    "num_requests": "Number of requests processed.",
    "generation_tokens": "Number of generation tokens processed.",
    "prompt_tokens": "Number of prefill tokens processed.",
    "num_aborted_requests": "Number of requests aborted.",
    "num_bootstrap_failed_reqs": "Number of bootstrap failed requests.",
    "num_transfer_failed_reqs": "Number of transfer failed requests.",
}

Samples = Sequence[tuple[Mapping[str, str], float]]
# name, help, "gauge" or "counter", and the samples: extra labels and value.
Family = tuple[str, str, str, Samples]


def gauge_values(engine: Engine) -> dict[str, float]:
    cfg, led = engine.config, engine.ledger
    used = engine.used_tokens()
    decode = cfg.role == "decode"
    running = led.count("running") if decode else led.count("prefilling")
    return {
        "num_running_reqs": running,
        "num_queue_reqs": led.count("queued"),
        "num_used_tokens": used,
        "token_usage": engine.kv_usage(),
        "gen_throughput": engine.throughput.rate() if decode else 0.0,
        "cache_hit_rate": 0.0,
        "max_total_num_tokens": cfg.max_total_tokens,
        # SGLang reports -1 on prefill workers.
        "utilization": running / cfg.max_running if decode else -1.0,
        "num_prefill_prealloc_queue_reqs": 0 if decode else engine.prefill_prealloc(),
        "num_prefill_inflight_queue_reqs": 0 if decode else led.count("inflight"),
        "num_decode_prealloc_queue_reqs": led.count("prealloc") if decode else 0,
        # A slot whose transfer failed counts until its policy gives it back (admission.py).
        "num_decode_transfer_queue_reqs": (
            led.count("transfer") + engine.prealloc.orphaned if decode else 0
        ),
    }


def sglang_families(engine: Engine) -> tuple[dict[str, str], list[Family]]:
    cfg, c = engine.config, engine.counters
    labels = dict(zip(LABELS, (cfg.model, cfg.role, "0", "0"), strict=True))
    counters = {
        "num_requests": c.requests,
        "generation_tokens": engine.ledger.tokens_total,
        "prompt_tokens": c.prompt_tokens,
        "num_aborted_requests": c.aborted,
        "num_bootstrap_failed_reqs": c.bootstrap_failed,
        "num_transfer_failed_reqs": c.transfer_failed,
    }
    fams: list[Family] = [
        (f"sglang:{name}", GAUGES[name], "gauge", [({}, value)])
        for name, value in gauge_values(engine).items()
    ]
    fams += [
        (f"sglang:{name}", COUNTERS[name], "counter", [({}, value)])
        for name, value in counters.items()
    ]
    return labels, fams


# vLLM v1's names (``vllm/v1/metrics/loggers.py``, NIXL's ``KVConnectorPromMetrics``). One
# ``engine`` label, "0": vllm-router splits a worker into ranks by its distinct values. Waiting
# requests split by reason: ``capacity`` (queued, prealloc) and ``deferred`` (transfer, i.e.
# ``WAITING_FOR_REMOTE_KVS``, plus slots a failed transfer left, vLLM issue #35943).
def vllm_families(engine: Engine) -> tuple[dict[str, str], list[Family]]:
    cfg, led, c = engine.config, engine.ledger, engine.counters
    decode = cfg.role == "decode"
    capacity = float(led.count("queued") + (led.count("prealloc") if decode else 0))
    deferred = float(led.count("transfer") + engine.prealloc.orphaned if decode else 0)
    running = led.count("running") if decode else led.count("prefilling")
    usage = engine.kv_usage()
    gauges = {
        "num_requests_running": ("Number of requests in model execution batches.", running),
        "num_requests_waiting": (
            "Number of requests waiting to be processed.",
            capacity + deferred,
        ),
        "kv_cache_usage_perc": ("KV-cache usage. 1 means 100 percent usage.", usage),
    }
    counters = {
        "prompt_tokens": ("Number of prefill tokens processed.", c.prompt_tokens),
        "generation_tokens": ("Number of generation tokens processed.", led.tokens_total),
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
    families: list[Family] = [
        (f"vllm:{name}", doc, "gauge", [({}, value)]) for name, (doc, value) in gauges.items()
    ]
    families.append(
        (
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting, by reason.",
            "gauge",
            [({"reason": "capacity"}, capacity), ({"reason": "deferred"}, deferred)],
        )
    )
    families += [
        (f"vllm:{name}", doc, "counter", [({}, value)]) for name, (doc, value) in counters.items()
    ]
    finished = [
        ({"finished_reason": "length"}, led.count("ok")),
        ({"finished_reason": "abort"}, c.aborted),
    ]
    families.append(
        ("vllm:request_success", "Count of successfully processed requests.", "counter", finished)
    )
    return {"model_name": cfg.model, "engine": "0"}, families


def families(engine: Engine) -> tuple[dict[str, str], list[Family]]:
    """The engine's base labels and metric families, in its protocol's names."""
    if engine.config.protocol == "vllm":
        return vllm_families(engine)
    return sglang_families(engine)


# prometheus-client's own float formatting (Go's), so the text cannot drift from its; untyped there.
_float_text: Callable[[float], str] = floatToGoString


def header(name: str, doc: str, kind: str) -> str:
    """A family's HELP and TYPE lines, as ``generate_latest`` writes them (a counter's family
    is exposed under ``_total``)."""
    exposed = escape_metric_name(f"{name}_total" if kind == "counter" else name)
    doc = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {exposed} {doc}\n# TYPE {exposed} {kind}\n"


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def sample_prefix(name: str, labels: Mapping[str, str]) -> str:
    """A sample's line up to its value: labels sorted and escaped as ``generate_latest`` does."""
    pairs = ",".join(
        f'{escape_label_name(k)}="{_label_value(v)}"' for k, v in sorted(labels.items())
    )
    return f"{escape_metric_name(name)}{{{pairs}}} " if pairs else f"{escape_metric_name(name)} "


class Exposition:
    """One engine's ``/metrics`` text: each sample's text before its value, prepared once,
    and the values read at each scrape in the same order."""

    __slots__ = ("_engine", "_lines")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        labels, fams = families(engine)
        self._lines = tuple(
            (header(name, doc, kind) if i == 0 else "")
            + sample_prefix(f"{name}_total" if kind == "counter" else name, {**labels, **extra})
            for name, doc, kind, samples in fams
            for i, (extra, _) in enumerate(samples)
        )

    def render(self) -> bytes:
        values = [v for *_, samples in families(self._engine)[1] for _, v in samples]
        pairs = zip(self._lines, values, strict=True)
        return "".join([f"{line}{_float_text(value)}\n" for line, value in pairs]).encode()


class FamiliesCollector(Collector):
    """The same families through prometheus-client: the reference the served text is checked
    against."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        labels, fams = families(self.engine)
        for name, doc, kind, samples in fams:
            family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            names = [*labels, *samples[0][0]]
            family = family_type(name, doc, labels=names)
            for extra, value in samples:
                family.add_metric([*labels.values(), *extra.values()], float(value))
            yield family


def make_registry(engine: Engine) -> CollectorRegistry:
    # Per engine, never the global default registry.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(engine))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
