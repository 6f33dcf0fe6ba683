"""Who a worker's activity belongs to, without its ledger: the router's share is its per-worker
in-flight gauge, the client ledger knows what it sent straight to a worker, and whatever is left
came from someone this client does not know."""

from __future__ import annotations

from collections import Counter

from pytest_wedge.diagnostics.blind.servers import Servers, direct_records, received_rates
from pytest_wedge.diagnostics.diagnosis import herring, other_origins

RECENT_S = 3.0  # a direct request answered this recently is still the worker's activity


def red_herrings(s: Servers, origin: str) -> list[str]:
    """Each worker's activity that is not ``origin``'s progress, attributed where possible."""
    obs, now = s.obs, s.obs.client_now
    direct = direct_records(obs)
    mine = received_rates([r for r in obs.client if r.get("origin") == origin], now)
    window = obs.rate_window_s()
    out = []
    for name, w in s.workers.items():
        records = direct.get(name, [])
        pending = Counter(r.get("origin", "?") for r in records if r.get("state") == "pending")
        # A prefill answers a direct request at once (one token or none): its sender shows
        # as requests answered lately, not as a rate or as requests in flight.
        recent = Counter(
            r.get("origin", "?")
            for r in records
            if r.get("state") != "pending" and now - float(r.get("finished") or 0.0) <= RECENT_S
        )
        rates = received_rates(records, now)
        others = other_origins(origin, rates, pending + recent)
        busy = obs.workers.get(name, {})
        unknown = w.held - w.in_flight - sum(pending.values())  # what held in both samples
        if not others and unknown < 1:
            continue
        grew = obs.delta(name, "generation_tokens")
        total = (
            grew / window if grew is not None and window > 0 else busy.get("gen_throughput", 0.0)
        )
        parts = [
            f"{name} generating {total:.0f} tok/s (sglang:generation_tokens), "
            f"{busy.get('num_running_reqs', 0.0):g} running"
        ]
        for o in others:
            parts.append(
                f"the client ledger has {o} sending straight to {name} (not through the "
                f"router): {pending.get(o, 0)} in flight, {recent.get(o, 0)} answered in the "
                f"last {RECENT_S:g} s, {rates.get(o, 0.0):.0f} tok/s "
                f"received"
            )
        parts.append(
            f"the router has {w.in_flight:g} in flight to it ({origin}: "
            f"{mine.get(origin, 0.0):.0f} tok/s received)"
        )
        if unknown >= 1:
            parts.append(
                f"{unknown:g} of its requests came neither through the router nor from "
                f"this client: their origin cannot be told from here"
            )
        out.append(herring(parts, origin))
    return out


def split_line(s: Servers, location: str, origin: str) -> str | None:
    """How the located worker's load splits by origin, or a plain statement that it cannot."""
    w = s.workers.get(location)
    if w is None:
        return None
    obs = s.obs
    via_router = Counter(
        r.get("origin", "?")
        for r in obs.client
        if r.get("state") == "pending" and obs.named_url(r.get("target") or "") not in s.workers
    )
    direct = f"; {w.direct} were sent to it directly" if w.direct else ""
    if set(via_router) <= {origin}:
        return (
            f"origins at {location}: the router's {w.in_flight:g} in flight are {origin}'s "
            f"(the only origin with requests pending through the router){direct}"
        )
    mix = ", ".join(f"{o} {n}" for o, n in sorted(via_router.items()))
    return (
        f"origins at {location}: the router's {w.in_flight:g} in flight cannot be split by "
        f"origin from here (pending through the router: {mix}){direct}"
    )
