"""What an operator observes, the only input of the blind locator. Pure data: the client
ledger (ours), the router's and workers' public ``/health`` and ``/metrics`` (real metric
names), ``/workers``, Toxiproxy's byte counters, the kernel's process states, log tails, and
which address is which component. The ground truth lives in :mod:`.truth`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, TypedDict

OBSERVED_FORMAT = "pytest-wedge/observed"
DIRECTIONS = ("upstream", "downstream")
# How a fetch that failed is told. evidence/fetch.py writes these texts, the reports show
# them, and recorded observations keep them; only the predicates below read them.
NO_ANSWER = "did not answer"
TIMED_OUT = NO_ANSWER + " within {:.2f} s"
_TIMED_OUT = re.compile(r"did not answer within ([0-9.]+) s")
# A fetch our own process could not make (out of file descriptors, ports or memory): it says
# nothing of the component it was meant for, so it is kept out of the health evidence.
NOT_ASKED = "could not be asked"
# The mark of an answer that kept coming a few bytes at a time past its whole wait.
TRICKLED = "(TrickledAnswer)"
# A far end that answered /health directly within this share of the time its probe through a
# link was given did not make that probe time out: the link did.
BRISK_SHARE = 0.5
# The colours of a log line as tailed (smg writes ANSI-coloured text).
ANSI_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def no_answer(why: str) -> bool:
    """``why`` says the fetch got no answer at all (as against an error status)."""
    return why.startswith(NO_ANSWER)


def not_asked(why: str) -> bool:
    """``why`` says our own process failed before the far end could answer."""
    return why.startswith(NOT_ASKED)


class ClientRecord(TypedDict, total=False):
    """One request of the client ledger, as ``RequestRecord.to_dict()`` writes it."""

    request_id: str
    origin: str
    target: str
    path: str
    stream: bool
    agent: int | None
    round: int | None
    attempt: int
    retry_of: str | None
    created: float
    sent: float | None
    first_byte: float | None
    first_token: float | None
    last_byte: float | None
    last_ping: float | None
    finished: float | None
    tokens: int
    status: int | None
    error: str | None
    state: str
    cut_by_stop: bool
    pool_limit: int | None
    pool_in_use: int | None
    left_unread: bool


class RouterErrors(TypedDict):
    """One series of ``smg_worker_errors_total``."""

    worker_type: str
    error_type: str
    value: float


class RouterMetrics(TypedDict, total=False):
    """The router's series that locate a wedge, in smg's terms (evidence/parse.py); empty
    when its /metrics did not answer."""

    requests_active: dict[str, float]  # worker -> smg_worker_requests_active
    health: dict[str, float]
    cb_state: dict[str, float]
    cb_failures: dict[str, float]
    cb_failed: dict[str, float]  # worker -> non-success breaker outcomes
    errors: list[RouterErrors]
    responses: dict[str, float]  # status -> answers to requests (not probes)
    refusals: dict[str, float]  # "status error_code" -> count
    admission_inflight: float
    retries: float


class RouterWorker(TypedDict):
    """One worker as the router's ``/workers`` lists it."""

    healthy: bool
    status: str
    load: float


RouterCounter = Literal["refusals", "responses", "cb_failed"]


def known_fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that are fields of the dataclass ``cls``."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def read_document(text: str, kind: str) -> dict[str, Any]:
    """A JSON document whose ``format`` must be ``kind``."""
    data = json.loads(text)
    if data.get("format") != kind:
        raise ValueError(f"not a {kind} document (format={data.get('format')!r})")
    return dict(data)


@dataclass
class Observed:
    """Everything an operator could see at ``taken_at`` (``time.time()``)."""

    taken_at: float
    prefill: list[str]
    decode: list[str]
    link_names: list[str]
    # name -> URL: "router" (its own port), "router metrics", each worker's real port,
    # "<prefill> bootstrap", and each link's listen side under the link's name.
    addresses: dict[str, str] = field(default_factory=dict)
    client: list[ClientRecord] = field(default_factory=list)
    router: RouterMetrics = field(default_factory=lambda: RouterMetrics())
    router_before: RouterMetrics = field(default_factory=lambda: RouterMetrics())
    router_workers: dict[str, RouterWorker] = field(default_factory=dict)
    # "ok" or why not, for: each component on its own port, "<prefill> bootstrap", and
    # "via <link>" (the far end's /health through the link, as the traffic goes)
    health: dict[str, str] = field(default_factory=dict)
    health_s: dict[str, float] = field(default_factory=dict)  # how long each answer took
    # Links whose /health was asked a second time, alone and with a longer wait: what they
    # showed then replaced the first look, one fetch among many on a loaded machine.
    asked_again: list[str] = field(default_factory=list)
    workers: dict[str, dict[str, float]] = field(default_factory=dict)
    workers_before: dict[str, dict[str, float]] = field(default_factory=dict)
    before_at: float | None = None
    # A second earlier point for the gauges alone, when ``workers_before`` predates the wedge:
    # a read taken once its requests were overdue (rates keep the longer window).
    gauges_before: dict[str, dict[str, float]] = field(default_factory=dict)
    gauges_before_at: float | None = None
    # Engine counters from the start of the window (with the router's and the links' ones).
    workers_window: dict[str, dict[str, float]] = field(default_factory=dict)
    traffic: dict[str, dict[str, float]] = field(default_factory=dict)
    traffic_before: dict[str, dict[str, float]] = field(default_factory=dict)
    traffic_before_at: float | None = None
    processes: dict[str, str] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)  # process start times
    unanswered: dict[str, str] = field(default_factory=dict)
    logs: dict[str, list[str]] = field(default_factory=dict)
    # Per worker, when the router's log last said it read an error status from that worker.
    error_answers_read: dict[str, float] = field(default_factory=dict)
    collect_s: float = 0.0
    # When the client ledger was copied: first, before any server was read, so the servers'
    # counters and sticky states already hold the trace of everything the client saw.
    client_at: float | None = None
    # Whether the router's per-worker in-flight gauge (smg_worker_requests_active) means
    # anything: an operator knows which metrics their router keeps (sglang-router 0.3.2 keeps
    # it at 0), and whether it was read this time. Without it, a worker's share of the router's
    # requests is what it holds.
    router_in_flight_known: bool = True

    # -- shape -----------------------------------------------------------------------------
    @property
    def client_now(self) -> float:
        """The moment of the client's view: the clock its requests' ages are read on."""
        return self.client_at if self.client_at is not None else self.taken_at

    @property
    def worker_names(self) -> list[str]:
        return [*self.prefill, *self.decode]

    def answered(self, component: str) -> bool:
        """Did ``component`` answer its own /health (direct, bypassing every link)?"""
        return self.health.get(component) == "ok"

    def silent(self, component: str) -> bool:
        """Was ``component`` asked its own /health, and did it not answer? A fetch this process
        could not make asked nothing: neither answered nor silent."""
        return self.health.get(component, "ok") != "ok"

    @staticmethod
    def far_end(link: str) -> str:
        """What answers at the other side of ``link``: the router, a worker, or a prefill's
        bootstrap server (for ``decode-j->prefill-i``)."""
        source, target = link.split("->", 1)
        return target if source in ("client", "router") else f"{target} bootstrap"

    def waited_s(self, key: str) -> float | None:
        """How long the probe ``key`` of ``health`` waited before it timed out (None: it did
        not time out)."""
        found = _TIMED_OUT.search(self.health.get(key, ""))
        return float(found[1]) if found else None

    def trickled(self, key: str) -> bool:
        """The probe ``key`` got its answer a few bytes at a time, not whole within its wait."""
        return self.health.get(key, "").endswith(TRICKLED)

    def path_broken(self, link: str) -> str | None:
        """Why ``link`` does not carry ``/health`` while its far end answers directly."""
        via, end = self.health.get(f"via {link}"), self.far_end(link)
        if via is None or via == "ok" or self.health.get(end) != "ok":
            return None
        return f"{link} does not carry /health to {end} ({via}), while {end} answers it directly"

    def path_unclear(self, link: str) -> bool:
        """``link`` did not carry ``/health`` in the time it was given, but its far end's direct
        answer was no brisker than that: the machine, not the link, may have been slow."""
        waited = self.waited_s(f"via {link}")
        if self.path_broken(link) is None or waited is None:
            return False
        direct_s = self.health_s.get(self.far_end(link))
        return not (waited and direct_s is not None and direct_s < waited * BRISK_SHARE)

    def process(self, component: str) -> str:
        return self.processes.get(component, "unknown")

    def named_url(self, url: str) -> str | None:
        """The component or link whose address ``url`` starts with (longest match)."""
        # Asked once per client request by several rules, for a handful of distinct URLs: a
        # diagnosis of 1000 requests otherwise spends most of its time here. Not a field, so
        # never serialized; ``addresses`` are fixed when the observation is made.
        known: dict[str, str | None] = self.__dict__.setdefault("_named_urls", {})
        if url not in known:
            found = [name for name, at in self.addresses.items() if at and url.startswith(at)]
            known[url] = max(found, key=lambda name: len(self.addresses[name]), default=None)
        return known[url]

    # -- engine metrics ----------------------------------------------------------------------
    def gauge(self, worker: str, name: str, since: float | None = None) -> float:
        """The latest value of a gauge that was above zero in the earlier sample too (a wedge
        holds it, a blip comes and goes), unless that sample is from before ``since``."""
        now = self.workers.get(worker, {}).get(name, 0.0)
        earlier, at = (
            (self.gauges_before, self.gauges_before_at)
            if self.gauges_before_at is not None
            else (self.workers_before, self.before_at)
        )
        before = earlier.get(worker, {}).get(name)
        stale = since is not None and (at or 0.0) < since
        return now if before is None or stale or before > 0 else 0.0

    def delta(self, worker: str, name: str) -> float | None:
        """How much a counter grew between the two samples (None without an earlier one)."""
        now = self.workers.get(worker, {}).get(name)
        before = self.workers_before.get(worker, {}).get(name)
        if now is None or before is None:
            return None
        return max(0.0, now - before)

    def grew(self, worker: str, name: str) -> float:
        """How much a counter grew since the window started (or since the earlier sample)."""
        now = self.workers.get(worker, {}).get(name)
        then = (self.workers_window or self.workers_before).get(worker, {}).get(name)
        return 0.0 if now is None or then is None else max(0.0, now - then)

    def rate_window_s(self) -> float:
        return max(0.0, self.taken_at - self.before_at) if self.before_at is not None else 0.0

    # -- router ------------------------------------------------------------------------------
    def in_flight(self, worker: str) -> float:
        """The router's requests in flight to ``worker`` (smg_worker_requests_active)."""
        return float(self.router.get("requests_active", {}).get(worker, 0.0))

    def router_grew(self, key: RouterCounter) -> dict[str, float]:
        """Per-label growth of a router counter map (``refusals``, ``responses``)."""
        now = self.router.get(key) or {}
        before = self.router_before.get(key) or {}
        return {k: v - before.get(k, 0.0) for k, v in now.items() if v - before.get(k, 0.0) > 0}

    # -- links -------------------------------------------------------------------------------
    def flow(self, link: str) -> dict[str, tuple[float, float]]:
        """Bytes (in, out) per direction on ``link`` between the two traffic samples."""
        now, before = self.traffic.get(link, {}), self.traffic_before.get(link, {})

        def moved(key: str) -> float:
            return max(0.0, now.get(key, 0.0) - before.get(key, 0.0))

        return {d: (moved(f"{d}_in"), moved(f"{d}_out")) for d in DIRECTIONS}

    def swallowed(self, link: str) -> dict[str, float]:
        """Per direction, bytes that entered ``link`` and were never delivered, on the
        connections that closed between the two samples (Toxiproxy counts at close)."""
        if self.traffic_before_at is None:
            return {}
        return {d: got - gave for d, (got, gave) in self.flow(link).items() if got - gave > 0}

    # -- JSON --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        return {"format": OBSERVED_FORMAT, **asdict(self)}

    def to_json(self, *, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Observed:
        return cls(**known_fields(cls, data))

    @classmethod
    def from_json(cls, text: str) -> Observed:
        return cls.from_dict(read_document(text, OBSERVED_FORMAT))
