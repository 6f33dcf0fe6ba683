"""Parsing what components expose (pure): the router's, the engines' and Toxiproxy's Prometheus
text (names a real deployment exports), and the kernel's view of a process."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pytest_wedge.evidence.metric_names import (
    VLLM_ROUTER_PER_WORKER,
    canonical,
    exported_names,
    vocabulary,
)
from pytest_wedge.evidence.observed import RouterErrors, RouterMetrics
from pytest_wedge.metrics_text import parse_samples

# Probe endpoints answer on every path; counting them would drown the traffic that matters.
_PROBE_PATHS = frozenset({"/health", "/liveness", "/readiness", "/metrics", "/workers"})
_PER_WORKER = {
    "smg_worker_requests_active": "requests_active",
    "smg_worker_health": "health",
    "smg_worker_cb_state": "cb_state",
    "smg_worker_cb_consecutive_failures": "cb_failures",
}


def parse_engine_metrics(text: str) -> dict[str, float]:
    """Engine gauges and counters by canonical name (evidence/metric_names.py), summed over
    label sets (one engine may report several dp ranks)."""
    rows = vocabulary(text)
    return canonical(rows, parse_samples(text, exported_names(rows)))


def parse_router_metrics(text: str, workers: dict[str, str]) -> RouterMetrics:
    """The router's gauges and counters that locate a wedge, in smg's keys (vllm-router's
    per-worker series mapped onto them); ``workers`` maps worker URL -> name."""
    per_worker: dict[str, dict[str, float]] = {
        key: {} for key in ("requests_active", "health", "cb_state", "cb_failures", "cb_failed")
    }
    errors: list[RouterErrors] = []
    responses: dict[str, float] = {}
    refusals: dict[str, float] = {}
    admitted = retries = 0.0
    names = (
        *_PER_WORKER,
        "smg_worker_errors_total",
        "smg_http_responses_total",
        "smg_admission_inflight",
        "smg_worker_retries_total",
        "smg_worker_cb_outcomes_total",
        *VLLM_ROUTER_PER_WORKER,
    )
    # Only the series named: smg exposes hundreds (every histogram bucket).
    for name, labels, value in parse_samples(text, names):
        url = labels.get("worker", "")
        worker = workers.get(url, url)
        if name in VLLM_ROUTER_PER_WORKER:  # summed: one key may take two counters
            series = per_worker[VLLM_ROUTER_PER_WORKER[name]]
            series[worker] = series.get(worker, 0.0) + value
        elif name in _PER_WORKER:
            per_worker[_PER_WORKER[name]][worker] = value
        elif name == "smg_worker_errors_total":
            who, what = labels.get("worker_type", ""), labels.get("error_type", "")
            errors.append(RouterErrors(worker_type=who, error_type=what, value=value))
        elif name == "smg_http_responses_total" and labels.get("path") not in _PROBE_PATHS:
            status = labels.get("status_code", "?")
            if "path" in labels:
                # Without a path label (sglang-router 0.3.2) probe answers cannot be told
                # from answers to our requests, so none of them counts as answered.
                responses[status] = responses.get(status, 0.0) + value
            code = labels.get("error_code") or ""
            if code and status.startswith(("4", "5")):
                refusals[f"{status} {code}"] = refusals.get(f"{status} {code}", 0.0) + value
        elif name == "smg_admission_inflight":
            admitted = value
        elif name == "smg_worker_retries_total":
            retries += value
        elif name == "smg_worker_cb_outcomes_total" and labels.get("outcome") != "success":
            failed = per_worker["cb_failed"]
            failed[worker] = failed.get(worker, 0.0) + value
    return RouterMetrics(
        requests_active=per_worker["requests_active"],
        health=per_worker["health"],
        cb_state=per_worker["cb_state"],
        cb_failures=per_worker["cb_failures"],
        cb_failed=per_worker["cb_failed"],
        errors=errors,
        responses=responses,
        refusals=refusals,
        admission_inflight=admitted,
        retries=retries,
    )


def parse_link_bytes(text: str, proxies: dict[str, str]) -> dict[str, dict[str, float]]:
    """Toxiproxy ``-proxy-metrics``: bytes read (in) and written (out) per link and direction,
    added as a connection ends and only for writes that did not fail (``link.go``): in > out
    means bytes never delivered on connections now closed."""
    out: dict[str, dict[str, float]] = {}
    kinds = {
        "toxiproxy_proxy_received_bytes_total": "in",
        "toxiproxy_proxy_sent_bytes_total": "out",
    }
    for name, labels, value in parse_samples(text, tuple(kinds)):
        kind = kinds.get(name)
        link = proxies.get(labels.get("proxy", ""))
        if kind is None or link is None:
            continue
        key = f"{labels.get('direction', '?')}_{kind}"
        out.setdefault(link, {})[key] = out.setdefault(link, {}).get(key, 0.0) + value
    return out


def proc_state(pid: int | None) -> str | None:
    """The kernel's one-letter state: 'T' (stopped) proves a pause whatever a runtime believes."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _started(pid: int) -> float | None:
    """When ``pid`` started, as ``time.time()``, from its age on the kernel's boot clock
    (psutil's ``create_time`` is off by as much as the wall clock was stepped since boot)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - age


def process_state(pid: int | None) -> tuple[str, float | None]:
    """What ``ps`` shows an operator: running, stopped, zombie or gone, and the start time."""
    if pid is None:
        return "gone", None
    import psutil

    try:
        proc = psutil.Process(pid)
        status, started = proc.status(), _started(pid) or proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return "gone", None
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        return "stopped", started
    if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return "zombie", started
    return "running", started
