"""Evidence: one :class:`Snapshot` of everything observable, taken in parallel, as plain data.

A snapshot is JSON round-trippable so the locator can run on a recorded one (unit tests, a
report read days later). Collection must work while something is wedged: a paused process
still accepts TCP but never answers, so every fetch has a short timeout and a fetch that
times out is itself recorded as evidence ("did not answer"), never raised.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from pytest_wedge.load.ledger import ClientLedger
    from pytest_wedge.topology.running import Topology

SNAPSHOT_FORMAT = "pytest-wedge/snapshot"
STUB_GAUGES = (
    "gen_throughput",
    "num_running_reqs",
    "num_queue_reqs",
    "num_prefill_prealloc_queue_reqs",
    "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs",
)
# Probe endpoints answer on every path; counting them would drown the traffic that matters.
_PROBE_PATHS = frozenset({"/health", "/liveness", "/readiness", "/metrics", "/workers"})

_client_lock = threading.Lock()
_shared: httpx.Client | None = None


def http_client() -> httpx.Client:
    """One pooled client for every diagnostic fetch: new clients cost an SSL context each."""
    global _shared
    with _client_lock:
        if _shared is None:
            limits = httpx.Limits(max_connections=32, max_keepalive_connections=16)
            _shared = httpx.Client(trust_env=False, limits=limits)
        return _shared


@dataclass
class Snapshot:
    """Everything observable at ``taken_at`` (``time.time()``). Pure data."""

    taken_at: float
    prefill: list[str]
    decode: list[str]
    link_names: list[str]
    client: list[dict[str, Any]] = field(default_factory=list)
    ledgers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stub_states: dict[str, dict[str, Any]] = field(default_factory=dict)
    # An earlier state sample of the same stubs: the cumulative per-origin token counters of
    # the two samples give per-origin rates, which aggregate gauges cannot.
    stub_states_before: dict[str, dict[str, Any]] = field(default_factory=dict)
    before_at: float | None = None
    stub_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    router: dict[str, Any] = field(default_factory=dict)
    components: dict[str, str] = field(default_factory=dict)
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    unanswered: dict[str, str] = field(default_factory=dict)
    log_paths: dict[str, str] = field(default_factory=dict)
    collect_s: float = 0.0

    @property
    def workers(self) -> list[str]:
        return [*self.prefill, *self.decode]

    def to_dict(self) -> dict[str, Any]:
        return {"format": SNAPSHOT_FORMAT, **asdict(self)}

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        data = json.loads(text)
        if data.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(f"not a {SNAPSHOT_FORMAT} document (format={data.get('format')!r})")
        return cls.from_dict(data)


# -- parsing (pure) --------------------------------------------------------------------------


def _families(text: str, names: tuple[str, ...]) -> list[tuple[str, dict[str, str], float]]:
    # The parser costs ~10 us a line and smg exposes hundreds (every histogram bucket); the
    # probe parses ten times a second beside the test's own load, so it reads only ``names``.
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(names))
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(wanted)
        for s in family.samples
    ]


def parse_stub_metrics(text: str) -> dict[str, float]:
    wanted = {f"sglang:{g}": g for g in STUB_GAUGES}
    return {wanted[n]: v for n, _, v in _families(text, tuple(wanted)) if n in wanted}


def parse_router_metrics(text: str, workers: dict[str, str]) -> dict[str, Any]:
    """smg's gauges and counters that locate a wedge; ``workers`` maps worker URL -> name."""
    out: dict[str, Any] = {"requests_active": {}, "health": {}, "cb_state": {},
                           "errors": [], "responses": {}, "admission_inflight": 0.0}  # fmt: skip
    per_worker = {"smg_worker_requests_active": "requests_active",
                  "smg_worker_health": "health", "smg_worker_cb_state": "cb_state"}  # fmt: skip
    names = (*per_worker, "smg_worker_errors_total", "smg_http_responses_total",
             "smg_admission_inflight")  # fmt: skip
    for name, labels, value in _families(text, names):
        if name in per_worker:
            worker = labels.get("worker", "")
            out[per_worker[name]][workers.get(worker, worker)] = value
        elif name == "smg_worker_errors_total":
            out["errors"].append({"worker_type": labels.get("worker_type", ""),
                                  "error_type": labels.get("error_type", ""), "value": value})
        elif name == "smg_http_responses_total" and labels.get("path") not in _PROBE_PATHS:
            status = labels.get("status_code", "?")
            out["responses"][status] = out["responses"].get(status, 0.0) + value
        elif name == "smg_admission_inflight":
            out["admission_inflight"] = value
    return out


def parse_link_bytes(text: str, proxies: dict[str, str]) -> dict[str, dict[str, float]]:
    """Toxiproxy ``-proxy-metrics``: bytes read (in) and written (out) per link and direction.
    A black hole shows as bytes in without bytes out."""
    out: dict[str, dict[str, float]] = {}
    kinds = {"toxiproxy_proxy_received_bytes_total": "in",
             "toxiproxy_proxy_sent_bytes_total": "out"}
    for name, labels, value in _families(text, tuple(kinds)):
        kind = kinds.get(name)
        link = proxies.get(labels.get("proxy", ""))
        if kind is None or link is None:
            continue
        key = f"{labels.get('direction', '?')}_{kind}"
        out.setdefault(link, {})[key] = out.setdefault(link, {}).get(key, 0.0) + value
    return out


def proc_state(pid: int | None) -> str | None:
    """The kernel's view: 'T' (stopped) proves a pause whatever the runtime believes."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


# -- collection --------------------------------------------------------------------------------


def component_states(topology: Topology) -> dict[str, str]:
    states: dict[str, str] = {}
    for name in topology.components:
        state = str(topology.runtime.state(name))
        if state == "running" and proc_state(topology.runtime.pid(name)) == "T":
            state = "paused"
        states[name] = state
    return states


def router_workers(topology: Topology) -> dict[str, str]:
    """smg labels workers by the URL it was given: the listen side of router->X."""
    return {f"http://{link.listen}": link.spec.target for name, link in topology.links.items()
            if name.startswith("router->")}  # fmt: skip


def link_states(topology: Topology, timeout_s: float, *, byte_counters: bool = True
                ) -> dict[str, dict[str, Any]]:  # fmt: skip
    by_proxy = {link.proxy: name for name, link in topology.links.items()}
    http = http_client()
    base = topology.toxiproxy.base_url
    proxies = http.get(base + "/proxies", timeout=timeout_s).json()
    counters: dict[str, dict[str, float]] = {}
    if byte_counters:
        metrics = http.get(base + "/metrics", timeout=timeout_s).text
        counters = parse_link_bytes(metrics, by_proxy)
    links: dict[str, dict[str, Any]] = {}
    for proxy, info in proxies.items():
        name = by_proxy.get(proxy)
        if name is None:
            continue
        toxics = [{"type": t.get("type"), "stream": t.get("stream"), "name": t.get("name"),
                   "toxicity": t.get("toxicity"), "attributes": t.get("attributes", {})}
                  for t in info.get("toxics") or []]  # fmt: skip
        links[name] = {"enabled": bool(info.get("enabled", True)), "toxics": toxics,
                       "bytes": counters.get(name, {})}  # fmt: skip
    return links


def _get(url: str, timeout_s: float) -> Any:
    response = http_client().get(url, timeout=timeout_s)
    response.raise_for_status()
    return response.json() if "json" in response.headers.get("content-type", "") else response.text


def _why(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"did not answer within {timeout_s:.2f} s ({type(exc).__name__})"
    return f"did not answer: {type(exc).__name__}: {exc}"[:200]


def gather(
    jobs: dict[str, Callable[[], Any]],
    timeouts: dict[str, float],
    pool: ThreadPoolExecutor | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run every job at once; results by key, and failures as evidence by key."""
    own = pool is None
    pool = pool or ThreadPoolExecutor(max(1, len(jobs)), thread_name_prefix="wedge-diag")
    results: dict[str, Any] = {}
    failed: dict[str, str] = {}
    try:
        futures = {key: pool.submit(job) for key, job in jobs.items()}
        for key, future in futures.items():
            try:
                results[key] = future.result()
            except Exception as exc:
                failed[key] = _why(exc, timeouts.get(key, 0.0))
    finally:
        if own:
            pool.shutdown(wait=False)
    return results, failed


def sample_jobs(topology: Topology, timeout_s: float, *, ledgers: bool, ledger_timeout_s: float,
                full: bool = True,
                ) -> tuple[dict[str, Callable[[], Any]], dict[str, float]]:  # fmt: skip
    """The fetches of one sample; shared by :func:`collect` and the probe.

    The probe leaves out the stubs' Prometheus text and Toxiproxy's byte counters: its samples
    serve the timeline and per-origin token rates, which /control/state and the proxies' state
    carry at a fraction of the cost. A diagnosis collects everything.
    """
    jobs: dict[str, Callable[[], Any]] = {}
    timeouts: dict[str, float] = {}
    for name, stub in topology.stubs.items():
        jobs[f"{name} state"] = partial(_get, stub.base_url + "/control/state", timeout_s)
        if full:
            jobs[f"{name} metrics"] = partial(_get, stub.base_url + "/metrics", timeout_s)
        if ledgers:
            jobs[f"{name} ledger"] = partial(_get, stub.base_url + "/ledger", ledger_timeout_s)
            timeouts[f"{name} ledger"] = ledger_timeout_s
    jobs["router metrics"] = partial(_get, topology.router_metrics_url, timeout_s)
    jobs["toxiproxy"] = partial(link_states, topology, max(timeout_s, 1.0),
                                byte_counters=full)  # fmt: skip
    jobs["components"] = lambda: component_states(topology)
    for key in jobs:
        timeouts.setdefault(key, timeout_s)
    return jobs, timeouts


def fill(snapshot: Snapshot, topology: Topology, results: dict[str, Any]) -> None:
    """Put one gather's results into ``snapshot``."""
    for name in topology.stubs:
        if f"{name} state" in results:
            snapshot.stub_states[name] = results[f"{name} state"]
        if f"{name} metrics" in results:
            snapshot.stub_metrics[name] = parse_stub_metrics(results[f"{name} metrics"])
        if f"{name} ledger" in results:
            snapshot.ledgers[name] = list(results[f"{name} ledger"].get("entries", []))
    if "router metrics" in results:
        snapshot.router = parse_router_metrics(results["router metrics"], router_workers(topology))
    snapshot.links = results.get("toxiproxy", {})
    snapshot.components = results.get("components", {})


def empty_snapshot(topology: Topology) -> Snapshot:
    spec = topology.spec
    return Snapshot(taken_at=time.time(), prefill=list(spec.prefill_names),
                    decode=list(spec.decode_names), link_names=list(topology.links))  # fmt: skip


def collect(
    topology: Topology,
    ledger: ClientLedger,
    *,
    timeout_s: float = 0.2,
    ledger_timeout_s: float = 0.5,
    before: Snapshot | None = None,
) -> Snapshot:
    """Fetch everything in parallel. ``before`` (e.g. the probe's latest sample) gives the
    earlier stub states for per-origin rates; without it the stubs are read twice."""
    started = time.time()
    snapshot = empty_snapshot(topology)
    jobs, timeouts = sample_jobs(topology, timeout_s, ledgers=True,
                                 ledger_timeout_s=ledger_timeout_s)  # fmt: skip
    results, failed = gather(jobs, timeouts)
    fill(snapshot, topology, results)
    if before is not None and before.stub_states:
        snapshot.stub_states_before, snapshot.before_at = before.stub_states, before.taken_at
    else:
        # The first read becomes "before"; a second, cheap read closes the rate window.
        snapshot.stub_states_before, snapshot.before_at = dict(snapshot.stub_states), started
        again = {f"{n} state": jobs[f"{n} state"] for n in snapshot.stub_states}
        later, _ = gather(again, timeouts)
        for name in snapshot.stub_states:
            if f"{name} state" in later:
                snapshot.stub_states[name] = later[f"{name} state"]
    snapshot.taken_at = time.time()
    snapshot.client = [record.to_dict() for record in ledger.records]
    snapshot.unanswered = failed
    for name in topology.components:
        path = topology.runtime.log_path(name)
        if path:
            snapshot.log_paths[name] = path
    snapshot.collect_s = snapshot.taken_at - started
    return snapshot
