"""The oracle: which hop holds the overdue requests of one origin, read from the ground truth
(stub ledgers, toxic configurations, the runtime's view). Pure: snapshot in, answer out.

It scores the blind locator (:mod:`pytest_wedge.diagnostics.blind`), which reads only what an
operator observes. Rules, in order (see hops.py for the per-request walk):
- The origin's *wedged* requests are those pending for longer than ``overdue_after_s`` since
  they were sent, and those that ended in error, timeout or unknown within the last
  ``window_s`` and after ``since`` (a link that is down fails requests fast; they are wedged
  all the same); without ``since``, failures that ended before the oldest request stuck now
  was sent belong to an earlier window. A request that was never sent counts only when its
  load's connection pool is exhausted: otherwise it is merely not sent yet.
- Each wedged request is walked hop by hop over the joined client and worker ledgers; the
  location is the hop holding most of them (ties go to the upstream hop).
- Activity is attributed to origins, never read in aggregate: tokens and active requests of
  any other origin are reported as red herrings, not as progress.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pytest_wedge.diagnostics.blind.clientside import wedged
from pytest_wedge.diagnostics.diagnosis import Diagnosis, RequestDetail
from pytest_wedge.diagnostics.hops import Context, Hold, classify, hop_order
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
) -> list[dict[str, Any]]:
    """The client ledger's wedged requests, read as the blind locator reads them (the client
    is ours: both locators see the same client; they differ on the servers)."""
    now = snapshot.observed.client_now if snapshot.observed is not None else snapshot.taken_at
    return wedged(snapshot.client, now, overdue_after_s, window_s, since).wedged


def origin_rates(snapshot: Snapshot, component: str, window_s: float = 0.5) -> dict[str, float]:
    """Tokens per second by origin: from two samples of the cumulative counters when they are
    far enough apart, else estimated from the ledger entries over the last ``window_s``. Two
    states that say when the stub took them (``at``) are timed by that: a streamed state can be
    an interval older than the sample that carries it."""
    state_after = snapshot.stub_states.get(component, {})
    state_before = snapshot.stub_states_before.get(component, {})
    after, before = state_after.get("tokens_by_origin"), state_before.get("tokens_by_origin")
    at_after, at_before = state_after.get("at"), state_before.get("at")
    if isinstance(at_after, int | float) and isinstance(at_before, int | float):
        dt = at_after - at_before
    else:
        dt = snapshot.taken_at - (snapshot.before_at or snapshot.taken_at)
    if after is not None and before is not None and dt >= MIN_RATE_WINDOW_S:
        return {o: max(0.0, (n - before.get(o, 0)) / dt) for o, n in after.items()}
    now, start = snapshot.taken_at, snapshot.taken_at - window_s
    rates: Counter[str] = Counter()
    for e in snapshot.ledgers.get(component, []):
        t, tokens = e.get("t") or {}, int(e.get("tokens") or 0)
        first = t.get("first_token")
        if not tokens or first is None:
            continue
        end = t.get("finished", now)
        per_s = tokens / max(end - first, 1e-3)
        overlap = max(0.0, min(end, now) - max(first, start))
        rates[str(e.get("origin"))] += per_s * overlap / window_s
    return dict(rates)


def red_herrings(snapshot: Snapshot, origin: str) -> list[str]:
    herrings = []
    for component in snapshot.workers:
        rates = origin_rates(snapshot, component)
        active = Counter(
            str(e.get("origin"))
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


def _reach(ctx: Context, wedged: list[dict[str, Any]], workers: list[str]) -> str:
    reached = Counter(
        s.component
        for r in wedged
        for index in (ctx.prefill, ctx.decode)
        for s in index.get(str(r.get("request_id")), [])[-1:]
    )
    if not any(reached.values()):
        return f"0 of them reached {' or '.join(workers)}"
    return "of them, " + ", ".join(f"{reached.get(w, 0)} reached {w}" for w in workers)


def _facts(
    snapshot: Snapshot,
    ctx: Context,
    origin: str,
    mine: list[dict[str, Any]],
    wedged: list[dict[str, Any]],
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
            str(e.get("state"))
            for e in snapshot.ledgers.get(location, [])
            if e.get("origin") == origin and e.get("state") not in ("ok",)
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


def _detail(snapshot: Snapshot, r: dict[str, Any], h: Hold) -> RequestDetail:
    end = float(r.get("finished") or snapshot.taken_at)
    return RequestDetail(
        request_id=str(r.get("request_id")),
        origin=str(r.get("origin")),
        state=str(r.get("state")),
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
    order = {hop: i for i, hop in enumerate(hop_order(snapshot))}
    everyone = wedged_records(snapshot, overdue_after_s, window_s, since)
    stuck: dict[str, dict[str, int]] = {}
    holds: list[tuple[dict[str, Any], Hold]] = []
    for record in everyone:
        hold = classify(ctx, record)
        by_origin = stuck.setdefault(hold.holding, {})
        by_origin[str(record.get("origin"))] = by_origin.get(str(record.get("origin")), 0) + 1
        if record.get("origin") == origin:
            holds.append((record, hold))
    counts = Counter(h.holding for _, h in holds)
    location = "none"
    if counts:
        location = min(counts, key=lambda hop: (-counts[hop], order.get(hop, len(order))))
    mine = [r for r in snapshot.client if r.get("origin") == origin]
    wedged = [r for r, _ in holds]
    details = [_detail(snapshot, r, h) for r, h in holds[:MAX_DETAILS]]
    watchdogs = [
        {"component": name, **firing}
        for name, state in snapshot.stub_states.items()
        for firing in state.get("firings") or []
    ]
    return Diagnosis(
        location=location,
        origin=origin,
        evidence=_facts(snapshot, ctx, origin, mine, wedged, [h for _, h in holds], location),
        stuck=dict(sorted(stuck.items(), key=lambda kv: order.get(kv[0], len(order)))),
        red_herrings=red_herrings(snapshot, origin),
        requests=details,
        wedged=len(wedged),
        total=len(mine),
        taken_at=snapshot.taken_at,
        overdue_after_s=overdue_after_s,
        watchdogs=watchdogs,
        unanswered=dict(snapshot.unanswered),
    )
