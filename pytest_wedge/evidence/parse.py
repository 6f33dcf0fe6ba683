"""Parsing what components expose (pure): smg's, the engines' and Toxiproxy's Prometheus text,
and the kernel's view of a process.

Every name here is one a real deployment exports: ``sglang:*`` from SGLang engines and
``vllm:*`` from vLLM engines (both read through evidence/metric_names.py), ``smg_*``
from the router, ``toxiproxy_proxy_*_bytes_total`` from Toxiproxy run with ``-proxy-metrics``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from pytest_wedge.evidence.metric_names import (
    COUNTERS,
    GAUGES,
    VLLM_ROUTER_PER_WORKER,
    canonical,
    exported_names,
    vocabulary,
)
from pytest_wedge.metrics_text import parse_samples

STUB_GAUGES = GAUGES
# Cumulative engine counters (SGLang names without the ``_total`` suffix).
ENGINE_COUNTERS = COUNTERS
# Probe endpoints answer on every path; counting them would drown the traffic that matters.
_PROBE_PATHS = frozenset({"/health", "/liveness", "/readiness", "/metrics", "/workers"})
_PER_WORKER = {
    "smg_worker_requests_active": "requests_active",
    "smg_worker_health": "health",
    "smg_worker_cb_state": "cb_state",
    "smg_worker_cb_consecutive_failures": "cb_failures",
}


def families(text: str, names: tuple[str, ...]) -> list[tuple[str, dict[str, str], float]]:
    """The samples of ``names`` only: smg exposes hundreds (every histogram bucket), while
    the probe reads them several times a second."""
    return parse_samples(text, names)


def parse_stub_metrics(text: str) -> dict[str, float]:
    """The engine gauges the oracle's red herrings quote, by canonical name."""
    values = parse_engine_metrics(text)
    return {g: values[g] for g in STUB_GAUGES if g in values}


def parse_engine_metrics(text: str) -> dict[str, float]:
    """Engine gauges and counters by canonical name (evidence/metric_names.py: SGLang's names
    without the prefix and ``_total``, whichever engine exported them), summed over label
    sets (one engine may report several dp ranks)."""
    rows = vocabulary(text)
    return canonical(rows, families(text, exported_names(rows)))


def parse_router_metrics(text: str, workers: dict[str, str]) -> dict[str, Any]:
    """The router's gauges and counters that locate a wedge, in smg's keys (vllm-router's
    per-worker series mapped onto them); ``workers`` maps worker URL -> name."""
    out: dict[str, Any] = {
        "requests_active": {},
        "health": {},
        "cb_state": {},
        "cb_failures": {},
        "cb_failed": {},
        "errors": [],
        "responses": {},
        "refusals": {},
        "admission_inflight": 0.0,
        "retries": 0.0,
    }
    names = (
        *_PER_WORKER,
        "smg_worker_errors_total",
        "smg_http_responses_total",
        "smg_admission_inflight",
        "smg_worker_retries_total",
        "smg_worker_cb_outcomes_total",
        *VLLM_ROUTER_PER_WORKER,
    )
    for name, labels, value in families(text, names):
        if name in VLLM_ROUTER_PER_WORKER:  # summed: one key may take two counters
            key, url = VLLM_ROUTER_PER_WORKER[name], labels.get("worker", "")
            worker = workers.get(url, url)
            out[key][worker] = out[key].get(worker, 0.0) + value
        elif name in _PER_WORKER:
            worker = labels.get("worker", "")
            out[_PER_WORKER[name]][workers.get(worker, worker)] = value
        elif name == "smg_worker_errors_total":
            out["errors"].append(
                {
                    "worker_type": labels.get("worker_type", ""),
                    "error_type": labels.get("error_type", ""),
                    "value": value,
                }
            )
        elif name == "smg_http_responses_total" and labels.get("path") not in _PROBE_PATHS:
            status = labels.get("status_code", "?")
            if "path" in labels:
                # Without a path label (sglang-router 0.3.2) probe answers cannot be told
                # from answers to our requests, so none of them counts as answered.
                out["responses"][status] = out["responses"].get(status, 0.0) + value
            code = labels.get("error_code") or ""
            if code and status.startswith(("4", "5")):
                key = f"{status} {code}"
                out["refusals"][key] = out["refusals"].get(key, 0.0) + value
        elif name == "smg_admission_inflight":
            out["admission_inflight"] = value
        elif name == "smg_worker_retries_total":
            out["retries"] += value
        elif name == "smg_worker_cb_outcomes_total" and labels.get("outcome") != "success":
            worker = workers.get(labels.get("worker", ""), labels.get("worker", ""))
            out["cb_failed"][worker] = out["cb_failed"].get(worker, 0.0) + value
    return out


def parse_link_bytes(text: str, proxies: dict[str, str]) -> dict[str, dict[str, float]]:
    """Toxiproxy ``-proxy-metrics``: bytes read (in) and written (out) per link and direction.

    Toxiproxy adds a connection's bytes when that connection ends (``link.go``: the counters
    follow ``io.Copy`` returning), and counts written bytes only for a write that did not fail.
    So the counters move when connections close, and in > out means bytes that entered a link
    and were never delivered on connections that have since closed.
    """
    out: dict[str, dict[str, float]] = {}
    kinds = {
        "toxiproxy_proxy_received_bytes_total": "in",
        "toxiproxy_proxy_sent_bytes_total": "out",
    }
    for name, labels, value in families(text, tuple(kinds)):
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
    """When ``pid`` started, as ``time.time()``: its age on the kernel's boot clock (``/proc``
    start ticks against ``/proc/uptime``). psutil's ``create_time`` adds the boot time, which
    is off by as much as the wall clock was stepped since boot."""
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
