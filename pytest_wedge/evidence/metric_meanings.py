"""What each metric the evidence reads means: the one table behind docs/reference/metrics.md.

The names are the ones real deployments export (router-protocol.md §5 and §6).
``tests/unit/test_reference_docs.py`` fails when a metric the package reads has no row here, or
a row names a metric nothing reads any more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Source = Literal["router", "engine", "toxiproxy"]
Kind = Literal["gauge", "counter"]


@dataclass(frozen=True)
class MetricMeaning:
    name: str  # exported, with a counter's ``_total``
    source: Source
    kind: Kind
    labels: tuple[str, ...]  # the labels the evidence reads (a metric may carry more)
    meaning: str  # what the number says
    use: str  # what the diagnosis or a watchdog makes of it
    codes: tuple[tuple[float, str], ...] = ()  # a code gauge's (value, what it says)

    def codes_text(self) -> str:
        """``1 = healthy, 0 = not healthy``."""
        return ", ".join(f"{value:g} = {said}" for value, said in self.codes)


# Values of the code gauges, for code that tests them (``health == WORKER_HEALTHY``).
WORKER_HEALTHY, WORKER_UNHEALTHY = 1.0, 0.0
BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN = 0.0, 1.0, 2.0


_ROWS = (
    # -- router (smg) ---------------------------------------------------------------------------
    MetricMeaning(
        "smg_worker_health",
        "router",
        "gauge",
        ("worker",),
        "Whether the router's own health checks pass for the worker.",
        "A worker at 0 is named in the evidence (the router marks it unhealthy). The checks "
        "run every 60 s by default and fail a worker after 3 misses, so a worker wedged a "
        "moment ago still shows 1: 1 proves nothing about a fresh wedge.",
        ((WORKER_HEALTHY, "healthy"), (WORKER_UNHEALTHY, "not healthy")),
    ),
    MetricMeaning(
        "smg_worker_requests_active",
        "router",
        "gauge",
        ("worker",),
        "Requests the router has in flight to that worker. A prefill's count drops to 0 once "
        "its response is done, while the decode may still stream.",
        "The router's in-flight count per worker, quoted beside the worker ledgers; a "
        "scenario waits on it to see the wedge show.",
    ),
    MetricMeaning(
        "smg_worker_cb_state",
        "router",
        "gauge",
        ("worker",),
        "The worker's circuit breaker.",
        "An open breaker explains refusals; a topology reset waits until every breaker is 0.",
        (
            (BREAKER_CLOSED, "closed (traffic flows)"),
            (BREAKER_OPEN, "open (the worker gets no traffic)"),
            (BREAKER_HALF_OPEN, "half-open (trial requests only)"),
        ),
    ),
    MetricMeaning(
        "smg_worker_cb_consecutive_failures",
        "router",
        "gauge",
        ("worker",),
        "Failures in a row the breaker has counted for the worker (0 after a success).",
        "Quoted per worker as the breaker's view of a failing worker.",
    ),
    MetricMeaning(
        "smg_worker_cb_outcomes_total",
        "router",
        "counter",
        ("worker", "outcome"),
        "Outcomes the breaker recorded per worker; `outcome` is `success` or a failure kind.",
        "The non-success outcomes are summed per worker: which worker the router saw failing.",
    ),
    MetricMeaning(
        "smg_worker_errors_total",
        "router",
        "counter",
        ("worker_type", "error_type"),
        "Failed upstream calls by worker type (`prefill`, `decode`): `error_type` is "
        "`backend_error` (transport error, refused or cut connection) or `timeout` (cut by "
        "`--request-timeout-secs`, also mid-stream).",
        "Router-side errors per worker type; `timeout` ones are the firings of the "
        "`RequestTimeout` watchdog.",
    ),
    MetricMeaning(
        "smg_worker_retries_total",
        "router",
        "counter",
        (),
        "Attempts the router retried (each retry sends both legs again with a new room).",
        "Retries in the evidence; the quiet check fails on any during a healthy run.",
    ),
    MetricMeaning(
        "smg_worker_retries_exhausted_total",
        "router",
        "counter",
        (),
        "Requests that failed after the router's last retry (the client got an error).",
        "A firing of the `RequestTimeout` watchdog.",
    ),
    MetricMeaning(
        "smg_http_responses_total",
        "router",
        "counter",
        ("path", "status_code", "error_code"),
        "Responses the router sent to its clients. Probe paths (`/health`, `/metrics`, ...) "
        "are left out by the evidence. A 4xx/5xx with an `error_code` is a refusal, for "
        "example `503 no_available_workers` or `499 client_closed_request`.",
        "Responses by status and refusals by code; `error_code=request_body_stalled` is a "
        "firing of the `StreamBodyStallTimeout` watchdog.",
    ),
    MetricMeaning(
        "smg_http_connections_active",
        "router",
        "gauge",
        (),
        "Client HTTP connections the router holds open.",
        "sglang-router 0.3.2's only in-flight signal (its per-worker in-flight gauge stays 0): "
        "its adapter names it as the router's in-flight metric.",
    ),
    MetricMeaning(
        "smg_admission_inflight",
        "router",
        "gauge",
        (),
        "Requests admitted by the router's HTTP admission and not finished; the router's only "
        "queue-depth gauge.",
        "The router's in-flight total: admitted requests with none in flight to any worker "
        "are held by the router itself.",
    ),
    # -- engines (SGLang names; the stub workers export the same) ----------------------------------
    MetricMeaning(
        "sglang:num_running_reqs",
        "engine",
        "gauge",
        (),
        "Requests holding a running slot: prefilling on a prefill, decoding on a decode.",
        "Where requests are held, beside the worker ledger; counts every origin.",
    ),
    MetricMeaning(
        "sglang:num_queue_reqs",
        "engine",
        "gauge",
        (),
        "Requests waiting for a running slot.",
        "Where requests are held.",
    ),
    MetricMeaning(
        "sglang:gen_throughput",
        "engine",
        "gauge",
        (),
        "Generated tokens per second, recent (0 on a prefill). Counts every origin.",
        "A fallback for the blind tokens/s, and the misleading `AggregateThroughputWatchdog`: "
        "it counts every origin, so another origin's traffic hides a wedge.",
    ),
    MetricMeaning(
        "sglang:num_prefill_prealloc_queue_reqs",
        "engine",
        "gauge",
        (),
        "On a prefill: requests in the bootstrap queue, waiting for a decode to connect.",
        "Read into the snapshot and the blind observation; no rule uses it yet.",
    ),
    MetricMeaning(
        "sglang:num_prefill_inflight_queue_reqs",
        "engine",
        "gauge",
        (),
        "On a prefill: requests prefilled whose KV transfer is not done yet.",
        "A transfer wedge shows here (KV ready, nobody took it).",
    ),
    MetricMeaning(
        "sglang:num_decode_prealloc_queue_reqs",
        "engine",
        "gauge",
        (),
        "On a decode: requests reserving KV and handshaking with the prefill.",
        "A bootstrap wedge shows here.",
    ),
    MetricMeaning(
        "sglang:num_decode_transfer_queue_reqs",
        "engine",
        "gauge",
        (),
        "On a decode: requests waiting for their KV to arrive.",
        "A transfer wedge shows here (waiting for KV).",
    ),
    MetricMeaning(
        "sglang:num_requests_total",
        "engine",
        "counter",
        (),
        "Requests the engine finished processing.",
        "Read into the blind observation; no rule uses it yet.",
    ),
    MetricMeaning(
        "sglang:generation_tokens_total",
        "engine",
        "counter",
        (),
        "Tokens generated, all origins.",
        "Tokens/s between two reads (blind diagnosis), named as other origins' activity, not "
        "progress of the one under test.",
    ),
    MetricMeaning(
        "sglang:prompt_tokens_total",
        "engine",
        "counter",
        (),
        "Prompt tokens prefilled.",
        "Read into the blind observation; no rule uses it yet.",
    ),
    MetricMeaning(
        "sglang:num_aborted_requests_total",
        "engine",
        "counter",
        (),
        "Requests aborted (the client went away or the router cut them).",
        "Read into the blind observation; no rule uses it yet.",
    ),
    MetricMeaning(
        "sglang:num_bootstrap_failed_reqs_total",
        "engine",
        "counter",
        (),
        "Requests whose bootstrap handshake between decode and prefill failed.",
        "Growth since the onset counts as transfer failures (blind diagnosis).",
    ),
    MetricMeaning(
        "sglang:num_transfer_failed_reqs_total",
        "engine",
        "counter",
        (),
        "Requests whose KV transfer failed.",
        "Growth since the onset marks a broken transfer channel (blind diagnosis).",
    ),
    # -- router (vllm-router 0.1.17), read into smg's keys (evidence/metric_names.py) ----------
    MetricMeaning(
        "vllm_router_worker_health",
        "router",
        "gauge",
        ("worker",),
        "Whether vllm-router's own health checks pass for the worker (`worker` is its URL).",
        "Read as `smg_worker_health`: a worker at 0 is named in the evidence.",
        ((WORKER_HEALTHY, "healthy"), (WORKER_UNHEALTHY, "not healthy")),
    ),
    MetricMeaning(
        "vllm_router_pd_active_decode_requests",
        "router",
        "gauge",
        ("worker", "rank"),
        'Requests at the decode stage per decode worker (`rank="aggregate"`); a request '
        "still at its prefill is counted in other `vllm_router_pd_*` gauges instead.",
        "Named by the vllm-router adapter as its in-flight series. Not read as smg's "
        "per-worker in-flight gauge, which counts both legs: the locator treats vllm-router's "
        "in-flight per worker as unknown.",
    ),
    MetricMeaning(
        "vllm_router_pd_prefill_errors_total",
        "router",
        "counter",
        ("worker",),
        "Prefill calls that failed: an error status or a timeout (no retries follow).",
        "Summed per worker as the failures the router counted against it (as smg's breaker "
        "outcomes): which prefill the router saw failing.",
    ),
    MetricMeaning(
        "vllm_router_pd_decode_errors_total",
        "router",
        "counter",
        ("worker",),
        "Decode calls that failed: an error status, a refused connection or a timeout.",
        "Summed per worker as the failures the router counted against it: which decode.",
    ),
    # -- toxiproxy ------------------------------------------------------------------------------
    MetricMeaning(
        "toxiproxy_proxy_received_bytes_total",
        "toxiproxy",
        "counter",
        ("proxy", "direction"),
        "Bytes read into a link, per direction (`upstream` = towards the server). Added when "
        "a connection ends, so it moves as connections close.",
        "Bytes in per link: in > out on a faulty link means bytes that entered and were "
        "never delivered (a black hole).",
    ),
    MetricMeaning(
        "toxiproxy_proxy_sent_bytes_total",
        "toxiproxy",
        "counter",
        ("proxy", "direction"),
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
