"""Prometheus text under SGLang's metric names, computed from engine state at scrape time.

``/metrics`` is served by :class:`Exposition`: the text ``generate_latest`` makes of the
collectors, byte for byte (tests/unit/test_stub_exposition.py), with everything but the values
prepared once per engine. The probe scrapes every stub once a second, and building the metric
families and walking them generically cost most of a scrape's CPU. The collectors stay as the
reference the fast text is checked against.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

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


def gauge_values(engine: Engine) -> dict[str, float]:
    cfg, led = engine.config, engine.ledger
    used = engine.used_tokens()
    decode = cfg.role == "decode"
    running = led.count("running") if decode else led.count("prefilling")
    return {
        "num_running_reqs": running,
        "num_queue_reqs": led.count("queued"),
        "num_used_tokens": used,
        "token_usage": min(1.0, used / cfg.max_total_tokens),
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


def counter_values(engine: Engine) -> dict[str, float]:
    c = engine.counters
    return {
        "num_requests": c.requests,
        "generation_tokens": engine.ledger.tokens_total,
        "prompt_tokens": c.prompt_tokens,
        "num_aborted_requests": c.aborted,
        "num_bootstrap_failed_reqs": c.bootstrap_failed,
        "num_transfer_failed_reqs": c.transfer_failed,
    }


class EngineCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        cfg = self.engine.config
        labels = [cfg.model, cfg.role, "0", "0"]
        for name, value in gauge_values(self.engine).items():
            g = GaugeMetricFamily(f"sglang:{name}", GAUGES[name], labels=LABELS)
            g.add_metric(labels, float(value))
            yield g
        for name, value in counter_values(self.engine).items():
            c = CounterMetricFamily(f"sglang:{name}", COUNTERS[name], labels=LABELS)
            c.add_metric(labels, float(value))
            yield c


def make_registry(engine: Engine) -> CollectorRegistry:
    # Per process (and per engine in tests), never the global default registry.
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


# -- the served text -------------------------------------------------------------------------

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
    """A sample's line up to its value: labels sorted by name and escaped as
    ``generate_latest`` does (backslash, newline, double quote)."""
    pairs = ",".join(
        f'{escape_label_name(k)}="{_label_value(v)}"' for k, v in sorted(labels.items())
    )
    return f"{escape_metric_name(name)}{{{pairs}}} " if pairs else f"{escape_metric_name(name)} "


class Exposition:
    """One engine's ``/metrics`` text: ``lines`` are each sample's text before its value (with
    its family's header before a family's first sample), ``values`` gives the values in the
    same order at each scrape."""

    __slots__ = ("_lines", "_values")

    def __init__(self, lines: Sequence[str], values: Callable[[], Iterable[float]]) -> None:
        self._lines = tuple(lines)
        self._values = values

    def render(self) -> bytes:
        pairs = zip(self._lines, self._values(), strict=True)
        return "".join([f"{line}{_float_text(value)}\n" for line, value in pairs]).encode()


def exposition(engine: Engine) -> Exposition:
    cfg = engine.config
    labels = dict(zip(LABELS, (cfg.model, cfg.role, "0", "0"), strict=True))
    # In the collector's order: the value functions' keys.
    lines = [
        header(f"sglang:{name}", GAUGES[name], "gauge") + sample_prefix(f"sglang:{name}", labels)
        for name in gauge_values(engine)
    ]
    lines += [
        header(f"sglang:{name}", COUNTERS[name], "counter")
        + sample_prefix(f"sglang:{name}_total", labels)
        for name in counter_values(engine)
    ]

    def values() -> list[float]:
        return [*gauge_values(engine).values(), *counter_values(engine).values()]

    return Exposition(lines, values)
