"""The servers as an operator sees them: per-worker facts from public metrics and the OS. A
worker's load splits by sender: the router's share is its ``smg_worker_requests_active``,
the share sent straight to it is in the client ledger, the rest has an unknown origin."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_wedge.diagnostics.diagnosis import window_rate
from pytest_wedge.evidence.observed import ClientRecord, Observed, no_answer, not_asked

DEAD = {
    "stopped": "stopped (SIGSTOP or a debugger: TCP still accepts, nothing answers)",
    "zombie": "exited (zombie)",
    "gone": "gone (no such process)",
}
CERTAIN, LIKELY, UNKNOWN = "certain", "likely", "unknown"
RATE_WINDOW_S = 1.0
# What only clears a hop of being cut off or dead (it may still hold requests): a ruled-out line
# ending so is dropped without doubt when the verdict names that hop after all.
CARRIES_HEALTH = "it carries /health to its far end"
ANSWERS_HEALTH = "answers /health and /metrics on its own ports"
ANSWERS_ONLY_HEALTH = "answers /health on its own port"
HELD_GAUGES = (
    "num_queue_reqs",
    "num_running_reqs",
    "num_prefill_inflight_queue_reqs",
    "num_decode_transfer_queue_reqs",
    "num_decode_prealloc_queue_reqs",
)


@dataclass
class Verdict:
    """Where a group of requests is held, how sure, and the lines that decided it."""

    hop: str
    confidence: str
    because: list[str]
    ruled_out: list[str] = field(default_factory=list)


@dataclass
class Worker:
    name: str
    role: str
    process: str
    answers: bool
    silent: bool  # asked its own /health and did not answer (see Observed.silent)
    in_flight: float  # the router's requests in flight to it
    direct: int  # client-ledger requests pending straight to it (not through the router)
    queued: float
    running: float
    kv_ready: float  # prefill: KV ready, not fetched (num_prefill_inflight_queue_reqs)
    waiting_kv: float  # decode: waiting for its KV to arrive (num_decode_transfer_queue_reqs)
    prealloc: float  # decode: not bootstrapped yet, waiting for its own KV memory (prealloc)
    transfer_failures: float  # decode: bootstrap + transfer failures in the window
    transfer_broken: float  # decode: transfers that broke or timed out (not refused) in it
    cb_open: bool
    router_healthy: bool
    failed: float  # failures the router counted against it in the window (breaker outcomes)
    held_now: float  # everything it holds in the latest sample (not only what held in both)
    waiting_kv_now: float  # decode: waiting for KV in the latest sample
    metrics_read: bool  # its /metrics answered (else its gauges read as 0 and prove nothing)
    token_rate: float | None  # decode: generated tokens per second between the two samples
    direct_rate: float = 0.0  # tokens per second the client received straight from it
    direct_answered: int = 0  # requests sent straight to it that it answered lately
    metrics_why: str = ""  # why its /metrics gave no gauges, when the fetch failed

    # Decode: tokens per second for the router's requests (less what the client got directly).
    @property
    def router_rate(self) -> float | None:
        return None if self.token_rate is None else max(0.0, self.token_rate - self.direct_rate)

    # Decode: at least as many wait for their KV as for anything else (running may be healthy).
    @property
    def mostly_waiting(self) -> bool:
        return self.waiting_kv >= self.queued + self.prealloc

    # Decode: the share of the router's requests to it waiting for KV or failed in transfer.
    @property
    def waiting_share(self) -> float:
        stuck = self.waiting_kv + self.transfer_failures
        return stuck / max(1.0, self.in_flight + self.transfer_failures)

    @property
    def held(self) -> float:
        return self.queued + self.running + self.kv_ready + self.waiting_kv + self.prealloc

    # Beyond the requests sent to it directly: KV ready, queued or prefilling, held in both
    # samples; and the router's requests in flight to it that it does not hold now.
    @property
    def ready_for_router(self) -> float:
        # A prefill answers a request sent straight to it at once and keeps its KV, which no
        # decode will fetch: those answered lately count against its KV ready too.
        return max(0.0, self.kv_ready - self.direct - self.direct_answered)

    @property
    def prefilling_for_router(self) -> float:
        # The router counts a request in flight before the prefill sees it and until it has
        # its answer: a prefill holds no more of the router's requests than that count.
        return min(max(0.0, self.queued + self.running - self.direct), max(0.0, self.in_flight))

    @property
    def held_for_router(self) -> float:
        # No more than the router counts in flight to it (the rest is someone else's).
        return min(max(0.0, self.held - self.direct), max(0.0, self.in_flight))

    @property
    def missing(self) -> float:
        return self.in_flight - max(0.0, self.held_now - self.direct)

    @property
    def dead(self) -> str | None:
        return DEAD.get(self.process)

    def sent_line(self, to: str = "it") -> str:
        return f"the router has {self.in_flight:g} in flight to {to}"

    def load_line(self) -> str:
        if not self.metrics_read:
            # A gauge it does not export is no zero: say so rather than print one.
            direct = f", {self.direct} sent to it directly" if self.direct else ""
            said = "exports no engine gauges"
            if no_answer(self.metrics_why) or not_asked(self.metrics_why):
                said = f"its /metrics {self.metrics_why}: no gauges read"
            return f"{self.name}: {said}; router in flight {self.in_flight:g}{direct}"
        if self.role == "prefill":
            ready = f"{self.kv_ready:g} with KV ready for a decode"
            held = f"{self.queued:g} queued, {self.running:g} prefilling, {ready}"
        else:
            held = (
                f"{self.prealloc:g} preallocating, {self.waiting_kv:g} waiting for KV, "
                f"{self.queued:g} queued, {self.running:g} running"
            )
        direct = f", {self.direct} sent to it directly" if self.direct else ""
        return f"{self.name}: {held} (engine gauges); router in flight {self.in_flight:g}{direct}"


# How long a prefill's unfetched KV of a request answered straight to it may stay ready: the
# stubs' and SGLang's bootstrap wait is longer; this bounds how far back such answers count.
KV_HOLD_S = 30.0


def received_rates(records: list[ClientRecord], now: float) -> dict[str, float]:
    """Tokens per second each origin received over the last second (from its records)."""
    rates: dict[str, float] = {}
    for r in records:
        first, tokens, origin = (
            r.get("first_token"),
            int(r.get("tokens") or 0),
            r.get("origin", "?"),
        )
        if first is not None and tokens >= 2:
            end = float(r.get("last_byte") or r.get("finished") or now)
            rate = window_rate(tokens, float(first), end, now, RATE_WINDOW_S)
            rates[origin] = rates.get(origin, 0.0) + rate
    return rates


def _rate(obs: Observed, name: str, held_from: float | None = None) -> float | None:
    """Generated tokens per second. A counter window that began before ``held_from`` mixes
    the healthy traffic before the wedge into it: the engine's own recent-throughput gauge
    (SGLang's gen_throughput) then, or unknown (vLLM keeps none)."""
    if held_from is not None and obs.before_at is not None and obs.before_at < held_from:
        return obs.workers.get(name, {}).get("gen_throughput")
    grew, window = obs.delta(name, "generation_tokens"), obs.rate_window_s()
    return grew / window if grew is not None and window > 0 else None


def direct_records(obs: Observed) -> dict[str, list[ClientRecord]]:
    """Client-ledger requests whose target is a worker's own URL (not the router), per worker."""
    out: dict[str, list[ClientRecord]] = {}
    for r in obs.client:
        name = obs.named_url(r.get("target") or "")
        if name in obs.worker_names:
            out.setdefault(name, []).append(r)
    return out


def worker_facts(obs: Observed, name: str, direct: int, held_from: float | None = None) -> Worker:
    prefill = name in obs.prefill

    def gauge(metric: str) -> float:
        return obs.gauge(name, metric, held_from)

    broken = obs.grew(name, "num_transfer_failed_reqs")
    cb = obs.router.get("cb_state", {}).get(name, 0.0)
    health = obs.router.get("health", {}).get(name, 1.0)
    latest = obs.workers.get(name, {})
    held_now = sum(latest.get(g, 0.0) for g in HELD_GAUGES)
    # A router that keeps no per-worker count: its share of a worker is what the worker holds
    # beyond the requests sent to it directly (nothing then counts as lost on the way).
    in_flight = obs.in_flight(name) if obs.router_in_flight_known else max(0.0, held_now - direct)
    return Worker(
        name=name,
        role="prefill" if prefill else "decode",
        process=obs.process(name),
        answers=obs.answered(name),
        silent=obs.silent(name),
        in_flight=in_flight,
        direct=direct,
        queued=gauge("num_queue_reqs"),
        running=gauge("num_running_reqs"),
        kv_ready=gauge("num_prefill_inflight_queue_reqs") if prefill else 0.0,
        waiting_kv=0.0 if prefill else gauge("num_decode_transfer_queue_reqs"),
        prealloc=0.0 if prefill else gauge("num_decode_prealloc_queue_reqs"),
        transfer_failures=obs.grew(name, "num_bootstrap_failed_reqs") + broken,
        cb_open=cb == 1.0,
        router_healthy=health != 0.0,
        transfer_broken=broken,
        metrics_read=any(g in latest for g in HELD_GAUGES),
        token_rate=_rate(obs, name, held_from),
        failed=obs.router_grew("cb_failed").get(name, 0.0),
        held_now=held_now,
        waiting_kv_now=0.0 if prefill else latest.get("num_decode_transfer_queue_reqs", 0.0),
        metrics_why=obs.unanswered.get(f"{name} metrics", ""),
    )


class Servers:
    """The observation indexed for the rules; collects what each rule ruled out."""

    def __init__(
        self,
        obs: Observed,
        held_from: float | None = None,
        *,
        since: float | None = None,
        onset: float | None = None,
        young: str | None = None,
    ) -> None:
        """``held_from``: since when the requests should be held (an engine sample from before
        then cannot show a gauge holding them); ``since``: from when a restart counts;
        ``onset``: when the episode began, as the client saw it; ``young``: why the requests
        may still be on their way to the hop that will hold them (None once they have waited
        long enough at this load)."""
        self.obs = obs
        self.young = young
        self.since = since
        self.onset = onset
        direct = direct_records(obs)
        pending = {n: sum(r.get("state") == "pending" for r in rs) for n, rs in direct.items()}
        # Lately: within the window a prefill keeps unfetched KV for (SGLang's bootstrap wait).
        lately = obs.client_now - KV_HOLD_S
        answered = {
            n: sum(r.get("state") == "ok" and float(r.get("finished") or 0) >= lately for r in rs)
            for n, rs in direct.items()
        }
        self.workers = {
            n: worker_facts(obs, n, pending.get(n, 0), held_from) for n in obs.worker_names
        }
        for name, records in direct.items():
            self.workers[name].direct_rate = sum(received_rates(records, obs.client_now).values())
            self.workers[name].direct_answered = answered.get(name, 0)
        self.ruled_out: list[str] = []

    def still_moving_over(self, link: str) -> bool:
        """The requests may still be on their way over ``link`` (noted as why it is not
        named): what its far end does not hold of them is not lost yet."""
        if self.young is None:
            return False
        self.rule_out(link, f"not yet lost: {self.young}")
        return True

    def headless_across_samples(self) -> int:
        """Requests through the router sent before the earlier engine sample and still
        without a response head at the latest: whatever holds them held them all along."""
        if self.obs.before_at is None:
            return 0
        return sum(
            r.get("state") == "pending"
            and r.get("first_byte") is None
            and float(r.get("sent") or self.obs.before_at) < self.obs.before_at
            and self.obs.named_url(r.get("target") or "") not in self.obs.worker_names
            for r in self.obs.client
        )

    # -- the router -------------------------------------------------------------------------
    @property
    def router_answers(self) -> bool:
        return self.obs.answered("router") or bool(self.obs.router)

    @property
    def router_silent(self) -> bool:
        """Asked, the router answered neither /health nor /metrics on its own ports."""
        return self.obs.silent("router") and not self.obs.router

    def router_line(self) -> str:
        obs = self.obs
        if not obs.router:
            return f"router metrics: {obs.unanswered.get('router metrics', 'not read')}"
        if not obs.router_in_flight_known:
            return "router in flight: this router keeps no per-worker count"
        active = ", ".join(f"{w} {obs.in_flight(w):g}" for w in obs.worker_names)
        admitted = obs.router.get("admission_inflight", 0.0)
        return f"router in flight (smg_worker_requests_active): {active}; admitted {admitted:g}"

    def window_misses_onset(self) -> str | None:
        """Why the router's and links' counters cannot speak for the whole episode: their
        earlier sample came after its onset (none from before it was kept)."""
        then = self.obs.traffic_before_at
        if then is None or self.onset is None or then <= self.onset:
            return None
        late = f"{then - self.onset:.1f} s after the episode began"
        return f"the router's counters are compared from a sample taken {late}"

    def restarted(self, name: str, since: float | None) -> float | None:
        """When ``name``'s process started, if after ``since`` and after the client had sent
        its first request (a restart in the window, not the deployment's start)."""
        started = self.obs.started.get(name)
        first = min(
            (float(r.get("sent") or 0.0) for r in self.obs.client if r.get("sent")), default=None
        )
        if started is None or since is None or started < since or first is None or started < first:
            return None
        return float(started)

    # -- workers ----------------------------------------------------------------------------
    def engaged(self, role: str) -> list[Worker]:
        """Workers of ``role`` the router has requests in flight to, busiest first. Behind a
        router that keeps no per-worker count, also a worker whose gauges could not be read:
        what it holds cannot be seen (a stopped engine answers nothing)."""
        unseen = not self.obs.router_in_flight_known
        found = [
            w
            for w in self.workers.values()
            if w.role == role and (w.in_flight > 0 or (unseen and not w.metrics_read))
        ]
        return sorted(found, key=lambda w: -w.in_flight)

    def role(self, role: str) -> list[Worker]:
        return [w for w in self.workers.values() if w.role == role]

    def failing(self, role: str) -> Worker | None:
        """The one worker of ``role`` the router counted failures against in the window (one
        PD failure counts against both workers of the pair), or the only worker of ``role``."""
        workers = self.role(role)
        if len(workers) == 1:
            return workers[0]
        failing = [w for w in workers if w.failed > 0]
        return failing[0] if len(failing) == 1 else None

    def cancelled(self, role: str, failures: float) -> Worker | None:
        """The one worker of ``role`` that counted about ``failures`` aborts in the window (the
        router cancels a pair's other leg when one fails)."""
        floor = max(1.0, failures / 2)
        hits = [w for w in self.role(role) if self.aborted(w) >= floor]
        return hits[0] if len(hits) == 1 else None

    def aborted(self, w: Worker) -> float:
        return self.obs.grew(w.name, "num_aborted_requests")

    def rule_out(self, hop: str, why: str) -> None:
        line = f"{hop}: {why}"
        if line not in self.ruled_out:
            self.ruled_out.append(line)

    def verdict(self, hop: str, confidence: str, *because: str | None) -> Verdict:
        return Verdict(hop, confidence, [b for b in because if b], list(self.ruled_out))

    def lost_on(self, link: str, *because: str | None) -> Verdict:
        """``link`` likely holds them, with the bytes it swallowed if it did."""
        return self.verdict(link, LIKELY, self.swallowed_line(link), *because)

    def broken_path(self, links: list[str]) -> Verdict | None:
        """The first of ``links`` that does not carry /health while its far end answers it
        directly: certain when it refused or reset, likely when it only timed out."""
        for link in links:
            why = self.obs.path_broken(link)
            if why is not None:
                if self.obs.waited_s(f"via {link}") is None:
                    return self.verdict(link, CERTAIN, why)  # refused or reset: no doubt
                if not self.obs.path_unclear(link):
                    return self.verdict(link, LIKELY, why)
            if self.obs.health.get(f"via {link}") == "ok":
                self.rule_out(link, CARRIES_HEALTH)
        return None

    def read_answers_over(self, link: str) -> str | None:
        """Why the bytes ``link`` swallowed are no sign of a broken link: in the window the
        router read error statuses from workers of the other role, and gave up the legs of
        those pairs on this link (the answer of a leg given up is read, never delivered)."""
        source, worker = link.split("->", 1)
        since = self.obs.traffic_before_at
        if source != "router" or since is None or worker not in self.workers:
            return None
        role = "decode" if self.workers[worker].role == "prefill" else "prefill"
        read = self.obs.error_answers_read
        partners = [w.name for w in self.role(role) if (t := read.get(w.name)) and t >= since]
        if not partners:
            return None
        return (
            f"in the window the router read error statuses from {', '.join(partners)} (its log: "
            "'server returned error status') and gave up their pairs' other legs: the bytes "
            "it swallowed are those legs' answers"
        )

    def swallowed_line(self, link: str) -> str | None:
        if not (gaps := self.obs.swallowed(link)):
            return None
        parts = ", ".join(f"{d} {n:g} B" for d, n in sorted(gaps.items()))
        closed = f"{link} swallowed bytes on connections that closed in the window"
        return f"{closed} ({parts} entered and were never delivered; Toxiproxy byte counters)"
