"""The oracle: which hop holds one origin's wedged requests, from the ground truth (stub
ledgers, toxics, the runtime's view); it scores the blind locator. Each wedged request of the
client is walked over the ledgers (hops.py); other origins' activity is a red herring."""

from __future__ import annotations

from collections import Counter

from pytest_wedge.diagnostics.blind.clientside import wedged
from pytest_wedge.diagnostics.diagnosis import (
    MAX_DETAILS,
    Diagnosis,
    RequestDetail,
    WatchdogFiring,
    client_errors,
    count_line,
    herring,
    other_origins,
    place,
    tally,
    window_rate,
)
from pytest_wedge.diagnostics.hops import Context, Hold, classify
from pytest_wedge.evidence.observed import ClientRecord
from pytest_wedge.evidence.snapshot import MIN_RATE_WINDOW_S, Snapshot

ENDED = ("ok", "error", "aborted", "released")
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
    for name, why in ctx.link_faults.items():
        counters = snapshot.links.get(name, {}).get("bytes") or {}
        moved = ", ".join(f"{k} {v:g} B" for k, v in sorted(counters.items()))
        facts.append(f"link {name}: {why}" + (f" [bytes {moved}]" if moved else ""))
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


def locate(
    snapshot: Snapshot,
    origin: str = "harness",
    overdue_after_s: float = 1.0,
    window_s: float = 10.0,
    *,
    since: float | None = None,
) -> Diagnosis:
    """Name the hop holding ``origin``'s wedged requests (``none`` when nothing is wedged);
    failures that ended before ``since`` (the current fault window's start) are left out."""
    ctx = Context(snapshot, since)
    win = wedged(snapshot.client, ctx.client_at, overdue_after_s, window_s, since)
    everyone = [(r, classify(ctx, r)) for r in win.wedged]
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
