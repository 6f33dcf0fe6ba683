"""One :class:`Snapshot` of everything, fetched in parallel: ``observed`` (what an operator
sees; the blind locator reads nothing else) and the ground truth (stub ledgers and states,
toxics, the runtime's view; the oracle's). JSON round-trippable; every fetch has a short
timeout, and one that fails is recorded as evidence, never raised."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from pytest_wedge.evidence.fetch import gather, get, http_client
from pytest_wedge.evidence.metric_names import GAUGES
from pytest_wedge.evidence.observed import (
    ClientRecord,
    Observed,
    RouterMetrics,
    known_fields,
    read_document,
)
from pytest_wedge.evidence.parse import proc_state
from pytest_wedge.evidence.read_public import (
    attach_before,
    client_records,
    empty_observed,
    fill_observed,
    observed_jobs,
    recheck_unclear_paths,
)
from pytest_wedge.evidence.truth import LedgerEntry, LinkState, StubState, Toxic

if TYPE_CHECKING:
    from pytest_wedge.load.client_ledger import ClientLedger
    from pytest_wedge.topology.running import Topology

SNAPSHOT_FORMAT = "pytest-wedge/snapshot"
SAME_CLIENT = "(the snapshot's client ledger)"
MIN_RATE_WINDOW_S = 0.15


@dataclass
class Snapshot:
    """Everything at ``taken_at`` (``time.time()``): the oracle's view plus ``observed``."""

    taken_at: float
    prefill: list[str]
    decode: list[str]
    link_names: list[str]
    client: list[ClientRecord] = field(default_factory=list)
    ledgers: dict[str, list[LedgerEntry]] = field(default_factory=dict)
    stub_states: dict[str, StubState] = field(default_factory=dict)
    # An earlier state sample of the same stubs: the cumulative per-origin token counters of
    # the two samples give per-origin rates, which aggregate gauges cannot.
    stub_states_before: dict[str, StubState] = field(default_factory=dict)
    before_at: float | None = None
    stub_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    router: RouterMetrics = field(default_factory=lambda: RouterMetrics())
    components: dict[str, str] = field(default_factory=dict)
    links: dict[str, LinkState] = field(default_factory=dict)
    unanswered: dict[str, str] = field(default_factory=dict)
    log_paths: dict[str, str] = field(default_factory=dict)
    collect_s: float = 0.0
    observed: Observed | None = None
    # Workers run without ledger and control API: the ground truth has nothing of them.
    ledgerless: list[str] = field(default_factory=list)

    @property
    def workers(self) -> list[str]:
        return [*self.prefill, *self.decode]

    def to_dict(self) -> dict[str, object]:
        observed = self.observed.to_dict() if self.observed is not None else None
        if observed is not None and observed["client"] == self.client:
            observed["client"] = SAME_CLIENT  # one copy of the client ledger is enough
        plain = asdict(replace(self, observed=None))
        return {"format": SNAPSHOT_FORMAT, **plain, "observed": observed}

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Snapshot:
        kwargs = known_fields(cls, data)
        if isinstance(kwargs.get("observed"), dict):
            observed = dict(kwargs["observed"])
            if observed.get("client") == SAME_CLIENT:
                observed["client"] = kwargs.get("client", [])
            kwargs["observed"] = Observed.from_dict(observed)
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> Snapshot:
        return cls.from_dict(read_document(text, SNAPSHOT_FORMAT))


# -- ground truth (the oracle's extra reads) ---------------------------------------------------


def component_states(topology: Topology) -> dict[str, str]:
    """Each component's state: the runtime's word, corrected by the kernel ('T' proves a
    pause whatever the runtime believes); one that cannot be read says why."""
    states: dict[str, str] = {}
    for name in topology.components:
        try:
            state = str(topology.runtime.state(name))
            if state == "running" and proc_state(topology.runtime.pid(name)) == "T":
                state = "paused"
        except Exception as exc:  # a report names what it cannot read
            state = f"unknown ({type(exc).__name__})"
        states[name] = state
    return states


def toxic_config(topology: Topology, timeout_s: float) -> dict[str, LinkState]:
    """Each link's configuration: enabled or not, and its toxics (ground truth)."""
    by_proxy = {link.proxy: name for name, link in topology.links.items()}
    proxies = http_client().get(topology.toxiproxy.base_url + "/proxies", timeout=timeout_s)
    links: dict[str, LinkState] = {}
    for proxy, info in proxies.json().items():
        name = by_proxy.get(proxy)
        if name is None:
            continue
        toxics = [
            Toxic(
                type=t.get("type"),
                stream=t.get("stream"),
                name=t.get("name"),
                toxicity=t.get("toxicity"),
                attributes=t.get("attributes", {}),
            )
            for t in info.get("toxics") or []
        ]
        links[name] = LinkState(enabled=bool(info.get("enabled", True)), toxics=toxics)
    return links


def truth_jobs(
    topology: Topology,
    timeout_s: float,
    *,
    ledgers: bool,
    ledger_timeout_s: float,
    toxics: bool = True,
) -> tuple[dict[str, Callable[[], Any]], dict[str, float]]:
    jobs: dict[str, Callable[[], Any]] = {}
    timeouts: dict[str, float] = {}
    for name, stub in topology.stubs.items():
        jobs[f"{name} state"] = partial(get, stub.base_url + "/control/state", timeout_s)
        if ledgers:
            jobs[f"{name} ledger"] = partial(get, stub.base_url + "/ledger", ledger_timeout_s)
            timeouts[f"{name} ledger"] = ledger_timeout_s
    if toxics:
        jobs["toxiproxy"] = partial(toxic_config, topology, max(timeout_s, 1.0))
        timeouts["toxiproxy"] = max(timeout_s, 1.0)
    jobs["components"] = partial(component_states, topology)
    return jobs, {key: timeout_s for key in jobs} | timeouts


def fill(
    snapshot: Snapshot,
    topology: Topology,
    results: dict[str, Any],
    failed: dict[str, str] | None = None,
    public: set[str] | None = None,
) -> None:
    """Put one gather's results into ``snapshot`` (both its parts); of the ``failed`` fetches,
    only the ``public`` ones (what an operator could fetch) reach ``observed``."""
    obs = snapshot.observed = snapshot.observed or empty_observed(topology)
    seen = {k: v for k, v in (failed or {}).items() if public is None or k in public}
    fill_observed(obs, topology, results, seen)
    for name in topology.stubs:
        if f"{name} state" in results:
            snapshot.stub_states[name] = results[f"{name} state"]
        if f"{name} ledger" in results:
            snapshot.ledgers[name] = list(results[f"{name} ledger"].get("entries", []))
    for name, values in obs.workers.items():
        snapshot.stub_metrics[name] = {g: values[g] for g in GAUGES if g in values}
    snapshot.router = obs.router
    if "toxiproxy" in results:
        snapshot.links = results["toxiproxy"]
    for name, counters in obs.traffic.items():
        snapshot.links.setdefault(name, {})["bytes"] = counters
    snapshot.components = results.get("components", snapshot.components)
    snapshot.unanswered.update(failed or {})


def empty_snapshot(topology: Topology) -> Snapshot:
    obs = empty_observed(topology)
    snapshot = Snapshot(obs.taken_at, list(obs.prefill), list(obs.decode), list(obs.link_names))
    snapshot.ledgerless = [w for w in obs.worker_names if w not in topology.stubs]
    snapshot.observed = obs
    return snapshot


def _read_again(
    topology: Topology, snapshot: Snapshot, started: float, timeout_s: float, truth: bool
) -> None:
    """Without a probe: the first read becomes "before" and a second read, at least
    ``MIN_RATE_WINDOW_S`` later, closes the window (engine counters, router, link bytes)."""
    obs = snapshot.observed
    assert obs is not None
    first = replace(obs, taken_at=started, workers=dict(obs.workers))  # fill_observed adds to it
    jobs, timeouts = observed_jobs(
        topology, timeout_s, extras=False, slow=obs.traffic_before_at is None
    )
    if truth and not snapshot.stub_states_before:
        snapshot.stub_states_before, snapshot.before_at = dict(snapshot.stub_states), started
        jobs |= {
            f"{n} state": partial(get, topology.stubs[n].base_url + "/control/state", timeout_s)
            for n in snapshot.stub_states
        }
    time.sleep(max(0.0, started + MIN_RATE_WINDOW_S - time.time()))
    results, _ = gather(jobs, timeouts)
    attach_before(
        obs, first if obs.before_at is None else None, first if "router metrics" in jobs else None
    )
    fill_observed(obs, topology, results, {})
    fill(snapshot, topology, {k: v for k, v in results.items() if k.endswith(" state")})


def _read_gauges_again(topology: Topology, obs: Observed, started: float, timeout_s: float) -> None:
    """The probe's latest sample predates the wedge (its requests were not overdue yet), so a
    gauge in it cannot show them held: the read just taken becomes the gauges' earlier point
    and the workers are read again, ``MIN_RATE_WINDOW_S`` later. Without this, one sample of
    a burst at a healthy worker reads as requests held there."""
    obs.gauges_before, obs.gauges_before_at = dict(obs.workers), started
    jobs, timeouts = observed_jobs(topology, timeout_s, slow=False, extras=False)
    time.sleep(max(0.0, started + MIN_RATE_WINDOW_S - time.time()))
    results, _ = gather(jobs, timeouts)
    fill_observed(obs, topology, results, {})


def read_servers(
    topology: Topology,
    timeout_s: float,
    *,
    truth: bool,
    ledgers: bool,
    ledger_timeout_s: float,
    toxics: bool = True,
    extras: bool = True,
    pool: ThreadPoolExecutor | None = None,
) -> Snapshot:
    """One parallel read of every server into a new snapshot: what an operator sees (with
    ``extras``: health, /workers, processes, logs) and, with ``truth``, the stubs' states (and
    their ``ledgers``, and the ``toxics``). A diagnosis and each probe sample are one of these."""
    jobs, timeouts = observed_jobs(topology, timeout_s, extras=extras)
    public = set(jobs)
    if truth:
        more, more_timeouts = truth_jobs(
            topology, timeout_s, ledgers=ledgers, ledger_timeout_s=ledger_timeout_s, toxics=toxics
        )
        jobs, timeouts = jobs | more, timeouts | more_timeouts
    results, failed = gather(jobs, timeouts, pool)
    snapshot = empty_snapshot(topology)
    fill(snapshot, topology, results, failed, public)
    if extras:
        assert snapshot.observed is not None
        recheck_unclear_paths(topology, snapshot.observed, timeout_s, pool)
    return snapshot


def collect(
    topology: Topology,
    ledger: ClientLedger,
    *,
    timeout_s: float = 0.2,
    ledger_timeout_s: float = 0.5,
    before: Snapshot | None = None,
    window: Snapshot | None = None,
    truth: bool = True,
    pool: ThreadPoolExecutor | None = None,
    client: tuple[float, list[ClientRecord]] | None = None,
    held_from: float | None = None,
) -> Snapshot:
    """Fetch everything in parallel. ``before`` (the probe's latest sample) and ``window`` (one
    from before the wedge) give earlier points, else a second read is taken; ``truth=False``
    reads only what an operator could; ``client``: the ledger's records as read just now (at
    that moment), when the caller needed them to choose ``window``; ``held_from``: when the
    wedge's requests became overdue (a gauge must hold them in two reads from then on)."""
    # The client's view first. Read after it, the servers' counters, breakers and process
    # states show whatever the client saw (they only grow or stick); read before it, a
    # failure the client saw during a slow collection would have no trace on any server.
    if client is None:
        client = (at := time.time(), client_records(ledger, at))
    started, records = client
    snapshot = read_servers(
        topology, timeout_s, truth=truth, ledgers=True, ledger_timeout_s=ledger_timeout_s, pool=pool
    )
    obs = snapshot.observed
    assert obs is not None
    attach_before(obs, before.observed if before else None, window.observed if window else None)
    if before is not None and before.stub_states:
        snapshot.stub_states_before, snapshot.before_at = before.stub_states, before.taken_at
    if obs.before_at is None or obs.traffic_before_at is None or (truth and not snapshot.before_at):
        _read_again(topology, snapshot, started, timeout_s, truth)
    elif held_from is not None and (obs.before_at or 0.0) < held_from <= started:
        _read_gauges_again(topology, obs, started, timeout_s)
    snapshot.taken_at = obs.taken_at = time.time()
    snapshot.client = obs.client = records
    obs.client_at = started
    for name in topology.components:
        path = topology.runtime.log_path(name)
        if path:
            snapshot.log_paths[name] = path
    snapshot.collect_s = obs.collect_s = snapshot.taken_at - started
    return snapshot
