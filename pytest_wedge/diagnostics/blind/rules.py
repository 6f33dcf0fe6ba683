"""Where requests that are still pending are held, from the servers' public faces alone.

The rules follow a request's path: router, then the prefill, the KV transfer, the decode, and
back. Each rule that does not hold names what it ruled out. ``certain`` is kept for direct
observation (a stopped or vanished process, a worker holding the requests in its own gauges
while its partner waits on it); inference by elimination is ``likely``; no evidence is
``unknown``.
"""

from __future__ import annotations

from pytest_wedge.diagnostics.blind.servers import (
    CERTAIN,
    DEAD,
    LIKELY,
    UNKNOWN,
    Servers,
    Verdict,
    Worker,
)

STALL_RATE = 5.0  # tokens per second per request: below this a stream is stalled, not served


def router_down(s: Servers) -> Verdict | None:
    dead = s.router_process
    if dead in DEAD:
        return s.verdict("router", CERTAIN, f"router process {DEAD[dead]}", s.router_line())
    if not s.router_answers:
        why = s.obs.health.get("router", "not asked")
        return s.verdict(
            "router",
            LIKELY,
            f"router answers neither /health ({why}) nor "
            f"/metrics on its own ports, though its process runs",
        )
    s.rule_out("router", f"process {dead}, answers /health and /metrics on its own ports")
    return None


def worker_down(s: Servers, workers: list[Worker], *, slow: bool = False) -> Verdict | None:
    """A worker whose process is stopped or gone, or that refuses /health on its own port.
    ``slow``: also one that did not answer in time, which a loaded machine can cause too, so
    it is asked only after the rules that read the gauges."""
    for w in workers:
        if w.dead:
            return s.verdict(
                w.name,
                CERTAIN,
                f"{w.name} process {w.dead}",
                f"the router has {w.in_flight:g} in flight to it",
            )
    for w in workers:
        why = s.obs.health.get(w.name, "not asked")
        if not w.answers and (slow or "within" not in why):
            return s.verdict(
                w.name,
                LIKELY,
                f"{w.name} does not answer /health on its own port ({why})",
                f"the router has {w.in_flight:g} in flight to it",
            )
    return None


def _lost_between(s: Servers, w: Worker, n: int) -> Verdict | None:
    """The router waits on ``w`` for requests ``w`` does not hold: lost on the link."""
    missing = w.missing
    if not w.metrics_read or missing < max(3.0, n / 2, w.in_flight / 2):
        return None  # unread gauges prove nothing; a few requests finishing are not a loss
    link = f"router->{w.name}"
    gap = s.swallowed_line(link)
    return s.verdict(
        link,
        LIKELY,
        gap or "",
        f"the router has {w.in_flight:g} in flight to "
        f"{w.name}, which holds {w.in_flight - missing:g} of them and answers "
        f"/health: they are lost between the router and {w.name}",
        w.load_line(),
    )


def _transfer(s: Servers, d: Worker) -> Verdict:
    prefills = s.role("prefill")
    wait = (
        f"{d.name} has {d.waiting_kv_now:g} waiting for their KV (num_decode_transfer_queue_reqs)"
    )
    if d.transfer_failures:
        wait += (
            f" and counted {d.transfer_failures:g} failed KV transfers in the window "
            f"(num_transfer_failed_reqs)"
        )
    if (v := s.broken_path([f"{d.name}->{p.name}" for p in prefills])) is not None:
        v.because.insert(0, wait)
        if v.confidence == LIKELY and (
            d.transfer_failures or any(p.ready_for_router for p in prefills)
        ):
            v.confidence = CERTAIN
        return v
    gaps = [p for p in prefills if s.obs.swallowed(f"{d.name}->{p.name}")]
    # A decode or prefill that restarted in the window dropped its connections with bytes in
    # them, and its KV or its requests with them: which link shows it says little about which
    # transfer holds the requests now.
    renewed = [(w, t) for w in [d, *prefills] if (t := s.restarted(w.name, s.since)) is not None]
    anew = "; ".join(
        f"{w.name}'s process started anew in the window (at {t:.2f})" for w, t in renewed
    )
    sure = LIKELY if anew else CERTAIN
    if len(renewed) == 1 and renewed[0][0] is not d:
        # The prefill alone restarted: the KV of the requests it had went with its old process.
        return s.verdict(renewed[0][0].name, LIKELY, wait, anew)
    # KV ready on a prefill in about the numbers the decode waits for (not one passing through,
    # nor requests sent to it directly, whose KV no decode will ever fetch).
    ready = [p for p in prefills if p.ready_for_router >= max(1.0, d.waiting_kv / 2)]
    for p in prefills:
        if p.queued + p.running == 0:
            s.rule_out(
                p.name,
                f"it holds none queued or prefilling (its gauges: {p.kv_ready:g} with KV ready)",
            )
    for p in prefills:
        # The router sends to a prefill that receives nothing (no arrivals in the window) and
        # holds none of them: the decode waits for KV of requests that prefill never got.
        if (
            p.metrics_read
            and p.missing >= max(3.0, d.waiting_kv / 2)
            and not ready
            and s.obs.grew(p.name, "num_requests") == 0
        ):
            return s.verdict(
                f"router->{p.name}",
                LIKELY,
                wait,
                f"the router has "
                f"{p.in_flight:g} in flight to {p.name}, which received none in the "
                f"window (sglang:num_requests) and holds none of them",
            )
    if len(gaps) == 1:
        p = gaps[0]
        gap = s.swallowed_line(f"{d.name}->{p.name}")
        return s.verdict(f"{d.name}->{p.name}", sure, wait, gap or "", anew)
    if len(ready) == 1:
        p = ready[0]
        # Another of the decode's transfer links that does not carry /health speaks against it.
        if any(
            s.obs.health.get(f"via {d.name}->{q.name}") not in (None, "ok")
            for q in prefills
            if q is not p
        ):
            sure = LIKELY
        return s.verdict(
            f"{d.name}->{p.name}",
            sure,
            wait,
            anew,
            f"{p.name} has "
            f"{p.ready_for_router:g} "
            f"with KV ready that no decode fetched "
            f"(num_prefill_inflight_queue_reqs): the transfer between them holds "
            f"them",
        )
    if len(prefills) == 1:
        p = prefills[0]
        return s.verdict(
            f"{d.name}->{p.name}",
            LIKELY,
            wait,
            f"{p.name} holds nothing for them "
            f"(its KV left, or never became ready to fetch): the transfer between "
            f"them holds them",
        )
    probes = {p.name: s.obs.health.get(f"via {d.name}->{p.name}") for p in prefills}
    bad = [p for p in prefills if probes[p.name] not in (None, "ok")]
    if len(bad) == 1 and any(v == "ok" for v in probes.values()):
        # Of the decode's transfer links, one alone does not carry /health: a difference that
        # load on the machine cannot make.
        link = f"{d.name}->{bad[0].name}"
        return s.verdict(
            link,
            LIKELY,
            wait,
            f"of {d.name}'s transfer links only {link} does "
            f"not carry /health ({probes[bad[0].name]})",
        )
    candidates = ", ".join(f"{d.name}->{p.name}" for p in (ready or prefills))
    return s.verdict(
        f"{d.name}->{(ready or prefills)[0].name}",
        UNKNOWN,
        wait,
        f"which prefill's transfer holds them cannot be told: {candidates}",
    )


def held_upstream(s: Servers, n: int) -> Verdict:
    """``n`` requests sent and without a response head."""
    if (v := router_down(s)) is not None:
        return v
    if (v := s.broken_path(["client->router"])) is not None:
        return v
    prefills, decodes = s.engaged("prefill"), s.engaged("decode")
    if not prefills and not decodes:
        return _not_dispatched(s, n)
    if (v := worker_down(s, [*prefills, *decodes])) is not None:
        return v
    if (v := s.broken_path([f"router->{w.name}" for w in s.workers.values()])) is not None:
        return v
    # Who holds about as many as are stuck, in both samples: a prefill queued or prefilling
    # (at least as many as a decode waits for), a decode waiting for KV (more than it queues
    # or runs), or failing its transfers. Under load every prefill has a few in progress and
    # every decode waits for a few KVs: those count only beside what a decode holds without
    # serving it (_stuck_at).
    most_waiting = max((d.waiting_kv for d in s.role("decode")), default=0.0)
    most_stuck = max((_stuck_at(d) for d in s.role("decode")), default=0.0)
    busy = sorted(
        (
            p
            for p in s.role("prefill")
            if p.prefilling_for_router >= max(1.0, n / 2, most_waiting, most_stuck / 2)
        ),
        key=lambda p: -p.prefilling_for_router,
    )
    # Of several decodes waiting for KV, the one stuck on it waits for many, and for most of
    # what the router sent it (a busy decode always waits for a few passing through).
    waiting = sorted(
        (
            d
            for d in s.role("decode")
            if d.transfer_broken
            or (d.waiting_kv >= max(1.0, n / 2, most_stuck / 2) and d.mostly_waiting)
        ),
        key=lambda d: -(d.waiting_kv + d.transfer_failures) * d.waiting_share,
    )
    if busy:
        p = busy[0]
        # With several prefills, which one a waiting decode waits on cannot be seen: a busy
        # prefill beside it may just be serving its own share.
        sure = CERTAIN if len(busy) == 1 and waiting and len(s.role("prefill")) == 1 else LIKELY
        partner = (
            f"; {waiting[0].name} waits for their KV ({waiting[0].waiting_kv:g})" if waiting else ""
        )
        return s.verdict(
            p.name,
            sure,
            f"{p.name} holds {p.queued:g} queued and {p.running:g} "
            f"prefilling in both samples{partner}",
            p.load_line(),
        )
    for p in s.role("prefill"):
        s.rule_out(p.name, "it holds none queued or prefilling")
    if waiting:
        # A prefill that answers nothing at all holds the KV they wait for: its gauges, read
        # as zeros, cannot clear it.
        return worker_down(s, s.role("prefill"), slow=True) or _transfer(s, waiting[0])
    # A decode holding them without serving them is seen in its own gauges; the router's
    # count for a prefill lags its answers under load: a weak sign, asked late.
    what = "holds them and sent no first byte"
    stuck = max(s.role("decode"), key=_stuck_at, default=None)
    if stuck is not None and _stuck_at(stuck) >= max(1.0, n / 2):
        return _decode_holds(s, stuck, what)
    if (v := worker_down(s, [*prefills, *decodes], slow=True)) is not None:
        return v
    for w in prefills:
        if (v := _lost_between(s, w, n)) is not None:
            return v
    for d in decodes:
        s.rule_out(f"{d.name}->prefill-*", f"{d.name} waits for no KV")
    if (holder := _holder(decodes, n, strict=True)) is not None:
        return _decode_holds(s, holder, what)
    for d in decodes:
        if (v := _lost_between(s, d, n)) is not None:
            return v
    if (holder := _holder(decodes, n, strict=False)) is not None:
        return _decode_holds(s, holder, what)
    return s.verdict("router", UNKNOWN, "no component shows where they are held", s.router_line())


def _stuck_at(d: Worker) -> float:
    """The router's requests ``d`` holds without serving them: queued, not bootstrapped, or
    running while it generates under ``STALL_RATE`` tokens per second for each."""
    rate = d.router_rate
    serving = rate is not None and d.running > 0 and rate / d.running >= STALL_RATE
    return max(0.0, d.queued + d.prealloc + (0.0 if serving else d.running) - d.direct)


def _holder(
    decodes: list[Worker], n: int, *, strict: bool, max_rate: float | None = None
) -> Worker | None:
    """The decode holding the router's requests: about as many as are stuck (``strict``) or
    any; among several, the one generating least for each of them. ``max_rate``: tokens per
    second per request above which a decode is clearly not what holds them."""
    floor = max(1.0, n / 2) if strict else 1.0

    def plausible(d: Worker) -> bool:
        rate = d.router_rate
        return max_rate is None or rate is None or rate / d.held_for_router <= max_rate

    holding = sorted(
        (d for d in decodes if d.held_for_router >= floor and plausible(d)),
        key=lambda d: -d.held_for_router,
    )
    if len(holding) > 1 and all(d.router_rate is not None for d in holding):
        holding.sort(key=lambda d: (d.router_rate or 0.0) / d.held_for_router)
    return holding[0] if holding else None


def _decode_holds(s: Servers, d: Worker, what: str) -> Verdict:
    rate = f", generating {d.router_rate:.0f} tok/s for them" if d.router_rate is not None else ""
    pre = f"{d.prealloc:g} not bootstrapped (preallocating), " if d.prealloc else ""
    return s.verdict(
        d.name,
        LIKELY,
        f"{d.name} {what}: it holds {d.held_for_router:g} of the "
        f"router's requests ({pre}{d.queued:g} queued, {d.running:g} running)"
        f"{rate}",
        d.load_line(),
    )


def _not_dispatched(s: Servers, n: int) -> Verdict:
    """Nothing is in flight to any worker: the requests are in the router, or never got in."""
    admitted = float(s.obs.router.get("admission_inflight", 0.0))
    gap = s.swallowed_line("client->router")
    if not s.obs.router_in_flight_known:
        for w in s.workers.values():
            s.rule_out(w.name, "it holds none of them in its own gauges")
        if gap is not None:
            return s.verdict("client->router", LIKELY, gap)
        return s.verdict(
            "router",
            LIKELY,
            f"no worker holds the {n} requests, and this router "
            f"keeps no in-flight count: they are in the router or never got in",
        )
    for w in s.workers.values():
        s.rule_out(w.name, "the router has nothing in flight to it")
    if admitted >= max(1.0, n / 2):
        return s.verdict(
            "router",
            LIKELY,
            f"the router admitted {admitted:g} requests "
            f"(smg_admission_inflight) and has none in flight to any worker",
        )
    s.rule_out(
        "router",
        f"it holds none of them (smg_admission_inflight {admitted:g}, nothing "
        f"in flight to a worker)",
    )
    answered = sum(v for k, v in s.obs.router_grew("responses").items() if k.startswith("2"))
    if answered:
        return s.verdict(
            "client->router",
            LIKELY,
            gap or "",
            f"the router answered "
            f"{answered:g} requests in the window (smg_http_responses_total) while "
            f"{n} of ours got no byte back: the answers are lost on the way back",
        )
    return s.verdict(
        "client->router",
        LIKELY,
        gap or "",
        f"{n} requests sent without an answer "
        f"while the router is idle and healthy: they never reached it",
    )


def _past_the_decodes(s: Servers, decodes: list[Worker], kind: str, n: int) -> Verdict | None:
    """Most of ``n`` open streams are no longer in flight to any decode: the decodes are done
    with them and their bytes are between the router and the client."""
    in_flight = sum(d.in_flight for d in decodes)
    if not s.obs.router_in_flight_known or in_flight >= n / 2:
        return None
    for d in decodes:
        s.rule_out(d.name, f"the router has only {d.in_flight:g} in flight to it")
    gap = s.swallowed_line("client->router")
    return s.verdict(
        "client->router",
        LIKELY,
        gap or "",
        f"{n} streams {kind} while the router "
        f"has {in_flight:g} in flight to the decodes: the rest are past them, "
        f"between the router and the client",
    )


def held_stream(s: Servers, kind: str, n: int, client_rate: float = 0.0) -> Verdict:
    """``n`` requests with a response head: ``head only`` (no data yet), ``stalled`` (data
    stopped) or ``slow`` (data trickles, ``client_rate`` tokens per second each)."""
    if (v := router_down(s)) is not None:
        return v
    if (v := s.broken_path(["client->router"])) is not None:
        return v
    decodes = s.engaged("decode")
    if (v := s.broken_path([f"router->{d.name}" for d in decodes])) is not None:
        return v
    if not decodes:
        admitted = float(s.obs.router.get("admission_inflight", 0.0))
        if kind == "head only" and admitted < max(1.0, n / 2):
            s.rule_out("router", "it has nothing in flight to any worker")
            return s.verdict(
                "client",
                LIKELY,
                f"{n} requests have their response head and "
                f"read no data while the router has nothing in flight for them: "
                f"the servers are done, the client never read the streams",
            )
        gap = s.swallowed_line("client->router")
        return s.verdict(
            "client->router",
            LIKELY,
            gap or "",
            f"{n} streams {kind} while the "
            f"router has nothing in flight to any decode: the bytes are between "
            f"the router and the client",
        )
    if (v := _past_the_decodes(s, decodes, kind, n)) is not None:
        return v
    if (v := worker_down(s, decodes)) is not None:
        return v
    what = {
        "slow": "streams them slowly",
        "stalled": "holds them and sends nothing",
        "head only": "holds them after sending the head",
    }[kind]
    # A decode that streams its requests fast is not what holds streams that stall or trickle.
    fastest = max(STALL_RATE, 3 * client_rate)
    if (holder := _holder(decodes, n, strict=True, max_rate=fastest)) is not None:
        return _decode_holds(s, holder, what)
    if (v := worker_down(s, decodes, slow=True)) is not None:
        return v
    for d in decodes:
        if (v := _lost_between(s, d, n)) is not None:
            return v
    if (holder := _holder(decodes, n, strict=False, max_rate=fastest)) is not None:
        return _decode_holds(s, holder, what)
    d = decodes[0]
    gap = s.swallowed_line(f"router->{d.name}")
    s.rule_out(d.name, "it holds none of the router's requests (it finished them)")
    return s.verdict(
        f"router->{d.name}",
        LIKELY,
        gap or "",
        f"{d.name} finished its part while "
        f"the router still has {d.in_flight:g} in flight to it: the bytes are "
        f"between {d.name} and the router",
    )


def held_direct(s: Servers, worker: str) -> Verdict:
    """Requests sent straight to a worker (no router, no link) are held by that worker."""
    w = s.workers.get(worker)
    if w is not None and w.dead:
        return s.verdict(worker, CERTAIN, f"{worker} process {w.dead}")
    return s.verdict(worker, LIKELY, f"sent straight to {worker} (no router, no link between)")
