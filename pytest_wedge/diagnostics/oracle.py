"""The oracle: which hop holds one origin's wedged requests, from the ground truth (stub
ledgers, toxics, the runtime's view). It scores the blind locator. The wedged requests are the
client's, read as the blind locator reads them; each is walked hop by hop over the ledgers
(hops.py). Other origins' tokens and requests are red herrings."""

from __future__ import annotations

from collections import Counter

from pytest_wedge.diagnostics.blind.clientside import wedged
from pytest_wedge.diagnostics.diagnosis import Diagnosis, RequestDetail, WatchdogFiring, place
from pytest_wedge.diagnostics.hops import Context, Hold, classify
from pytest_wedge.evidence.observed import ClientRecord
from pytest_wedge.evidence.snapshot import Snapshot

MAX_DETAILS = 500
MIN_RATE_WINDOW_S = 0.15
WHY_NOT_RUNNING = {
    "paused": "paused (SIGSTOP: TCP still accepts, nothing answers)",
    "exited": "exited",
    "absent": "absent (not started)",
}


def wedged_records(
    snapshot: Snapshot, overdue_after_s: float, window_s: float, since: float | None = None
) -> list[ClientRecord]:
    """The client ledger's wedged requests: both locators see the same client."""
    now = snapshot.observed.client_now if snapshot.observed is not None else snapshot.taken_at
    return wedged(snapshot.client, now, overdue_after_s, window_s, since).wedged


def origin_rates(snapshot: Snapshot, component: str, window_s: float = 0.5) -> dict[str, float]:
    """Tokens per second by origin: from two samples of the stub's cumulative counters (timed
    by their own ``at`` when they have it) when far enough apart, else from the ledger entries
    over the last ``window_s``."""
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
    now, start = snapshot.taken_at, snapshot.taken_at - window_s
    rates: dict[str, float] = {}
    for e in snapshot.ledgers.get(component, []):
        t, tokens = e.get("t") or {}, int(e.get("tokens") or 0)
        first = t.get("first_token")
        if not tokens or first is None:
            continue
        end = t.get("finished", now)
        per_s = tokens / max(end - first, 1e-3)
        overlap = max(0.0, min(end, now) - max(first, start))
        origin = e.get("origin", "?")
        rates[origin] = rates.get(origin, 0.0) + per_s * overlap / window_s
    return rates


def red_herrings(snapshot: Snapshot, origin: str) -> list[str]:
    herrings = []
    for component in snapshot.workers:
        rates = origin_rates(snapshot, component)
        active = Counter(
            e.get("origin", "?")
            for e in snapshot.ledgers.get(component, [])
            if e.get("state") not in ("ok", "error", "aborted", "released")
        )
        others = {
            o
            for o in set(rates) | set(active)
            if o != origin and (rates.get(o, 0.0) >= 0.5 or active.get(o, 0))
        }
        if not others:
            continue
        total = sum(rates.values())
        parts = []
        if total >= 0.5:
            share = ", ".join(
                f"{100 * rates.get(o, 0.0) / total:.0f} % {o}"
                for o in sorted(others, key=lambda o: -rates.get(o, 0.0))
            )
            parts.append(
                f"{component} generating {total:.0f} tok/s, {share} "
                f"({origin}: {rates.get(origin, 0.0):.0f} tok/s)"
            )
        else:
            parts.append(f"{component} busy")
        mine = active.get(origin, 0)
        busy = ", ".join(f"{o} {active[o]}" for o in sorted(others) if active.get(o))
        if busy:
            parts.append(
                f"active requests: {busy}"
                + (f", {origin} {mine}" if mine else f", none of {origin}")
            )
        gauge = snapshot.stub_metrics.get(component, {}).get("num_running_reqs")
        if gauge:
            parts.append(f"num_running_reqs={gauge:g} counts them too")
        herrings.append("; ".join(parts) + f" (other origins' activity, not progress of {origin})")
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
    snapshot: Snapshot,
    ctx: Context,
    origin: str,
    mine: list[ClientRecord],
    wedged: list[ClientRecord],
    holds: list[Hold],
    location: str,
) -> list[str]:
    sent = sum(1 for r in mine if r.get("sent") is not None)
    failed = sum(1 for r in wedged if r.get("state") != "pending")
    facts = [
        f"{len(mine)} {origin} requests: {sent} sent, {len(mine) - sent} never left the "
        f"client; {len(wedged) - failed} overdue, {failed} failed recently"
    ]
    if wedged:
        facts.append(_reach(ctx, wedged, snapshot.workers))
        where = Counter(h.holding for h in holds)
        facts.append("held at: " + ", ".join(f"{hop} {n}" for hop, n in where.most_common()))
    for name, state in ctx.not_running.items():
        facts.append(f"{name} process {WHY_NOT_RUNNING.get(state, state)}")
    facts += [f"{what} {why}" for what, why in sorted(snapshot.unanswered.items())]
    active = snapshot.router.get("requests_active")
    if active:
        facts.append("router in-flight: " + ", ".join(f"{w} {v:g}" for w, v in active.items()))
    for name, why in ctx.link_faults.items():
        counters = snapshot.links.get(name, {}).get("bytes") or {}
        moved = ", ".join(f"{k} {v:g} B" for k, v in sorted(counters.items()))
        facts.append(f"link {name}: {why}" + (f" [bytes {moved}]" if moved else ""))
    if location in snapshot.workers:
        held = Counter(
            e.get("state", "?")
            for e in snapshot.ledgers.get(location, [])
            if e.get("origin") == origin and e.get("state") != "ok"
        )
        if held:
            facts.append(
                f"{location} ledger for {origin}: "
                + ", ".join(f"{s} {n}" for s, n in held.most_common())
            )
    notes = Counter(h.note for h in holds if h.holding == location)
    facts += [f"{n} x {note}" for note, n in notes.most_common(3)]
    errors = Counter(str(r.get("error"))[:120] for r in wedged if r.get("error"))
    facts += [f"client error ({n} x): {text}" for text, n in errors.most_common(2)]
    return facts


def _detail(snapshot: Snapshot, r: ClientRecord, h: Hold) -> RequestDetail:
    end = float(r.get("finished") or snapshot.taken_at)
    return RequestDetail(
        request_id=r.get("request_id", "?"),
        origin=r.get("origin", "?"),
        state=r.get("state", "?"),
        age_s=round(end - float(r.get("created") or end), 3),
        furthest=h.furthest,
        holding=h.holding,
        note=h.note,
    )


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
    held = [
        (r, classify(ctx, r)) for r in wedged_records(snapshot, overdue_after_s, window_s, since)
    ]
    pairs = [(h.holding, r.get("origin", "?")) for r, h in held]
    location, stuck = place(pairs, origin, snapshot.prefill, snapshot.decode)
    holds = [(r, h) for r, h in held if r.get("origin") == origin]
    mine = [r for r in snapshot.client if r.get("origin") == origin]
    wedged = [r for r, _ in holds]
    watchdogs = [
        WatchdogFiring(component=name, **firing)
        for name, state in snapshot.stub_states.items()
        for firing in state.get("firings") or []
    ]
    return Diagnosis(
        location=location,
        origin=origin,
        evidence=_facts(snapshot, ctx, origin, mine, wedged, [h for _, h in holds], location),
        stuck=stuck,
        red_herrings=red_herrings(snapshot, origin),
        requests=[_detail(snapshot, r, h) for r, h in holds[:MAX_DETAILS]],
        wedged=len(wedged),
        total=len(mine),
        taken_at=snapshot.taken_at,
        overdue_after_s=overdue_after_s,
        watchdogs=watchdogs,
        unanswered=dict(snapshot.unanswered),
    )
