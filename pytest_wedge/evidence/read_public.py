"""Collecting :class:`Observed` from the public faces of a running topology only: each worker's
and the router's ``/metrics`` and ``/health`` (and ``/workers``, a prefill's bootstrap
``/health``), Toxiproxy's byte counters (never its toxics), process states and the log tails of
real programs (the router's, a user's workers'): never our stub workers' logs, whose lines are
our own texts (faults added, per-request origins), which no real engine writes."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import httpx

from pytest_wedge.evidence.fetch import gather, get, http_client
from pytest_wedge.evidence.observed import (
    ANSI_ESCAPES,
    TIMED_OUT,
    ClientRecord,
    Observed,
    RouterWorker,
    not_asked,
)
from pytest_wedge.evidence.parse import (
    parse_engine_metrics,
    parse_link_bytes,
    parse_router_metrics,
    process_state,
)
from pytest_wedge.routers.adapters import counts_in_flight_per_worker

if TYPE_CHECKING:
    from pytest_wedge.load.client_ledger import ClientLedger
    from pytest_wedge.topology.running import Topology

LOG_TAIL_BYTES = 4096
REAL_ENGINE_READ_S = 1.0  # a Kubernetes probe's default timeoutSeconds
# How long the second look at an unclear path gets (recheck_unclear_paths).
UNCLEAR_PATH_WAIT_S = 1.0
# A link that carries /health more than this many times slower than its far end answers
# directly (and slower than the floor, which load alone does not reach) is a slow path.
SLOW_PATH_FACTOR = 4.0
SLOW_PATH_FLOOR_S = 0.2
LOG_TAIL_LINES = 12
ROUTER_LOG_SCAN_BYTES = 256 * 1024
# smg's line when a worker answered a PD leg with an error status (pd_router.rs): the router
# read that answer, so the link to the worker carried it.
_WORKER_ERROR_STATUS = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s.*server returned error status \w+_url=(\S+)"
)
Jobs = dict[str, Callable[[], Any]]


def addresses(topology: Topology) -> dict[str, str]:
    """Which URL is which: what any operator of the deployment knows."""
    out = {"router": topology.router_url, "router metrics": topology.router_metrics_url}
    for name in [*topology.spec.prefill_names, *topology.spec.decode_names]:
        out[name] = topology.worker_url(name)
    plan = topology.plan
    if plan is not None:
        for name, port in plan.bootstrap.items():
            out[f"{name} bootstrap"] = f"http://127.0.0.1:{port}"
    for name, link in topology.links.items():
        out[name] = f"http://{link.listen}"
    return out


def _zmq_side_channel(topology: Topology, worker: str) -> bool:
    """A real vLLM engine's side channel is NIXL's ZMQ socket, not HTTP: a /health asked there
    never answers, and its silence would read as a broken transfer link."""
    return topology.spec.worker(worker).kind == "vllm"


def router_worker_names(topology: Topology) -> dict[str, str]:
    """smg labels workers by the URL it was given: the listen side of router->X."""
    return {
        f"http://{link.listen}": link.spec.target
        for name, link in topology.links.items()
        if name.startswith("router->")
    }


def empty_observed(topology: Topology) -> Observed:
    spec = topology.spec
    return Observed(
        taken_at=time.time(),
        prefill=list(spec.prefill_names),
        decode=list(spec.decode_names),
        link_names=list(topology.links),
        addresses=addresses(topology),
        router_in_flight_known=counts_in_flight_per_worker(spec.router.kind),
    )


def link_bytes(topology: Topology, timeout_s: float) -> dict[str, dict[str, float]]:
    by_proxy = {link.proxy: name for name, link in topology.links.items()}
    text = http_client().get(topology.toxiproxy.base_url + "/metrics", timeout=timeout_s).text
    return parse_link_bytes(text, by_proxy)


def processes(topology: Topology) -> dict[str, tuple[str, float | None]]:
    return {name: process_state(topology.runtime.pid(name)) for name in topology.components}


def log_tails(topology: Topology) -> dict[str, list[str]]:
    """The last lines of the router's and the user's own workers' logs, what an operator
    tails; not Toxiproxy's (it logs each toxic added) nor our stubs' (their texts are ours)."""
    tails: dict[str, list[str]] = {}
    for name in topology.components:
        if name in topology.stubs or name == "toxiproxy":
            continue
        text = _last_bytes(topology.runtime.log_path(name), LOG_TAIL_BYTES)
        if text is not None:
            lines = text.splitlines()[1:]
            tails[name] = [line[:300] for line in lines[-LOG_TAIL_LINES:]]
    return tails


def _last_bytes(path: str | None, size: int) -> str | None:
    """The last ``size`` bytes of the log file at ``path`` (None: no such file)."""
    if not path or not Path(path).is_file():
        return None
    with open(path, "rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - size))
        return f.read().decode(errors="replace")


def error_answers_read(topology: Topology) -> dict[str, float]:
    """Per worker, when the router last logged reading an error status from it (the end of
    the logged second, ``time.time()`` scale): what an operator greps the router log for."""
    text = _last_bytes(topology.runtime.log_path("router"), ROUTER_LOG_SCAN_BYTES) or ""
    names = router_worker_names(topology)
    read: dict[str, float] = {}
    for line in text.splitlines():
        if "returned error status" not in line:
            continue
        found = _WORKER_ERROR_STATUS.match(ANSI_ESCAPES.sub("", line))
        if found and (worker := names.get(found[2].rstrip("/"))) is not None:
            # The router logs its local time to the second.
            read[worker] = time.mktime(time.strptime(found[1], "%Y-%m-%d %H:%M:%S")) + 1.0
    return read


def _health(url: str, timeout_s: float) -> float:
    """Seconds ``/health`` took to answer (an error or a timeout raises)."""
    started = time.perf_counter()
    get(url, timeout_s)
    return time.perf_counter() - started


class TrickledAnswer(httpx.ReadTimeout):
    """The answer kept coming, a few bytes at a time, past the whole wait it was given (its
    name ends the fetch's failure text: ``observed.TRICKLED``)."""


def _health_through(url: str, timeout_s: float) -> float:
    """Seconds ``/health`` through a link took to arrive whole. ``timeout_s`` bounds the whole
    answer, not each read: a link that passes a few bytes at a time (Toxiproxy's slicer or
    bandwidth toxics) never lets one read time out, yet no request crosses it in time."""
    started = time.perf_counter()
    with http_client().stream("GET", url, timeout=timeout_s) as response:
        for _ in response.iter_raw():
            if time.perf_counter() - started > timeout_s:
                raise TrickledAnswer(f"the whole answer took over {timeout_s:g} s")
        response.raise_for_status()
    took = time.perf_counter() - started
    if took > timeout_s:
        raise TrickledAnswer(f"the whole answer took {took:.2f} s")
    return took


def observed_jobs(
    topology: Topology,
    timeout_s: float,
    *,
    engines: bool = True,
    slow: bool = True,
    extras: bool = True,
) -> tuple[Jobs, dict[str, float]]:
    """The fetches of one observation. ``engines``: worker metrics; ``slow``: the router and
    the link counters; ``extras``: health, /workers, processes and logs (diagnosis only)."""
    addr = addresses(topology)
    jobs: Jobs = {}
    timeouts: dict[str, float] = {}
    worker_s = engine_read_timeout(topology, timeout_s)

    def add(key: str, job: Callable[[], Any], within_s: float) -> None:
        jobs[key], timeouts[key] = job, within_s

    for name in [*topology.spec.prefill_names, *topology.spec.decode_names]:
        if engines:
            add(f"{name} metrics", partial(get, addr[name] + "/metrics", worker_s), worker_s)
        if extras:
            add(f"{name} health", partial(_health, addr[name] + "/health", worker_s), worker_s)
            if f"{name} bootstrap" in addr and not _zmq_side_channel(topology, name):
                url = addr[f"{name} bootstrap"] + "/health"
                add(f"{name} bootstrap health", partial(_health, url, worker_s), worker_s)
    if slow:
        add("router metrics", partial(get, addr["router metrics"], timeout_s), timeout_s)
        traffic_s = max(timeout_s, 1.0)
        add("link traffic", partial(link_bytes, topology, traffic_s), traffic_s)
    if extras:
        # The same /health through each link, as the traffic goes: a link that does not carry
        # it while its far end answers directly is a broken path, seen without its config.
        for link, running in topology.links.items():
            transfer = not link.startswith(("client->", "router->"))
            if transfer and _zmq_side_channel(topology, running.spec.target):
                continue
            far_s = timeout_s if link.endswith("->router") else worker_s
            url = addr[link] + "/health"
            add(f"via {link} health", partial(_health_through, url, far_s), far_s)
        add("router health", partial(_health, addr["router"] + "/health", timeout_s), timeout_s)
        add("router workers", partial(get, addr["router"] + "/workers", timeout_s), timeout_s)
        add("processes", partial(processes, topology), timeout_s)
        add("logs", partial(log_tails, topology), timeout_s)
        add("router log", partial(error_answers_read, topology), timeout_s)
    return jobs, timeouts


def recheck_unclear_paths(
    topology: Topology, obs: Observed, timeout_s: float, pool: ThreadPoolExecutor | None = None
) -> None:
    """Ask /health again, longer, through each link whose first answer was unclear, and of its
    far end at the same moment: a link that did not carry it while the far end answered only
    slowly too, or whose answer arrived whole only after the wait, or far slower than the far
    end answered directly. Among the many fetches of one observation on a loaded machine a
    healthy link can do each of these; a black hole misses any wait, and Toxiproxy's slicer
    (a few bytes at a time) stays as slow when asked alone. What the second look saw replaces
    the first; a link still that slow then counts as one that did not answer in time."""
    unclear = [
        link
        for link in obs.link_names
        if obs.path_unclear(link) or obs.trickled(f"via {link}") or _slow(obs, link)
    ]
    if not unclear:
        return
    addr = addresses(topology)
    wait_s = max(2 * engine_read_timeout(topology, timeout_s), UNCLEAR_PATH_WAIT_S)
    jobs: Jobs = {}
    for link in unclear:
        end = obs.far_end(link)
        jobs[f"via {link} health"] = partial(_health_through, addr[link] + "/health", wait_s)
        jobs[f"{end} health"] = partial(_health, addr[end] + "/health", wait_s)
    results, failed = gather(jobs, dict.fromkeys(jobs, wait_s), pool)
    for key in results:
        obs.unanswered.pop(key, None)
    fill_observed(obs, topology, results, failed)
    obs.asked_again = sorted({*obs.asked_again, *unclear})
    for link in unclear:
        if (limit := _slow(obs, link)) is not None:
            end = obs.far_end(link)
            took, direct = obs.health_s[f"via {link}"], obs.health_s[end]
            why = f"{TIMED_OUT.format(limit)} (took {took:.2f} s; {end} directly {direct:.2f} s)"
            obs.health[f"via {link}"] = obs.unanswered[f"via {link} health"] = why


def _slow(obs: Observed, link: str) -> float | None:
    """The time ``link`` should have carried /health in, when it took longer: several times
    what its far end took to answer directly, and never under ``SLOW_PATH_FLOOR_S``."""
    via, end = f"via {link}", obs.far_end(link)
    if obs.health.get(via) != "ok" or obs.health.get(end) != "ok":
        return None
    limit = max(SLOW_PATH_FLOOR_S, SLOW_PATH_FACTOR * obs.health_s.get(end, 0.0))
    return limit if obs.health_s.get(via, 0.0) > limit else None


def engine_read_timeout(topology: Topology, timeout_s: float) -> float:
    """How long a worker's own endpoints get to answer. A real engine's API server shares two
    loaded cores with its EngineCore and Worker and answered /health and /metrics in over
    0.2 s while serving (the first fidelity run): it gets what a Kubernetes probe allows by
    default (1 s), or a slow read would look like a hung engine."""
    return max(timeout_s, REAL_ENGINE_READ_S) if topology.spec.real_engines else timeout_s


def _workers_view(answer: object, names: dict[str, str]) -> dict[str, RouterWorker]:
    out: dict[str, RouterWorker] = {}
    for w in answer.get("workers", []) if isinstance(answer, dict) else []:
        url = str(w.get("url", ""))
        out[names.get(url, url)] = RouterWorker(
            healthy=bool(w.get("is_healthy", True)),
            status=str(w.get("status", "?")),
            load=float(w.get("load") or 0),
        )
    return out


def fill_observed(
    obs: Observed, topology: Topology, results: dict[str, Any], failed: dict[str, str]
) -> None:
    """Put one gather's results (and failures, as evidence) into ``obs``: ``failed`` holds
    the failures of the public fetches only (an unanswered ground-truth fetch is no evidence).
    A /health our own process could not ask is no health evidence either: it stays unset."""
    for name in obs.worker_names:
        if f"{name} metrics" in results:
            obs.workers[name] = parse_engine_metrics(results[f"{name} metrics"])
    for key in [k for k in results if k.endswith(" health")]:
        obs.health[key.removesuffix(" health")] = "ok"
        obs.health_s[key.removesuffix(" health")] = round(float(results[key]), 4)
    for key, why in failed.items():
        if key.endswith(" health") and not not_asked(why):
            obs.health[key.removesuffix(" health")] = why
        obs.unanswered[key] = why
    names = router_worker_names(topology)
    if "router metrics" in results:
        obs.router = parse_router_metrics(results["router metrics"], names)
    elif "router metrics" in failed:
        obs.router_in_flight_known = False  # counts not read are no zeros
    if "router workers" in results:
        obs.router_workers = _workers_view(results["router workers"], names)
    obs.traffic = results.get("link traffic", obs.traffic)
    for name, (state, started) in results.get("processes", {}).items():
        obs.processes[name] = state
        if started is not None:
            obs.started[name] = started
    obs.logs = results.get("logs", obs.logs)
    obs.error_answers_read = results.get("router log", obs.error_answers_read)


def attach_before(obs: Observed, rates: Observed | None, window: Observed | None) -> None:
    """Earlier points: ``rates`` (a recent sample) for engine counters and gauges that must
    hold; ``window`` (a sample from before the wedge) for router counters and link traffic."""
    if rates is not None and rates.workers:
        obs.workers_before, obs.before_at = rates.workers, rates.taken_at
    if window is not None:  # a sample that read the router and the links
        obs.router_before, obs.workers_window = window.router, window.workers
        obs.traffic_before, obs.traffic_before_at = window.traffic, window.taken_at


# The client ledger's stamps of a request's steps after its creation.
STEPS = ("sent", "first_byte", "first_token", "last_byte", "last_ping")


def client_records(ledger: ClientLedger, at: float) -> list[ClientRecord]:
    """The ledger's records as they were at ``at``, taken just before the copy. The load keeps
    writing while the records are copied; read as of one instant, a request that ended during
    the copy is not seen ended by a view whose ages are read at that instant."""
    copied = (client_as_of(cast(ClientRecord, r.to_dict()), at) for r in ledger.records)
    return [r for r in copied if r is not None]


def client_as_of(record: ClientRecord, at: float) -> ClientRecord | None:
    """A client ledger record as it was at ``at``: None if not created yet; still pending,
    without the stamps of later steps (a first byte, a send), if it had not ended by then,
    whether it ended later or is pending still; with no tokens if its first came later. A
    stream's count after its first token has no stamps, so it stays as counted."""
    if float(record.get("created") or 0.0) > at:
        return None
    finished = record.get("finished")
    if finished is not None and float(finished) <= at:
        return record
    then = {
        k: None if k in STEPS and not (isinstance(v, int | float) and v <= at) else v
        for k, v in record.items()
    }
    ended: dict[str, object] = {"state": "pending", "finished": None, "status": None, "error": None}
    if then.get("first_token") is None:  # the tokens counted came after the moment
        ended["tokens"] = 0
    return cast(ClientRecord, then | ended)
