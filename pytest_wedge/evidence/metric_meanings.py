"""What each metric the evidence reads means: the one table behind docs/reference/metrics.md.
``tests/unit/test_reference_docs.py`` fails when a metric read has no row, or a row is unread."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Source = Literal["router", "engine", "toxiproxy"]
Kind = Literal["gauge", "counter"]
Codes = tuple[tuple[float, str], ...]  # a code gauge's (value, what it says)
Where = tuple[Source, Kind]


@dataclass(frozen=True)
class MetricMeaning:
    name: str  # exported, with a counter's ``_total``
    source: Source
    kind: Kind
    labels: tuple[str, ...]  # the labels the evidence reads (a metric may carry more)
    meaning: str  # what the number says
    use: str  # what the diagnosis or a watchdog makes of it
    codes: Codes = ()

    def codes_text(self) -> str:
        """``1 = healthy, 0 = not healthy``."""
        return ", ".join(f"{value:g} = {said}" for value, said in self.codes)


ROUTER_GAUGE: Where = ("router", "gauge")
ROUTER_COUNTER: Where = ("router", "counter")
ENGINE_GAUGE: Where = ("engine", "gauge")
ENGINE_COUNTER: Where = ("engine", "counter")
TOXIPROXY_COUNTER: Where = ("toxiproxy", "counter")


def _row(head: str, where: Where, meaning: str, use: str, codes: Codes = ()) -> MetricMeaning:
    """``head``: the exported name with the labels read in braces, ``smg_worker_health{worker}``."""
    name, _, labels = head.rstrip("}").partition("{")
    return MetricMeaning(name, *where, tuple(filter(None, labels.split(","))), meaning, use, codes)


# Values of the code gauges, for code that tests them (``health == WORKER_HEALTHY``).
WORKER_HEALTHY, WORKER_UNHEALTHY = 1.0, 0.0
BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN = 0.0, 1.0, 2.0


_ROWS = (
    # -- router (smg) ---------------------------------------------------------------------------
    _row(
        "smg_worker_health{worker}",
        ROUTER_GAUGE,
        "Whether the router's own health checks pass for the worker.",
        "A worker at 0 is named in the evidence (the router marks it unhealthy). The checks "
        "run every 60 s by default and fail a worker after 3 misses, so a worker wedged a "
        "moment ago still shows 1: 1 proves nothing about a fresh wedge.",
        ((WORKER_HEALTHY, "healthy"), (WORKER_UNHEALTHY, "not healthy")),
    ),
    _row(
        "smg_worker_requests_active{worker}",
        ROUTER_GAUGE,
        "Requests the router has in flight to that worker. A prefill's count drops to 0 once "
        "its response is done, while the decode may still stream.",
        "The router's in-flight count per worker, quoted beside the worker ledgers; a "
        "scenario waits on it to see the wedge show.",
    ),
    _row(
        "smg_worker_cb_state{worker}",
        ROUTER_GAUGE,
        "The worker's circuit breaker.",
        "An open breaker explains refusals; a topology reset waits until every breaker is 0.",
        (
            (BREAKER_CLOSED, "closed (traffic flows)"),
            (BREAKER_OPEN, "open (the worker gets no traffic)"),
            (BREAKER_HALF_OPEN, "half-open (trial requests only)"),
        ),
    ),
    _row(
        "smg_worker_cb_consecutive_failures{worker}",
        ROUTER_GAUGE,
        "Failures in a row the breaker has counted for the worker (0 after a success).",
        "Quoted per worker as the breaker's view of a failing worker.",
    ),
    _row(
        "smg_worker_cb_outcomes_total{worker,outcome}",
        ROUTER_COUNTER,
        "Outcomes the breaker recorded per worker; `outcome` is `success` or a failure kind.",
        "The non-success outcomes are summed per worker: which worker the router saw failing.",
    ),
    _row(
        "smg_worker_errors_total{worker_type,error_type}",
        ROUTER_COUNTER,
        "Failed upstream calls by worker type (`prefill`, `decode`): `error_type` is "
        "`backend_error` (transport error, refused or cut connection) or `timeout` (cut by "
        "`--request-timeout-secs`, also mid-stream).",
        "Router-side errors per worker type; `timeout` ones are the firings of the "
        "`RequestTimeout` watchdog.",
    ),
    _row(
        "smg_worker_retries_total",
        ROUTER_COUNTER,
        "Attempts the router retried (each retry sends both legs again with a new room).",
        "Retries in the evidence; the quiet check fails on any during a healthy run.",
    ),
    _row(
        "smg_worker_retries_exhausted_total",
        ROUTER_COUNTER,
        "Requests that failed after the router's last retry (the client got an error).",
        "A firing of the `RequestTimeout` watchdog.",
    ),
    _row(
        "smg_http_responses_total{path,status_code,error_code}",
        ROUTER_COUNTER,
        "Responses the router sent to its clients. Probe paths (`/health`, `/metrics`, ...) "
        "are left out by the evidence. A 4xx/5xx with an `error_code` is a refusal, for "
        "example `503 no_available_workers` or `499 client_closed_request`.",
        "Responses by status and refusals by code; `error_code=request_body_stalled` is a "
        "firing of the `StreamBodyStallTimeout` watchdog.",
    ),
    _row(
        "smg_http_connections_active",
        ROUTER_GAUGE,
        "Client HTTP connections the router holds open.",
        "sglang-router 0.3.2's only in-flight signal (its per-worker in-flight gauge stays 0): "
        "its adapter names it as the router's in-flight metric.",
    ),
    _row(
        "smg_admission_inflight",
        ROUTER_GAUGE,
        "Requests admitted by the router's HTTP admission and not finished; the router's only "
        "queue-depth gauge.",
        "The router's in-flight total: admitted requests with none in flight to any worker "
        "are held by the router itself.",
    ),
    # -- engines (SGLang names; the stub workers export the same) ----------------------------------
    _row(
        "sglang:num_running_reqs",
        ENGINE_GAUGE,
        "Requests holding a running slot: prefilling on a prefill, decoding on a decode.",
        "Where requests are held, beside the worker ledger; counts every origin.",
    ),
    _row(
        "sglang:num_queue_reqs",
        ENGINE_GAUGE,
        "Requests waiting for a running slot.",
        "Where requests are held.",
    ),
    _row(
        "sglang:gen_throughput",
        ENGINE_GAUGE,
        "Generated tokens per second, recent (0 on a prefill). Counts every origin.",
        "A fallback for the blind tokens/s, and the misleading `AggregateThroughputWatchdog`: "
        "it counts every origin, so another origin's traffic hides a wedge.",
    ),
    _row(
        "sglang:num_prefill_prealloc_queue_reqs",
        ENGINE_GAUGE,
        "On a prefill: requests in the bootstrap queue, waiting for a decode to connect.",
        "Read into the snapshot and the blind observation; no rule uses it yet.",
    ),
    _row(
        "sglang:num_prefill_inflight_queue_reqs",
        ENGINE_GAUGE,
        "On a prefill: requests prefilled whose KV transfer is not done yet.",
        "A transfer wedge shows here (KV ready, nobody took it).",
    ),
    _row(
        "sglang:num_decode_prealloc_queue_reqs",
        ENGINE_GAUGE,
        "On a decode: requests reserving KV and handshaking with the prefill.",
        "A bootstrap wedge shows here.",
    ),
    _row(
        "sglang:num_decode_transfer_queue_reqs",
        ENGINE_GAUGE,
        "On a decode: requests waiting for their KV to arrive.",
        "A transfer wedge shows here (waiting for KV).",
    ),
    _row(
        "sglang:num_requests_total",
        ENGINE_COUNTER,
        "Requests the engine finished processing.",
        "Read into the blind observation; no rule uses it yet.",
    ),
    _row(
        "sglang:generation_tokens_total",
        ENGINE_COUNTER,
        "Tokens generated, all origins.",
        "Tokens/s between two reads (blind diagnosis), named as other origins' activity, not "
        "progress of the one under test.",
    ),
    _row(
        "sglang:prompt_tokens_total",
        ENGINE_COUNTER,
        "Prompt tokens prefilled.",
        "Read into the blind observation; no rule uses it yet.",
    ),
    _row(
        "sglang:num_aborted_requests_total",
        ENGINE_COUNTER,
        "Requests aborted (the client went away or the router cut them).",
        "Read into the blind observation; no rule uses it yet.",
    ),
    _row(
        "sglang:num_bootstrap_failed_reqs_total",
        ENGINE_COUNTER,
        "Requests whose bootstrap handshake between decode and prefill failed.",
        "Growth since the onset counts as transfer failures (blind diagnosis).",
    ),
    _row(
        "sglang:num_transfer_failed_reqs_total",
        ENGINE_COUNTER,
        "Requests whose KV transfer failed.",
        "Growth since the onset marks a broken transfer channel (blind diagnosis).",
    ),
    # -- router (vllm-router 0.1.17), read into smg's keys (evidence/metric_names.py) ----------
    _row(
        "vllm_router_worker_health{worker}",
        ROUTER_GAUGE,
        "Whether vllm-router's own health checks pass for the worker (`worker` is its URL).",
        "Read as `smg_worker_health`: a worker at 0 is named in the evidence.",
        ((WORKER_HEALTHY, "healthy"), (WORKER_UNHEALTHY, "not healthy")),
    ),
    _row(
        "vllm_router_pd_prefill_occupancy{worker,rank}",
        ROUTER_GAUGE,
        "Requests at the prefill stage per prefill worker: sent to it, its answer not back.",
        "Read as `smg_worker_requests_active` of that prefill (smg too counts a prefill "
        "until its answer is back).",
    ),
    _row(
        "vllm_router_pd_pending_decode_requests{worker,rank}",
        ROUTER_GAUGE,
        "Requests whose decode is picked while their prefill still runs, per decode worker.",
        "Added to that decode's `vllm_router_pd_active_decode_requests`: smg counts a decode "
        "from dispatch.",
    ),
    _row(
        "vllm_router_pd_active_decode_requests{worker,rank}",
        ROUTER_GAUGE,
        'Requests at the decode stage per decode worker (`rank="aggregate"`): sent to it, '
        "its answer not over.",
        "With the pending ones, read as `smg_worker_requests_active` of that decode: the "
        "router's requests in flight to it.",
    ),
    _row(
        "vllm_router_pd_prefill_errors_total{worker}",
        ROUTER_COUNTER,
        "Prefill calls that failed: an error status or a timeout (no retries follow).",
        "Summed per worker as the failures the router counted against it (as smg's breaker "
        "outcomes): which prefill the router saw failing.",
    ),
    _row(
        "vllm_router_pd_decode_errors_total{worker}",
        ROUTER_COUNTER,
        "Decode calls that failed: an error status, a refused connection or a timeout.",
        "Summed per worker as the failures the router counted against it: which decode.",
    ),
    # -- toxiproxy ------------------------------------------------------------------------------
    _row(
        "toxiproxy_proxy_received_bytes_total{proxy,direction}",
        TOXIPROXY_COUNTER,
        "Bytes read into a link, per direction (`upstream` = towards the server). Added when "
        "a connection ends, so it moves as connections close.",
        "Bytes in per link: in > out on a faulty link means bytes that entered and were "
        "never delivered (a black hole).",
    ),
    _row(
        "toxiproxy_proxy_sent_bytes_total{proxy,direction}",
        TOXIPROXY_COUNTER,
        "Bytes written out of a link, per direction; only writes that did not fail count.",
        "Bytes out per link, against the bytes in.",
    ),
)

METRIC_MEANINGS: Mapping[str, MetricMeaning] = MappingProxyType({m.name: m for m in _ROWS})
"""Exported metric name -> its meaning, in the order of the reference page."""


def describe_value(name: str, value: float) -> str:
    """``value`` of ``name`` for a report line: ``1 (healthy)`` for a code, else ``1``."""
    found = METRIC_MEANINGS.get(name)
    said = dict(found.codes).get(value) if found is not None else None
    return f"{value:g} ({said})" if said else f"{value:g}"
