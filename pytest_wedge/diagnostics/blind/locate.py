"""The blind locator, a pure function of :class:`Observed`: the client ledger says which
requests are wedged and how far each got (``clientside``); the rules (``rules``, ``failures``)
place each group wedged the same way; the location is the hop holding most of the origin's.
Nothing tells it when the wedge began: the onset is the client's own first request of the
episode (``clientside.wedged``), and the counters were compared from a sample before then."""

from __future__ import annotations

from collections import Counter
from fnmatch import fnmatch

from pytest_wedge.diagnostics.blind.clientside import (
    Phase,
    Window,
    load_key,
    phase,
    pools,
    time_to_head,
    wedged,
)
from pytest_wedge.diagnostics.blind.failures import held_failed
from pytest_wedge.diagnostics.blind.origins import red_herrings, split_line
from pytest_wedge.diagnostics.blind.rules import held_direct, held_stream, held_upstream
from pytest_wedge.diagnostics.blind.servers import (
    ANSWERS_HEALTH,
    ANSWERS_ONLY_HEALTH,
    CARRIES_HEALTH,
    CERTAIN,
    LIKELY,
    UNKNOWN,
    Servers,
    Verdict,
)
from pytest_wedge.diagnostics.diagnosis import (
    MAX_DETAILS,
    RESTART_SLACK_S,
    Diagnosis,
    RequestDetail,
    client_errors,
    count_line,
    place,
    tally,
)
from pytest_wedge.evidence.observed import ANSI_ESCAPES, ClientRecord, Observed

# How a group of wedged requests got where it is: sent straight to a worker (its name), or
# the phase it reached through the router.
Key = str | Phase
Held = tuple[ClientRecord, str, Key]  # a request of the origin, the hop holding it, its group


def _key(obs: Observed, r: ClientRecord, now: float, overdue_after_s: float) -> Key:
    target = obs.named_url(r.get("target") or "")
    if target is not None and target in obs.worker_names:
        return target
    return phase(r, now, overdue_after_s)


def _verdict(s: Servers, key: Key, records: list[ClientRecord], n: int, pool: str) -> Verdict:
    """Where the rules place ``records`` (``n`` of them the origin's); ``pool``: their load's
    connection pool, as ``(used, limit)``."""
    if isinstance(key, str):
        return held_direct(s, key)
    if key.kind == "unsent":
        why = f"{load_key(records[0])}: its connection pool is exhausted ({pool})"
        return Verdict(
            "client",
            CERTAIN,
            [f"{why} and {n} requests wait for a connection: the client holds them"],
        )
    if key.kind == "no answer":
        if (refused := _refused_unread(s.obs, n)) is not None:
            v = held_failed(s, refused, n, s.since)
            v.because.append(
                f"the router's refusals in the window ({refused.status} {refused.code}) "
                f"outnumber those our client read by {n} or more: the answers to these {n}, "
                "not read yet"
            )
            return v
        return held_upstream(s, n)
    if key.kind == "failed":
        return held_failed(s, key, n, s.since)
    return held_stream(s, key.kind, n, client_rate(records, s.obs.client_now))


def _refused_unread(obs: Observed, n: int) -> Phase | None:
    """The router refused at least ``n`` requests in the window beyond those the client read
    (a client short of CPU reads its answers late): ``n`` sent and without an answer were
    refused, and why the router refuses is the wedge."""
    since = obs.traffic_before_at  # when the router's counters were read before the wedge
    if since is None or not obs.router_before:  # counts since the router started: no window
        return None
    for label, grew in obs.router_grew("refusals").items():
        status, _, code = label.partition(" ")
        if not status.isdigit():
            continue
        read = sum(
            1
            for r in obs.client
            if r.get("status") == int(status) and (r.get("finished") or 0.0) >= since
        )
        if grew - read >= n:
            return Phase("failed", "status", int(status), code)
    return None


def client_rate(records: list[ClientRecord], now: float) -> float:
    """The median tokens per second each of ``records`` received since its first token, up to
    now for a stream still open: a stream whose first token came alone a while ago is slow,
    not as fast as one token over the instant its bytes took."""
    rates = sorted(
        int(r.get("tokens") or 0) / max(1e-3, float(r.get("finished") or now) - first)
        for r in records
        if (first := r.get("first_token")) is not None
    )
    return rates[len(rates) // 2] if rates else 0.0


def _describe(key: Key) -> str:
    if isinstance(key, str):
        return f"sent straight to {key}"
    return {
        "unsent": "never left the client",
        "no answer": "sent, no response head",
        "head only": "response head, no data",
        "stalled": "stream stalled",
        "slow": "streaming slowly",
    }.get(key.kind, f"failed ({key.detail}" + (f" {key.status}" if key.status else "") + ")")


def _facts(
    s: Servers, origin: str, win: Window, mine: list[ClientRecord], wedged_mine: list[Held]
) -> list[str]:
    obs = s.obs
    wedged = [r for r, _, _ in wedged_mine]
    line = count_line(origin, mine, wedged, "in the window")
    if win.not_sent_yet.get(origin):
        unsent = "not sent yet (no sign of an exhausted pool: not a wedge)"
        line += f"; {win.not_sent_yet[origin]} {unsent}"
    if win.earlier.get(origin):
        line += f"; {win.earlier[origin]} failed before the current window (set aside)"
    facts = [line]
    if win.starts is not None:
        ago = obs.client_now - win.starts
        facts.append(f"onset {ago:.1f} s ago: the episode's first request was sent then (client)")
    if wedged_mine:
        facts.append(tally("how far they got", (_describe(k) for _, _, k in wedged_mine)))
        facts.append(tally("held at", (hop for _, hop, _ in wedged_mine)))
    facts.append(s.router_line())
    for name, state in sorted(obs.processes.items()):
        if state != "running":
            facts.append(f"{name} process {state}")
    facts += [f"{what} {why}" for what, why in sorted(obs.unanswered.items())]
    for w in s.workers.values():
        if w.held or w.in_flight:
            facts.append(w.load_line())
        if w.cb_open:
            facts.append(f"{w.name}: breaker open (smg_worker_cb_state=1)")
        if not w.router_healthy:
            facts.append(f"{w.name}: router marks it unhealthy (smg_worker_health=0)")
    if refused := sorted(obs.router_grew("refusals").items()):
        facts.append(
            "router refusals in the window: " + ", ".join(f"{k} +{v:g}" for k, v in refused)
        )
    facts += [gap for link in obs.link_names if (gap := s.swallowed_line(link)) is not None]
    for load, (used, limit) in pools(mine).items():
        if limit is not None:
            facts.append(f"{load}: {used} of {limit} pool connections in use")
    return facts + client_errors(wedged)


def log_line(obs: Observed, component: str) -> str | None:
    """The last warning or error in ``component``'s log tail (secondary evidence)."""
    for line in reversed(obs.logs.get(component, [])):
        plain = ANSI_ESCAPES.sub("", line)
        if any(level in plain for level in ("ERROR", "WARN", "Traceback", "error")):
            return f"{component} log: {plain.strip()[:200]}"
    return None


def _group(
    obs: Observed, origin: str, overdue_after_s: float, win: Window
) -> tuple[dict[Key, Verdict], list[Held]]:
    """Group the wedged requests by how far they got, and ask the rules where each group is
    held: the verdicts, and every wedged request with its hop and group."""
    now = obs.client_now
    by_pool = pools(obs.client)
    groups: dict[Key, list[ClientRecord]] = {}
    for r in win.wedged:
        groups.setdefault(_key(obs, r, now, overdue_after_s), []).append(r)
    verdicts: dict[Key, Verdict] = {}
    held: list[Held] = []
    for key, records in groups.items():
        ours = sum(1 for r in records if r.get("origin") == origin)
        onset = min(float(r.get("sent") or r.get("created") or now) for r in records)
        # A restart counts when it came in the episode, or shortly before its first request.
        starts = min(onset, win.starts if win.starts is not None else onset) - RESTART_SLACK_S
        # Until the oldest of them was overdue, a healthy stack could still be moving them
        # along: an engine sample from before then cannot show whether a gauge holds them.
        held_from = onset + overdue_after_s
        used, limit = by_pool.get(load_key(records[0]), (0, None))
        pool = f"{used} of {limit} connections in use"
        young = _still_moving(key, records, obs, overdue_after_s)
        s = Servers(
            obs, held_from, since=starts, onset=min(onset, win.starts or onset), young=young
        )
        verdict = _verdict(s, key, records, ours or len(records), pool)
        verdicts[key] = _earned(verdict, young or _still_streaming(key))
        held += [(r, verdict.hop, key) for r in records]
    return verdicts, held


def _reach_s(obs: Observed, overdue_after_s: float, window_s: float = 30.0) -> tuple[float, str]:
    """How long a request needs to reach the hop that answers its head, at this load: measured
    on the client's own requests through the router answered lately; with none to measure on,
    three quarters of the overdue clock (the client's stated patience is all that is known)."""
    through_router = [
        r for r in obs.client if obs.named_url(r.get("target") or "") not in obs.worker_names
    ]
    took = time_to_head(through_router, obs.client_now, window_s)
    if took is None:
        return 0.75 * overdue_after_s, f"no answer in the last {window_s:g} s to measure it on"
    return took, "the 90th percentile of the client's recent requests' time to response head"


def _still_moving(
    key: Key, records: list[ClientRecord], obs: Observed, overdue_after_s: float
) -> str | None:
    """Why pending requests may still be on their way (None once they have waited twice the
    time a request needs to reach its hop at this load): before that a healthy but loaded
    stack could still be moving them along, and what the servers show of them proves nothing
    yet."""
    if isinstance(key, str) or key.kind in ("failed", "unsent"):
        return None
    now = obs.client_now
    ages = sorted(now - float(r.get("sent") or now) for r in records)
    waited = ages[len(ages) // 2]
    reach, how = _reach_s(obs, overdue_after_s)
    if waited >= 2 * reach:
        return None
    pending = f"they have waited {waited:.2f} s (median), under twice the {reach:.2f} s"
    return f"{pending} a request needs to reach it ({how})"


def _still_streaming(key: Key) -> str | None:
    """Why streams whose bytes still arrive may not be held at all: a stream that had a byte
    within the overdue bound may yet end well, only slowly, and the moment shows no more."""
    if isinstance(key, Phase) and key.kind == "slow":
        return "their streams still receive bytes (the last within the overdue bound)"
    return None


def _earned(verdict: Verdict, young: str | None) -> Verdict:
    """``certain`` on pending requests only once they may no longer be on their way or still
    streaming (``young``: why they may be, from :func:`_still_moving` or
    :func:`_still_streaming`)."""
    if verdict.confidence == CERTAIN and young is not None:
        verdict.because.append(f"not certain yet: {young}")
        verdict.confidence = LIKELY
    return verdict


def _consistent(location: str, confidence: str, ruled_out: list[str]) -> tuple[str, list[str]]:
    """A verdict never names a hop its own report rules out. A line that only cleared the hop
    of being cut off or dead (it carries /health) is dropped; one that cleared it of holding
    requests is dropped too, and the verdict it argued against is not ``certain``."""
    against = [line for line in ruled_out if fnmatch(location, line.split(": ", 1)[0])]
    soft = (CARRIES_HEALTH, ANSWERS_HEALTH, ANSWERS_ONLY_HEALTH)
    hard = [line for line in against if not line.endswith(soft)]
    kept = [line for line in ruled_out if line not in against]
    return (LIKELY if hard and confidence == CERTAIN else confidence), kept


def _detail(r: ClientRecord, hop: str, key: Key, verdict: Verdict, now: float) -> RequestDetail:
    age = float(r.get("finished") or now) - float(r.get("sent") or r.get("created") or now)
    return RequestDetail.of(r, age, _describe(key), hop, (verdict.because or [""])[0][:120])


def locate_blind(
    obs: Observed,
    origin: str = "harness",
    overdue_after_s: float = 1.0,
    *,
    window_s: float = 10.0,
) -> Diagnosis:
    """The hop holding ``origin``'s wedged requests from what an operator observes (``none``
    without any); failures that ended before the episode's onset belong to an earlier one."""
    now = obs.client_now
    win = wedged(obs.client, now, overdue_after_s, window_s, origin)
    verdicts, everyone = _group(obs, origin, overdue_after_s, win)
    pairs = [(hop, r.get("origin", "?")) for r, hop, _ in everyone]
    location, stuck = place(pairs, origin, obs.prefill, obs.decode)
    # A group whose hop cannot be told (a 4xx naming no component) does not outvote, or win a
    # tie against, one whose hop can: it is shown under ``stuck``, and located only alone.
    told = [
        (hop, r.get("origin", "?")) for r, hop, k in everyone if verdicts[k].confidence != UNKNOWN
    ]
    if any(who == origin for _, who in told):
        location, _ = place(told, origin, obs.prefill, obs.decode)
    held = [h for h in everyone if h[0].get("origin") == origin]
    best = Verdict("none", CERTAIN, [])
    if held:
        at = Counter(k for _, hop, k in held if hop == location)
        best = verdicts[at.most_common(1)[0][0]]
    confidence = best.confidence
    if confidence == CERTAIN and sum(hop == location for _, hop, _ in held) * 3 < 2 * len(held):
        confidence = LIKELY  # another hop holds a good share of them too
    confidence, ruled_out = _consistent(location, confidence, list(best.ruled_out))
    s = Servers(obs)
    mine = [r for r in obs.client if r.get("origin") == origin]
    evidence = _facts(s, origin, win, mine, held)
    if (split := split_line(s, location, origin)) is not None:
        evidence.append(split)
    near = {location.split("->")[-1], "router"} if location != "none" else set()
    for component in sorted(near & {"router", *obs.worker_names}):
        if (line := log_line(obs, component)) is not None:
            evidence.append(line)
    return Diagnosis(
        location=location,
        origin=origin,
        evidence=evidence,
        stuck=stuck,
        red_herrings=red_herrings(s, origin),
        requests=[_detail(r, hop, k, verdicts[k], now) for r, hop, k in held[:MAX_DETAILS]],
        wedged=len(held),
        total=len(mine),
        taken_at=now,
        overdue_after_s=overdue_after_s,
        unanswered=dict(obs.unanswered),
        confidence=confidence,
        decided_by=list(best.because),
        ruled_out=ruled_out,
        locator="blind",
        window_start=win.starts,
    )
