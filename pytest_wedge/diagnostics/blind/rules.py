"""Where requests still pending are held, from the servers' public faces alone, along a
request's path. Each rule that does not hold names what it ruled out. ``certain`` is direct
observation (a stopped or vanished process, a worker holding the requests in its own gauges
while its partner waits on it), ``likely`` elimination, ``unknown`` no evidence."""

from __future__ import annotations

from pytest_wedge.diagnostics.blind.servers import (
    ANSWERS_HEALTH,
    ANSWERS_ONLY_HEALTH,
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
    dead = s.obs.process("router")
    if dead in DEAD:
        return s.verdict("router", CERTAIN, f"router process {DEAD[dead]}", s.router_line())
    if s.router_silent:
        why = s.obs.health.get("router", "not asked")
        said = f"router answers neither /health ({why}) nor /metrics on its own ports"
        return s.verdict("router", LIKELY, f"{said}, though its process runs")
    if s.obs.router:
        s.rule_out("router", f"process {dead}, {ANSWERS_HEALTH}")
    else:
        unread = s.obs.unanswered.get("router metrics", "not read")
        s.rule_out("router", f"process {dead}, its /metrics {unread}, {ANSWERS_ONLY_HEALTH}")
    return None


def worker_down(s: Servers, workers: list[Worker], *, slow: bool = False) -> Verdict | None:
    """A worker stopped, gone or refusing /health on its own port; ``slow``: also one that did
    not answer in time (load can cause that too: asked after the rules that read gauges)."""
    for w in workers:
        if w.dead:
            # Behind a router that keeps no per-worker count, that it holds them is inferred.
            sure = CERTAIN if s.obs.router_in_flight_known else LIKELY
            return s.verdict(w.name, sure, f"{w.name} process {w.dead}", w.sent_line())
    for w in workers:
        why = s.obs.health.get(w.name, "not asked")
        if w.silent and (slow or s.obs.waited_s(w.name) is None):
            said = f"{w.name} does not answer /health on its own port ({why})"
            return s.verdict(w.name, LIKELY, said, w.sent_line())
    return None


def _lost_on_a_troubled_link(s: Servers, workers: list[Worker], n: int) -> Verdict | None:
    """Of the workers the router waits on for requests they do not hold, one whose router link
    does not carry /health or swallowed bytes is seen; the others' counts may only lag (smg
    counts a prefill's leg in flight until the whole request ends)."""
    for w in workers:
        link = f"router->{w.name}"
        troubled = s.obs.health.get(f"via {link}") not in (None, "ok") or s.obs.swallowed(link)
        if troubled and (v := _lost_between(s, w, n)) is not None:
            return v
    return None


def _lost_between(s: Servers, w: Worker, n: int) -> Verdict | None:
    """The router waits on ``w`` for requests ``w`` does not hold: lost on the link, once
    they have had the time to cross it at this load (before, they may still be in transit)."""
    missing = w.missing
    # Unread gauges prove nothing, and a few requests finishing are not a loss. Only the ``n``
    # overdue requests can be lost: the router also counts young ones still in transit.
    if not w.metrics_read or n < 3 or missing < max(3.0, n / 2, w.in_flight / 2):
        return None
    if s.still_moving_over(f"router->{w.name}"):
        return None
    held = f"which holds {w.in_flight - missing:g} of them and answers /health"
    lost = f"they are lost between the router and {w.name}"
    return s.lost_on(f"router->{w.name}", f"{w.sent_line(w.name)}, {held}: {lost}", w.load_line())


def broken_transfer(
    s: Servers, *, failed_count: bool = True, at_least: float = 0.0
) -> Verdict | None:
    """A decode waits for KV (or, with ``failed_count``, failed to take it) for at least
    ``at_least`` requests over a transfer link that does not carry /health while the prefill's
    bootstrap server answers it directly. That is seen, not inferred, so it comes before who
    holds the requests: a prefill whose KV cannot leave still holds them queued or prefilling,
    which reads like a prefill that stalled."""

    def stuck(d: Worker) -> float:
        return d.waiting_kv_now + (d.transfer_failures if failed_count else 0.0)

    waiting = (d for d in s.role("decode") if stuck(d) and stuck(d) >= at_least)
    for d in sorted(waiting, key=lambda d: -stuck(d)):
        why = f"{d.name} has {d.waiting_kv_now:g} waiting for their KV"
        if failed_count and d.transfer_failures:
            why += f", {d.transfer_failures:g} failed transfers in the window"
        if (v := _broken_link_of(s, d, why)) is not None:
            return v
    return None


def _broken_link_of(s: Servers, d: Worker, wait: str) -> Verdict | None:
    prefills = s.role("prefill")
    if (v := s.broken_path([f"{d.name}->{p.name}" for p in prefills])) is None:
        return None
    v.because.insert(0, wait)
    # One probe that timed out among the forty of an observation on a loaded machine is no
    # certainty (bench seed 89783600004: a healthy decode-1->prefill-1, named certain beside
    # a CI run); one that missed the longer wait of a second look, alone, is.
    seen_twice = v.hop in s.obs.asked_again
    if (
        v.confidence == LIKELY
        and seen_twice
        and (d.transfer_failures or any(p.ready_for_router for p in prefills))
    ):
        v.confidence = CERTAIN
    return v


def _renewed_before_the_onset(s: Servers, d: Worker) -> bool:
    """``d`` restarted while the client ran, before the onset its requests set: its transfers
    with every prefill started afresh then, so each may hold some of them, and the KV ready on
    one prefill or the bytes lost on one link do not show which holds them all (bench seed
    73041600093, under the heavy recipe: a decode-only restart named certain at one of two)."""
    return len(s.role("prefill")) > 1 and s.restarted(d.name, 0.0) is not None


def _transfer(s: Servers, d: Worker) -> Verdict:
    prefills = s.role("prefill")
    wait = (
        f"{d.name} has {d.waiting_kv_now:g} waiting for their KV (num_decode_transfer_queue_reqs)"
    )
    if d.transfer_failures:
        failed = f"{d.transfer_failures:g} failed KV transfers in the window"
        wait += f" and counted {failed} (num_transfer_failed_reqs)"
    if (v := _broken_link_of(s, d, wait)) is not None:
        return v
    gaps = [p for p in prefills if s.obs.swallowed(f"{d.name}->{p.name}")]
    # A worker that restarted in the window dropped its connections with bytes in them (and its
    # KV or requests): which link shows it says little about which transfer holds them now.
    renewed = [(w, t) for w in [d, *prefills] if (t := s.restarted(w.name, s.since)) is not None]
    anew = "; ".join(
        f"{w.name}'s process started anew in the window (at {t:.2f})" for w, t in renewed
    )
    sure = LIKELY if anew or _renewed_before_the_onset(s, d) else CERTAIN
    if len(renewed) == 1 and renewed[0][0] is not d:
        # The prefill alone restarted: the KV of the requests it had went with its old process.
        return s.verdict(renewed[0][0].name, LIKELY, wait, anew)
    # KV ready on a prefill in about the numbers the decode waits for (not one passing through,
    # nor requests sent to it directly, whose KV no decode will ever fetch).
    ready = [p for p in prefills if p.ready_for_router >= max(1.0, d.waiting_kv / 2)]
    for p in prefills:
        if p.metrics_read and p.queued + p.running == 0:
            gauges = f"its gauges: {p.kv_ready:g} with KV ready"
            s.rule_out(p.name, f"it holds none queued or prefilling ({gauges})")
    for p in prefills:
        # The router sends to a prefill that receives nothing (no arrivals in the window) and
        # holds none of them: the decode waits for KV of requests that prefill never got.
        if (
            p.metrics_read
            and p.missing >= max(3.0, d.waiting_kv / 2)
            and not ready
            and s.obs.grew(p.name, "num_requests") == 0
            and not s.still_moving_over(f"router->{p.name}")
        ):
            none = "which received none in the window (sglang:num_requests) and holds none of them"
            return s.verdict(f"router->{p.name}", LIKELY, wait, f"{p.sent_line(p.name)}, {none}")
    between = "the transfer between them holds them"
    if len(gaps) == 1:
        link = f"{d.name}->{gaps[0].name}"
        return s.verdict(link, sure, wait, s.swallowed_line(link), anew)
    if len(ready) == 1:
        p = ready[0]
        # Another of the decode's transfer links that does not carry /health speaks against it.
        if any(
            s.obs.health.get(f"via {d.name}->{q.name}") not in (None, "ok")
            for q in prefills
            if q is not p
        ):
            sure = LIKELY
        # So does another decode waiting for KV: the KV ready may be the other one's. And KV
        # ready on another prefill, fewer: some of the decode's requests may wait on it.
        if any(o.waiting_kv_now for o in s.role("decode") if o is not d) or any(
            q.ready_for_router >= 1 for q in prefills if q is not p
        ):
            sure = LIKELY
        kv = f"{p.name} has {p.ready_for_router:g} with KV ready that no decode fetched"
        return s.verdict(
            f"{d.name}->{p.name}",
            sure,
            wait,
            anew,
            f"{kv} (num_prefill_inflight_queue_reqs): {between}",
        )
    if (v := _stopped_prefill(s, [d])) is not None:
        return v
    if len(prefills) == 1:
        p = prefills[0]
        nothing = f"{p.name} holds nothing for them (its KV left, or never became ready to fetch)"
        return s.verdict(f"{d.name}->{p.name}", LIKELY, wait, f"{nothing}: {between}")
    probes = {p.name: s.obs.health.get(f"via {d.name}->{p.name}") for p in prefills}
    bad = [p for p in prefills if probes[p.name] not in (None, "ok")]
    if len(bad) == 1 and any(v == "ok" for v in probes.values()):
        # Of the decode's transfer links, one alone does not carry /health: a difference that
        # load on the machine cannot make.
        link = f"{d.name}->{bad[0].name}"
        alone = f"of {d.name}'s transfer links only {link} does not carry /health"
        return s.verdict(link, LIKELY, wait, f"{alone} ({probes[bad[0].name]})")
    candidates = ", ".join(f"{d.name}->{p.name}" for p in (ready or prefills))
    untold = f"which prefill's transfer holds them cannot be told: {candidates}"
    return s.verdict(f"{d.name}->{(ready or prefills)[0].name}", UNKNOWN, wait, untold)


def _stopped_prefill(s: Servers, decodes: list[Worker]) -> Verdict | None:
    """A decode waits for KV in both samples, requests sent before them still have no
    response head, and the one prefill with no KV ready made no step between them (its prompt
    and generated token counters still): the KV and the requests are held in that prefill. An
    engine loop stopped under a live API server answers /health and freezes its gauges, so
    only its counters tell. A decode whose own loop stopped freezes its gauges too, maybe at
    requests waiting for KV, but a live prefill then answers every request sent to it: all
    have their heads. A prefill that shows KV ready is the transfer rules'."""
    headless = s.headless_across_samples()
    waiting = [d for d in decodes if d.waiting_kv >= 1 and d.mostly_waiting]
    still = [
        p
        for p in s.role("prefill")
        if p.metrics_read
        and not p.kv_ready
        and s.obs.delta(p.name, "prompt_tokens") == 0
        and s.obs.delta(p.name, "generation_tokens") == 0
    ]
    if not waiting or not headless or len(still) != 1:
        return None
    d, p = waiting[0], still[0]
    if (v := s.broken_path([f"router->{p.name}"])) is not None:
        return v
    waits = f"{d.name} has {d.waiting_kv:g} waiting for their KV in both samples"
    none = f"{headless} requests sent before them have no response head"
    said = f"{p.name} made no step between them (no prompt or generated token)"
    return s.verdict(p.name, LIKELY, f"{waits}, {none}", f"{said}: it holds them", p.load_line())


def _kv_from_a_dead_prefill(s: Servers, decodes: list[Worker], n: int) -> Verdict | None:
    """A decode holds them waiting for their KV, and a prefill is stopped, gone or refuses
    /health: the KV they wait for is in that prefill (the heads went out before it stopped)."""
    waiting = [d for d in decodes if d.waiting_kv >= max(1.0, n / 2) and d.mostly_waiting]
    if not waiting or (v := worker_down(s, s.role("prefill"))) is None:
        return None
    v.because.insert(0, f"{waiting[0].name} has {waiting[0].waiting_kv:g} waiting for their KV")
    return v


def _uncounted_link(s: Servers, workers: list[Worker]) -> Verdict | None:
    """Behind a router that keeps no per-worker count, which workers it has requests for is
    not seen, but a link to one of them that does not carry /health is."""
    if s.obs.router_in_flight_known:
        return None
    return s.broken_path([f"router->{w.name}" for w in workers])


def held_upstream(s: Servers, n: int) -> Verdict:
    """``n`` requests sent and without a response head."""
    front = router_down(s) or s.broken_path(["client->router"])
    if (v := front or _uncounted_link(s, list(s.workers.values()))) is not None:
        return v
    prefills, decodes = s.engaged("prefill"), s.engaged("decode")
    if not prefills and not decodes:
        return _not_dispatched(s, n)
    if (v := worker_down(s, [*prefills, *decodes])) is not None:
        return v
    if (v := s.broken_path([f"router->{w.name}" for w in s.workers.values()])) is not None:
        return v
    if (v := broken_transfer(s)) is not None:
        return v
    # Who holds about as many as are stuck, in both samples: a prefill queued or prefilling, a
    # decode waiting for KV or failing its transfers. Under load every worker has a few in
    # progress: those count only beside what a decode holds without serving it (_stuck_at).
    most_waiting = max((d.waiting_kv for d in s.role("decode")), default=0.0)
    most_stuck = max((_stuck_at(d) for d in s.role("decode")), default=0.0)
    # Early in a wedge few are overdue yet: a prefill busy with its share does not outweigh
    # one the router waits on for many more that it does not hold (lost on the way to it).
    most_missing = max((p.missing for p in s.role("prefill") if p.metrics_read), default=0.0)
    floor = max(1.0, n / 2, most_waiting, most_stuck / 2, most_missing / 2)
    busy = sorted(
        (p for p in s.role("prefill") if p.prefilling_for_router >= floor),
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
        held = f"{p.name} holds {p.queued:g} queued and {p.running:g} prefilling in both samples"
        return s.verdict(p.name, sure, f"{held}{partner}", p.load_line())
    _rule_out_prefills(s, floor)
    if waiting:
        return _waiting_for_kv(s, waiting[0], n)
    # A decode holding them without serving them is seen in its own gauges; the router's
    # count for a prefill lags its answers under load: a weak sign, asked late.
    what = "holds them and sent no first byte"
    stuck = max(s.role("decode"), key=_stuck_at, default=None)
    if stuck is not None and _stuck_at(stuck) >= max(1.0, n / 2):
        return _decode_holds(s, stuck, what)
    if (v := worker_down(s, [*prefills, *decodes], slow=True)) is not None:
        return v
    if (v := _lost_on_a_troubled_link(s, [*prefills, *decodes], n)) is not None:
        return v
    for w in prefills:
        if (v := _lost_between(s, w, n)) is not None:
            return v
    for d in decodes:
        if d.metrics_read:
            s.rule_out(f"{d.name}->prefill-*", f"{d.name} waits for no KV")
    # A decode streaming the router's requests at a served pace holds none that got no head.
    if (holder := _holder(decodes, n, strict=True, max_rate=STALL_RATE)) is not None:
        return _decode_holds(s, holder, what)
    for d in decodes:
        if (v := _lost_between(s, d, n)) is not None:
            return v
    if (holder := _holder(decodes, n, strict=False)) is not None:
        return _decode_holds(s, holder, what)
    if (v := _gaugeless_holder(s, [*prefills, *decodes], n)) is not None:
        return v
    return s.verdict("router", UNKNOWN, "no component shows where they are held", s.router_line())


def _waiting_for_kv(s: Servers, d: Worker, n: int) -> Verdict:
    """The requests wait at ``d`` for their KV: which transfer holds them."""
    # A prefill that answers nothing at all holds the KV they wait for: its gauges, read as
    # zeros, cannot clear it.
    found = worker_down(s, s.role("prefill"), slow=True) or _transfer(s, d)
    if found.confidence != UNKNOWN:
        return found
    if alone := _alone_prefilling(s.role("prefill"), n):
        # The transfer links tell nothing apart; one prefill alone holds requests in prefill.
        p = alone[0]
        held = f"{p.name} alone holds {p.queued:g} queued and {p.running:g} prefilling"
        return s.verdict(p.name, LIKELY, held, *found.because, p.load_line())
    # Waiting for KV told nothing apart; a decode holding none of what the router sent it is
    # seen (a decode streaming its own load also waits for a few KVs).
    for other in s.role("decode"):
        if (v := _lost_between(s, other, n)) is not None:
            return v
    return found


def _rule_out_prefills(s: Servers, floor: float) -> None:
    for p in s.role("prefill"):
        if p.metrics_read:  # a gauge it does not export proves nothing
            held = p.prefilling_for_router
            fewer = f"it holds {held:g} queued or prefilling, fewer than the {floor:g} stuck"
            s.rule_out(p.name, fewer if held else "it holds none queued or prefilling")


def _alone_prefilling(prefills: list[Worker], n: int) -> list[Worker]:
    """The one prefill of several that holds requests queued or prefilling while the others
    hold almost none: early in a stall there, while the decodes' waits (which count every
    request in flight, healthy ones too) still outnumber what it holds."""
    ranked = sorted(prefills, key=lambda p: -p.prefilling_for_router)
    if len(ranked) < 2 or ranked[0].prefilling_for_router < max(1.0, n / 2):
        return []
    return (
        ranked[:1] if ranked[1].prefilling_for_router * 4 <= ranked[0].prefilling_for_router else []
    )


def _gaugeless_holder(s: Servers, engaged: list[Worker], n: int) -> Verdict | None:
    """A worker that exports no engine gauges cannot show that it holds them: the one the
    router has most of them in flight to, over a link that carries /health, is the guess."""
    blind = sorted(
        (w for w in engaged if not w.metrics_read and w.in_flight >= max(1.0, n / 2)),
        key=lambda w: -w.in_flight,
    )
    if not blind or s.obs.health.get(f"via router->{blind[0].name}") != "ok":
        return None
    w = blind[0]
    alone = len(blind) == 1 or blind[1].in_flight < w.in_flight
    carried = f"router->{w.name} carries /health to it"
    return s.verdict(
        w.name,
        LIKELY if alone else UNKNOWN,
        f"{w.name} exports no engine gauges: {w.sent_line()} and {carried}, so it holds them",
    )


def _stuck_at(d: Worker) -> float:
    """The router's requests ``d`` holds without serving them: queued, not bootstrapped, or
    running while it generates under ``STALL_RATE`` tokens per second for each."""
    rate = d.router_rate
    serving = rate is not None and d.running > 0 and rate / d.running >= STALL_RATE
    return max(0.0, d.queued + d.prealloc + (0.0 if serving else d.running) - d.direct)


def _holder(
    decodes: list[Worker], n: int, *, strict: bool, max_rate: float | None = None
) -> Worker | None:
    """The decode holding the router's requests (about as many as are stuck if ``strict``),
    generating least for each; none generating over ``max_rate`` tok/s per request."""
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


def _holding_now(decodes: list[Worker], n: int, max_rate: float) -> Worker | None:
    """The decode that holds about as many of the router's requests in the latest sample and
    streams each slowly: its earlier sample came before they piled up (a slowdown that just
    began), so nothing held in both."""
    holding = [
        d
        for d in decodes
        if d.metrics_read
        and (now := d.held_now - d.direct) >= max(1.0, n / 2)
        and (d.router_rate is None or d.router_rate / now <= max_rate)
    ]
    return max(holding, key=lambda d: d.held_now, default=None)


def _decode_holds(s: Servers, d: Worker, what: str) -> Verdict:
    rate = f", generating {d.router_rate:.0f} tok/s for them" if d.router_rate is not None else ""
    pre = f"{d.prealloc:g} not bootstrapped (preallocating), " if d.prealloc else ""
    held = f"{pre}{d.queued:g} queued, {d.running:g} running"
    said = (
        f"{d.name} {what}: it holds {d.held_for_router:g} of the router's requests ({held}){rate}"
    )
    return s.verdict(d.name, LIKELY, said, d.load_line())


def _not_dispatched(s: Servers, n: int) -> Verdict:
    """Nothing is in flight to any worker: the requests are in the router, or never got in."""
    admitted = float(s.obs.router.get("admission_inflight", 0.0))
    if not s.obs.router_in_flight_known:
        for w in s.workers.values():
            if w.metrics_read:
                s.rule_out(w.name, "it holds none of them in its own gauges")
        if (gap := s.swallowed_line("client->router")) is not None:
            return s.verdict("client->router", LIKELY, gap)
        via = s.obs.health.get("via client->router")
        if via not in (None, "ok") and s.obs.answered("router"):
            # However slowly the router answers under load, it answers; through the link it
            # does not, and no worker holds anything: the link holds them.
            said = f"/health through client->router {via}, while the router answers it directly"
            return s.verdict("client->router", LIKELY, said, f"and no worker holds the {n}")
        no_count = f"no worker holds the {n} requests, and this router keeps no in-flight count"
        return s.verdict("router", LIKELY, f"{no_count}: they are in the router or never got in")
    for w in s.workers.values():
        s.rule_out(w.name, "the router has nothing in flight to it")
    if admitted >= max(1.0, n / 2):
        said = f"the router admitted {admitted:g} requests (smg_admission_inflight)"
        return s.verdict("router", LIKELY, f"{said} and has none in flight to any worker")
    none = f"smg_admission_inflight {admitted:g}, nothing in flight to a worker"
    s.rule_out("router", f"it holds none of them ({none})")
    answered = sum(v for k, v in s.obs.router_grew("responses").items() if k.startswith("2"))
    if answered:
        said = f"the router answered {answered:g} requests in the window (smg_http_responses_total)"
        return s.lost_on(
            "client->router",
            f"{said} while {n} of ours got no byte back: the answers are lost on the way back",
        )
    idle = "while the router is idle and healthy: they never reached it"
    return s.lost_on("client->router", f"{n} requests sent without an answer {idle}")


def _past_the_decodes(s: Servers, decodes: list[Worker], kind: str, n: int) -> Verdict | None:
    """Most of ``n`` open streams are no longer in flight to any decode: the decodes are done
    with them and their bytes are between the router and the client."""
    in_flight = sum(d.in_flight for d in decodes)
    if not s.obs.router_in_flight_known or in_flight >= n / 2:
        return None
    for d in decodes:
        s.rule_out(d.name, f"the router has only {d.in_flight:g} in flight to it")
    said = f"{n} streams {kind} while the router has {in_flight:g} in flight to the decodes"
    return s.lost_on(
        "client->router", f"{said}: the rest are past them, between the router and the client"
    )


def held_stream(s: Servers, kind: str, n: int, client_rate: float = 0.0) -> Verdict:
    """``n`` requests with a response head: ``head only`` (no data yet), ``stalled`` (data
    stopped) or ``slow`` (data trickles, ``client_rate`` tokens per second each)."""
    if (v := router_down(s) or s.broken_path(["client->router"])) is not None:
        return v
    decodes = s.engaged("decode")
    routes = s.broken_path([f"router->{d.name}" for d in decodes])
    if (v := routes or _uncounted_link(s, s.role("decode"))) is not None:
        return v
    if not decodes and not s.obs.router_in_flight_known:
        # Without the router's count, "nothing in flight" is not seen: a decode whose engine
        # hangs mid-step shows stale gauges, and the head it sent says it had them.
        only = s.role("decode")
        if len(only) == 1 and (v := _silent_after_heads(s, only[0], kind, n)) is not None:
            return v
        where = only[0].name if len(only) == 1 else "router"
        said = f"{n} streams {kind}; no decode's gauges hold them"
        untold = "this router keeps no in-flight count: the decode or the router holds them"
        return s.verdict(where, UNKNOWN, said, untold)
    if not decodes:
        admitted = float(s.obs.router.get("admission_inflight", 0.0))
        unread = sum(
            bool(r.get("left_unread")) for r in s.obs.client if r.get("state") == "pending"
        )
        if admitted < max(1.0, n / 2):
            s.rule_out("router", "it has nothing in flight to any worker")
            if kind == "head only" and unread >= max(1.0, n / 2):
                said = f"{n} requests have their response head and read no data while the router"
                done = f"the servers are done, the client left {unread} streams unread"
                return s.verdict("client", LIKELY, f"{said} has nothing in flight for them: {done}")
        # The client reads every stream it did not leave unread: what it has not read has not
        # reached it (a link that slices the answers still carries a short /health in time).
        said = f"{n} streams {kind} while the router has nothing in flight to any decode"
        return s.lost_on(
            "client->router", f"{said}: the bytes are between the router and the client"
        )
    if (v := _past_the_decodes(s, decodes, kind, n) or worker_down(s, decodes)) is not None:
        return v
    # A decode that waits for KV over a link seen broken for as many requests as the streams
    # overdue is stuck on that transfer: the few streams show the requests behind them. The
    # streams themselves have their KV (their heads came), so neither transfers that failed
    # earlier nor fewer waiting now than the streams hold them: the decode does.
    kv_held = broken_transfer(s, failed_count=False, at_least=n) or _kv_from_a_dead_prefill(
        s, decodes, n
    )
    if (v := kv_held or _stopped_prefill(s, decodes)) is not None:
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
        if (v := _silent_after_heads(s, d, kind, n) or _lost_between(s, d, n)) is not None:
            return v
    if (holder := _holder(decodes, n, strict=False, max_rate=fastest)) is not None:
        return _decode_holds(s, holder, what)
    if (v := _gaugeless_holder(s, decodes, n)) is not None:
        return v
    if (holder := _holding_now(decodes, n, fastest)) is not None:
        now = holder.held_now - holder.direct
        said = f"{holder.name} {what}: it holds {now:g} of the router's requests in the latest "
        piled = "sample (they piled up since the earlier one)"
        return s.verdict(holder.name, LIKELY, said + piled, holder.load_line())
    # The decode that finished its part holds the fewest of what the router sent it; a busier
    # one still holding some has young requests in transit, not finished ones.
    d = min(decodes, key=lambda w: w.held_for_router)
    s.rule_out(d.name, "it holds none of the router's requests (it finished them)")
    said = f"{d.name} finished its part while the router still has {d.in_flight:g} in flight to it"
    return s.lost_on(f"router->{d.name}", f"{said}: the bytes are between {d.name} and the router")


def _silent_after_heads(s: Servers, d: Worker, kind: str, n: int) -> Verdict | None:
    """The router waits on ``d`` for streams whose heads ``d`` sent, and ``d`` generated no
    token since they were overdue: ``d`` holds them, whatever its gauges read (an engine loop
    stopped under a live API server freezes them at what they were, some of them or none).
    Bytes a link holds leave their decode generating, or done before the heads went out. A
    token counter that did not move at all between the two samples says so too, however early
    the first one was."""
    still = d.token_rate == 0 or s.obs.delta(d.name, "generation_tokens") == 0
    if kind != "head only" or not still or not d.metrics_read:
        return None
    # Behind a router that keeps no per-worker count, the one decode is what sent the heads.
    if d.in_flight < max(1.0, n / 2) and s.obs.router_in_flight_known:
        return None  # the router does not wait on it for them
    said = f"{d.name} sent the heads of {n} streams and generated no token since"
    sent = d.sent_line() if s.obs.router_in_flight_known else s.router_line()
    held = f"its gauges read {max(0.0, d.held_now - d.direct):g} of them"
    return s.verdict(d.name, LIKELY, said, f"{sent}; {held}", d.load_line())


def held_direct(s: Servers, worker: str) -> Verdict:
    """Requests sent straight to a worker (no router, no link) are held by that worker."""
    w = s.workers.get(worker)
    if w is not None and w.dead:
        return s.verdict(worker, CERTAIN, f"{worker} process {w.dead}")
    return s.verdict(worker, LIKELY, f"sent straight to {worker} (no router, no link between)")
