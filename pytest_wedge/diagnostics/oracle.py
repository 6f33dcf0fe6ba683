"""The oracle: the reference location of one origin's wedge, from the ground truth alone (the
client ledger, the stub ledgers and states, the runtime's process states, and the injected
faults with their windows, handed in). It scores the blind locator and shares none of its code
or rules; it never reads the toxics off Toxiproxy.

The reference rule:

- Wedged: the origin's requests pending longer than ``overdue_after_s`` since they were sent
  (or since created, when the client's pool was full), and those that failed after the
  current fault started (``since``; without faults, within ``window_s``), less those a decode
  finished under ``overdue_after_s`` ago that the client has not read yet and did not leave
  unread: a client short of CPU is late, no hop holds them. Judged at an earlier moment, a
  stream that flowed then is slow, not held (:func:`flowing_at`).
- Each is walked over the ledgers to the hop that holds it (hops.py); where the ledgers cannot
  tell a link from its ends, the injected fault's hop and the process states decide.
- The location is the hop holding most of them: the injected fault's hop where the fault
  manifested; ``none`` where it never did (no request of the origin wedged).
- Documented exceptions, where a fault by its nature wedges elsewhere (:data:`ELSEWHERE`):
  ``DecodeOnlyRestart`` on ``decode-j`` wedges the transfers ``decode-j->prefill-i``
  (incidents.md 2); the requests the restart itself dropped are not that wedge, so its window
  starts once the decode is back. A ``Restart`` of a decode is a decode-only restart too: the
  streams it broke are held at the decode, the transfers after it on ``decode-j->prefill-i``.

Other origins' activity is a red herring, reported apart."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from pytest_wedge.diagnostics.diagnosis import (
    MAX_DETAILS,
    Diagnosis,
    RequestDetail,
    WatchdogFiring,
    client_errors,
    count_line,
    herring,
    other_origins,
    tally,
    window_rate,
)
from pytest_wedge.diagnostics.hops import (
    Context,
    Hold,
    InjectedFault,
    classify,
    hops_in_order,
    injected_faults,
)
from pytest_wedge.evidence.observed import ClientRecord
from pytest_wedge.evidence.read_public import client_as_of
from pytest_wedge.evidence.snapshot import MIN_RATE_WINDOW_S, Snapshot
from pytest_wedge.load.client_ledger import FAILED_STATES

__all__ = ["ELSEWHERE", "InjectedFault", "elsewhere", "injected_faults", "locate", "scene_faults"]

ENDED = ("ok", "error", "aborted", "released")
# The documented exceptions: fault kinds that by their nature wedge a hop other than their
# target, and why.
ELSEWHERE = {
    "DecodeOnlyRestart": "a decode restarted without its prefills wedges its KV transfers "
    "decode->prefill (incidents.md 2)",
    "Restart": "a decode restarted alone is a decode-only restart: the transfers after it wedge "
    "on decode->prefill (incidents.md 2)",
}
WHY_NOT_RUNNING = {
    "paused": "paused (SIGSTOP: TCP still accepts, nothing answers)",
    "exited": "exited",
    "absent": "absent (not started)",
}


def origin_rates(snapshot: Snapshot, component: str, window_s: float = 0.5) -> dict[str, float]:
    """Tokens per second by origin: from two samples of the stub's cumulative counters when far
    enough apart, else from the ledger entries over the last ``window_s``."""
    state_after = snapshot.stub_states.get(component, {})
    state_before = snapshot.stub_states_before.get(component, {})
    after, before = state_after.get("tokens_by_origin"), state_before.get("tokens_by_origin")
    at_after, at_before = state_after.get("at"), state_before.get("at")
    if at_after is not None and at_before is not None:
        dt = at_after - at_before
    else:
        dt = snapshot.taken_at - (snapshot.before_at or snapshot.taken_at)
    if after is not None and before is not None and dt >= MIN_RATE_WINDOW_S:
        return {o: max(0.0, (n - before.get(o, 0)) / dt) for o, n in after.items()}
    now = snapshot.taken_at
    rates: dict[str, float] = {}
    for e in snapshot.ledgers.get(component, []):
        t, tokens = e.get("t") or {}, int(e.get("tokens") or 0)
        if tokens and (first := t.get("first_token")) is not None:
            rate = window_rate(tokens, first, t.get("finished", now), now, window_s)
            rates[e.get("origin", "?")] = rates.get(e.get("origin", "?"), 0.0) + rate
    return rates


def red_herrings(snapshot: Snapshot, origin: str) -> list[str]:
    herrings = []
    for component in snapshot.workers:
        rates = origin_rates(snapshot, component)
        entries = snapshot.ledgers.get(component, [])
        active = Counter(e.get("origin", "?") for e in entries if e.get("state") not in ENDED)
        if not (others := other_origins(origin, rates, active)):
            continue
        total = sum(rates.values())
        parts = [f"{component} busy"]
        if total >= 0.5:
            by_rate = sorted(others, key=lambda o: -rates.get(o, 0.0))
            share = ", ".join(f"{100 * rates.get(o, 0.0) / total:.0f} % {o}" for o in by_rate)
            mine = f"{origin}: {rates.get(origin, 0.0):.0f} tok/s"
            parts = [f"{component} generating {total:.0f} tok/s, {share} ({mine})"]
        if busy := ", ".join(f"{o} {active[o]}" for o in others if active.get(o)):
            mine = f", {origin} {active[origin]}" if active.get(origin) else f", none of {origin}"
            parts.append(f"active requests: {busy}{mine}")
        if gauge := snapshot.stub_metrics.get(component, {}).get("num_running_reqs"):
            parts.append(f"num_running_reqs={gauge:g} counts them too")
        herrings.append(herring(parts, origin))
    return herrings


def _reach(ctx: Context, wedged: list[ClientRecord], workers: list[str]) -> str:
    reached = Counter(
        s.component
        for r in wedged
        for index in (ctx.prefill, ctx.decode)
        for s in index.get(r.get("request_id", ""), [])[-1:]
    )
    if not any(reached.values()):
        return f"0 of them reached {' or '.join(workers)}"
    return "of them, " + ", ".join(f"{reached.get(w, 0)} reached {w}" for w in workers)


def _facts(
    ctx: Context, origin: str, held: list[tuple[ClientRecord, Hold]], location: str
) -> list[str]:
    snapshot = ctx.snapshot
    wedged, holds = [r for r, _ in held], [h for _, h in held]
    mine = [r for r in snapshot.client if r.get("origin") == origin]
    facts = [count_line(origin, mine, wedged, "recently")]
    if wedged:
        facts.append(_reach(ctx, wedged, snapshot.workers))
        facts.append(tally("held at", (h.holding for h in holds)))
    for name, state in ctx.not_running.items():
        facts.append(f"{name} process {WHY_NOT_RUNNING.get(state, state)}")
    facts += [f"{what} {why}" for what, why in sorted(snapshot.unanswered.items())]
    if active := snapshot.router.get("requests_active"):
        facts.append("router in-flight: " + ", ".join(f"{w} {v:g}" for w, v in active.items()))
    for hop, what in ctx.faulty.items():
        counters = snapshot.links.get(hop, {}).get("bytes") or {}
        moved = ", ".join(f"{k} {v:g} B" for k, v in sorted(counters.items()))
        facts.append(f"injected: {what}" + (f" [link bytes {moved}]" if moved else ""))
    if location in snapshot.workers:
        entries = snapshot.ledgers.get(location, [])
        states = [e.get("state", "?") for e in entries if e.get("origin") == origin]
        if states := [state for state in states if state != "ok"]:
            facts.append(tally(f"{location} ledger for {origin}", states))
    notes = Counter(h.note for h in holds if h.holding == location)
    facts += [f"{n} x {note}" for note, n in notes.most_common(3)]
    return facts + client_errors(wedged)


def _detail(snapshot: Snapshot, r: ClientRecord, h: Hold) -> RequestDetail:
    end = float(r.get("finished") or snapshot.taken_at)
    return RequestDetail.of(r, end - float(r.get("created") or end), h.furthest, h.holding, h.note)


def place(
    held: list[tuple[str, str]], origin: str, prefill: list[str], decode: list[str]
) -> tuple[str, dict[str, dict[str, int]]]:
    """From (hop, origin) per wedged request: the hop holding most of ``origin``'s (ties go
    upstream, where the trouble starts; ``none`` without any), and {hop: {origin: n}} in hop
    order."""
    order = {hop: i for i, hop in enumerate(hops_in_order(prefill, decode))}
    stuck: dict[str, dict[str, int]] = {}
    for hop, who in held:
        stuck.setdefault(hop, {}).setdefault(who, 0)
        stuck[hop][who] += 1
    mine = {hop: n[origin] for hop, n in stuck.items() if n.get(origin)}
    rank = sorted(mine, key=lambda hop: (-mine[hop], order.get(hop, len(order))))
    ordered = sorted(stuck.items(), key=lambda kv: order.get(kv[0], len(order)))
    return (rank[0] if rank else "none"), dict(ordered)


def elsewhere(fault: InjectedFault, location: str, prefill: Sequence[str]) -> str | None:
    """Why ``location`` is where ``fault`` wedges by its nature, though it is not the fault's
    hop (a documented exception); None when it is not such a place."""
    alone = fault.kind == "DecodeOnlyRestart" or (
        fault.kind == "Restart" and fault.target.startswith("decode-")
    )
    if alone and location in {f"{fault.target}->{p}" for p in prefill}:
        return ELSEWHERE[fault.kind]
    return None


def scene_faults(scene: object) -> list[InjectedFault]:
    """The injected faults of a scene with a fault set (``scene.faults``); none without."""
    fault_set = getattr(scene, "faults", None)
    return injected_faults(getattr(fault_set, "windows", None) or [])


def _window_start(ctx: Context, faults: Sequence[InjectedFault]) -> float | None:
    """The latest fault's start; a decode-only restart's wedge starts once the decode is back."""
    if not faults:
        return None
    latest = max(faults, key=lambda f: f.started)
    if latest.kind == "DecodeOnlyRestart":
        return max(latest.started, ctx.started.get(latest.target, latest.started))
    return latest.started


def _pool_was_full(r: ClientRecord) -> bool:
    limit, in_use = r.get("pool_limit"), r.get("pool_in_use")
    return limit is not None and in_use is not None and in_use >= limit > 0


def wedged_requests(
    client: list[ClientRecord],
    at: float,
    overdue_after_s: float,
    window_s: float,
    since: float | None,
) -> list[ClientRecord]:
    """Requests pending past ``overdue_after_s`` at ``at`` (since sent, or since created behind
    a full pool), and requests that failed after ``since`` (without it, within ``window_s``)."""
    found = []
    for r in client:
        if r.get("state") == "pending":
            sent = r.get("sent")
            if sent is None and not _pool_was_full(r):
                continue  # the client has not got round to it yet: nothing holds it
            if at - float(sent if sent is not None else r.get("created") or at) > overdue_after_s:
                found.append(r)
        elif r.get("state") in FAILED_STATES and not r.get("cut_by_stop"):
            finished = float(r.get("finished") or 0.0)
            if finished >= (since if since is not None else at - window_s):
                found.append(r)
    return found


def flowing_at(r: ClientRecord, at: float, overdue_after_s: float) -> bool:
    """Whether ``r`` (the record as read after ``at``) was a stream flowing at ``at``: it had
    its first token by then and ended well, neither its wait for that token nor the stream
    after it lasting ``overdue_after_s``. No stretch of it was held; it was only slow."""
    sent, first, end = r.get("sent"), r.get("first_token"), r.get("finished")
    if not r.get("stream") or r.get("state") != "ok":
        return False
    if sent is None or first is None or end is None:
        return False
    waited, streamed = first - sent, end - first
    return first <= at < end and max(waited, streamed) <= overdue_after_s


def locate(
    snapshot: Snapshot,
    origin: str = "harness",
    overdue_after_s: float = 1.0,
    window_s: float = 10.0,
    *,
    faults: Sequence[InjectedFault] = (),
    since: float | None = None,
    at: float | None = None,
) -> Diagnosis:
    """Name the hop holding ``origin``'s wedged requests (``none`` when nothing is wedged), by
    the reference rule above; ``faults`` are the injected faults, ``since`` overrides the start
    of the current fault window. ``at`` judges the wedge as it was at that earlier moment (the
    ledgers read since then are read as of it): the bench scores the blind locator against the
    instant it observed, not the one the ground truth was read at."""
    flowing: set[str] = set()
    if at is not None:
        flowing = {
            r.get("request_id", "") for r in snapshot.client if flowing_at(r, at, overdue_after_s)
        }
        then = (client_as_of(r, at) for r in snapshot.client)
        snapshot = replace(snapshot, client=[r for r in then if r is not None], taken_at=at)
    ctx = Context(snapshot, overdue_after_s, faults, at=at)
    ctx.since = since if since is not None else _window_start(ctx, faults)
    wedged = wedged_requests(snapshot.client, ctx.client_at, overdue_after_s, window_s, ctx.since)
    wedged = [r for r in wedged if r.get("request_id") not in flowing]
    everyone = [(r, h) for r in wedged if (h := classify(ctx, r)) is not None]
    pairs = [(h.holding, r.get("origin", "?")) for r, h in everyone]
    location, stuck = place(pairs, origin, snapshot.prefill, snapshot.decode)
    held = [(r, h) for r, h in everyone if r.get("origin") == origin]
    watchdogs = [
        WatchdogFiring(component=name, **firing)
        for name, state in snapshot.stub_states.items()
        for firing in state.get("firings") or []
    ]
    return Diagnosis(
        location=location,
        origin=origin,
        evidence=_facts(ctx, origin, held, location),
        stuck=stuck,
        red_herrings=red_herrings(snapshot, origin),
        requests=[_detail(snapshot, r, h) for r, h in held[:MAX_DETAILS]],
        wedged=len(held),
        total=sum(1 for r in snapshot.client if r.get("origin") == origin),
        taken_at=snapshot.taken_at,
        overdue_after_s=overdue_after_s,
        watchdogs=watchdogs,
        unanswered=dict(snapshot.unanswered),
    )
