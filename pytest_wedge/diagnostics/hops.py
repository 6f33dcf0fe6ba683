"""Where one request is held: the oracle's hop-by-hop walk over the ground truth (pure
functions). The worker ledgers say how far a request got, the client ledger whether it left and
what came back; where the ledgers cannot tell a link from its ends, the injected faults and the
runtime's process states decide. Nothing here is shared with the blind locator."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from pytest_wedge.evidence.observed import ClientRecord, not_asked
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.evidence.truth import FaultWindow, LedgerEntry
from pytest_wedge.load.client_ledger import FAILED_STATES

# Our client's own words for a failed connect and a broken connection: load/exchange.py names
# every library failure as httpx does.
NO_CONNECTION = ("ConnectError", "ConnectTimeout")
BROKEN_CONNECTION = ("RemoteProtocolError", "ReadError", "WriteError")
# smg's answer when every worker's breaker is open or unhealthy
# (docs/router-protocol.md, "503 no_available_workers").
REFUSED = "no_available_workers"
# Faults that restart their target: requests it held when it went down are lost with it.
RESTARTS = ("Restart", "DecodeOnlyRestart")
# Why a request that a decode finished a while ago is the client's.
UNREAD = "finished it but the client never read the response (a leaked stream?)"
# A component this fresh was still starting when the request came.
RESTART_SLACK_S = 2.0


def hops_in_order(prefill: list[str], decode: list[str]) -> list[str]:
    """Every hop in the order a request meets it."""
    hops = ["client", "client->router", "router"]
    hops += [h for p in prefill for h in (f"router->{p}", p)]
    hops += [f"{d}->{p}" for d in decode for p in prefill]
    return hops + [h for d in decode for h in (f"router->{d}", d)]


@dataclass(frozen=True)
class InjectedFault:
    """One injected fault as the oracle takes it: its kind (the fault class's name), its hop,
    and its window in wall-clock seconds."""

    kind: str
    target: str
    started: float
    ended: float | None = None

    @classmethod
    def of(cls, window: FaultWindow) -> InjectedFault:
        kind, target = type(window.fault).__name__, str(window.fault.target)
        return cls(kind, target, window.started, window.ended)

    def describe(self) -> str:
        return f"{self.kind} on {self.target}"


def injected_faults(windows: Iterable[FaultWindow]) -> list[InjectedFault]:
    """A fault set's windows (``FaultSet.windows``) as the oracle takes them."""
    return [InjectedFault.of(window) for window in list(windows)]


@dataclass(frozen=True)
class Seen:
    """A worker ledger entry with the worker that wrote it, and the fields the walk reads."""

    component: str
    entry: LedgerEntry
    state: str = "?"
    t: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    room: int | None = None

    @classmethod
    def of(cls, component: str, entry: LedgerEntry) -> Seen:
        stamps, tokens = entry.get("t") or {}, int(entry.get("tokens") or 0)
        return cls(component, entry, entry.get("state", "?"), stamps, tokens, entry.get("room"))

    @property
    def fetch_failed(self) -> bool:
        """A decode that started fetching its KV and failed without it."""
        return self.state == "error" and "transfer_start" in self.t and "kv_received" not in self.t


@dataclass(frozen=True)
class Hold:
    furthest: str
    holding: str
    note: str


def as_of(entry: LedgerEntry, at: float) -> LedgerEntry | None:
    """A worker ledger entry as it was at ``at``: None if it had not arrived yet; without
    the stamps of later steps, and not yet ended if it ended later."""
    stamps = entry.get("t") or {}
    if stamps.get("arrived", 0.0) > at:
        return None
    if all(v <= at for v in stamps.values()):
        return entry
    earlier = {k: v for k, v in stamps.items() if v <= at}
    state = "live" if "finished" not in earlier else entry.get("state", "?")
    error = entry.get("error") if state == entry.get("state") else None
    then: LedgerEntry = {**entry, "t": earlier, "state": state, "error": error}
    return then


class Context:
    """The snapshot indexed for the walk: entries by request id, the injected faults by hop,
    silent and stopped parts."""

    def __init__(
        self,
        snapshot: Snapshot,
        overdue_after_s: float,
        faults: Iterable[InjectedFault] = (),
        since: float | None = None,
        at: float | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.since = since
        self.overdue_after_s = overdue_after_s
        # The client's view was copied first and the worker ledgers are read last (under
        # load, a good while later): the walk reads them as they were at the client's moment,
        # or at ``at``, an earlier moment to judge.
        obs = snapshot.observed
        self.client_at = at if at is not None else obs.client_now if obs else snapshot.taken_at
        self.prefill: dict[str, list[Seen]] = {}
        self.decode: dict[str, list[Seen]] = {}
        for component, entries in snapshot.ledgers.items():
            index = self.prefill if component in snapshot.prefill else self.decode
            for entry in entries:
                seen = as_of(entry, self.client_at)
                if seen is not None:
                    index.setdefault(entry.get("request_id", ""), []).append(
                        Seen.of(component, seen)
                    )
        applied = [f for f in faults if f.started <= self.client_at]
        self.faulty: dict[str, str] = {}
        for fault in applied:
            hops = [fault.target]
            if fault.kind == "DecodeOnlyRestart":  # the prefills' stale transfer state
                hops += [f"{fault.target}->{p}" for p in snapshot.prefill]
            for hop in hops:
                known = self.faulty.get(hop)
                self.faulty[hop] = f"{known}; {fault.describe()}" if known else fault.describe()
        self.silent = {name for name in snapshot.workers if name not in snapshot.ledgers}
        self.not_running = {n: s for n, s in snapshot.components.items() if s != "running"}
        metrics_why = snapshot.unanswered.get("router metrics")
        self.router_silent = metrics_why is not None and not not_asked(metrics_why)
        self.started: dict[str, float] = dict(obs.started) if obs is not None else {}
        for fault in applied:
            if fault.kind in RESTARTS:  # the runtime may not have seen the new process yet
                self.started.setdefault(fault.target, fault.started)

    def restarted(self, record: ClientRecord, names: list[str]) -> str | None:
        """The first of ``names`` that started after ``record`` was sent, or was still coming
        up: its ledger (and the request) is gone, or it was not ready to take it."""
        sent = float(record.get("sent") or record.get("created") or 0.0)
        after = self.since if self.since is not None else sent - RESTART_SLACK_S
        return next((n for n in names if self.started.get(n, 0.0) > after), None)

    def attempt(self, request_id: str) -> tuple[Seen | None, Seen | None]:
        """The live attempt's decode and prefill entries: smg retries reuse the request id with a
        new room; the last decode attempt is live, and its prefill leg shares its room."""
        d = _latest(self.decode.get(request_id))
        if d is None or d.room is None:
            return d, _latest(self.prefill.get(request_id))
        legs = self.prefill.get(request_id, [])
        return d, next((s for s in legs if s.room == d.room), None)

    def refused_fetch(self, d: Seen, p: Seen | None, record: ClientRecord) -> bool:
        """``d`` failed to fetch its KV from ``p`` over a link that shows no fault, from a
        prefill that runs and did not restart: the prefill's bootstrap server refused it."""
        return (
            p is not None
            and d.fetch_failed
            and f"{d.component}->{p.component}" not in self.faulty
            and p.component not in self.not_running
            and self.restarted(record, [p.component]) is None
        )

    def _culprits(self, request_id: str) -> list[str]:
        """The workers that failed attempts of ``request_id`` and still have an engine fault."""
        found = []
        legs = self.prefill.get(request_id, [])
        for seen in self.decode.get(request_id, []):
            if seen.state != "error":
                continue
            leg = next((p for p in legs if p.room == seen.room), None)
            link = f"{seen.component}->{leg.component}" if leg is not None else ""
            if leg is not None and seen.fetch_failed and link not in self.faulty:
                found.append(leg.component)  # its bootstrap server refused the KV fetch
            else:
                found.append(seen.component)
        found += [p.component for p in legs if p.state == "error"]
        states = self.snapshot.stub_states
        return [c for c in found if c in self.faulty or states.get(c, {}).get("faults")]

    def still_failing(self, request_id: str) -> str | None:
        """A worker that failed an attempt of this request and still has an engine fault (the
        breakers opened because of it); for a request refused at once, the worker that failed
        most attempts in the window."""
        own = self._culprits(request_id)
        if own:
            return own[0]
        failed_at: Counter[str] = Counter()
        for request, seen in [*self.decode.items(), *self.prefill.items()]:
            arrived = [s.t.get("arrived", 0.0) for s in seen]
            if self.since is None or max(arrived, default=0.0) >= self.since:
                failed_at.update(self._culprits(request))
        return failed_at.most_common(1)[0][0] if failed_at else None

    def suspect(self, candidates: list[str]) -> str | None:
        """The first candidate hop in trouble: an injected fault on it, a stopped or silent
        component."""
        for hop in candidates:
            if hop in self.faulty or hop in self.not_running or hop in self.silent:
                return hop
        return None

    def lost_among(self, record: ClientRecord, workers: list[str]) -> str:
        """The first of ``workers`` that restarted or shows trouble (or its link), else router."""
        hops = [h for w in workers for h in (f"router->{w}", w)]
        return self.restarted(record, workers) or self.suspect(hops) or "router"

    def on_the_way_back(self, decode: str) -> str | None:
        return self.suspect([f"router->{decode}", "router", "client->router"])


def _latest(seen: list[Seen] | None) -> Seen | None:
    return max(seen, key=lambda s: s.t.get("arrived", 0.0)) if seen else None


def _prefill_stage(seen: Seen) -> str:
    t = seen.t
    if "transfer_start" in t:
        return "kv taken"
    if "kv_ready" in t:
        return "inflight"
    return "prefilling" if "running" in t else "queued"


def _decode_stage(seen: Seen) -> str:
    t = seen.t
    if seen.state == "ok":
        return "ok"
    if "first_token" in t:
        return f"streaming ({seen.tokens} tokens)"
    if "running" in t:
        return "running (no token)"
    if "kv_received" in t or seen.room is None:
        return "queued"
    return "waiting for KV"


def _back_to_client(
    ctx: Context, record: ClientRecord, d: Seen, prefill: str | None
) -> Hold | None:
    """The decode finished; the bytes were lost on the way back (or the router still waits for
    the prefill's answer, which it needs before it answers the client)."""
    decode = d.component
    first = [f"router->{prefill}"] if prefill else []
    hop = ctx.suspect([*first, f"router->{decode}", "router", "client->router"])
    if hop is None and ctx.router_silent:
        hop = "router"
    if hop is not None:
        return Hold(f"{decode} (finished)", hop, f"{decode} finished it; {hop} did not pass it on")
    # Finished a moment ago after holding it long: its bytes are on their way, and what made it
    # overdue is the time the decode held it (a decode serving one request at a time).
    finished, arrived = d.t.get("finished", 0.0), d.t.get("arrived", 0.0)
    on_the_way = ctx.client_at - finished
    if arrived and on_the_way < finished - arrived:
        held = f"held it {finished - arrived:.2f} s and finished it {on_the_way:.2f} s ago"
        return Hold(f"{decode} (finished)", decode, f"{decode} {held}: its bytes are on their way")
    if on_the_way < ctx.overdue_after_s and not record.get("left_unread"):
        # Finished a moment ago and not left unread: a client short of CPU has yet to read it.
        # Nothing holds it; a leaked stream stays unread for longer than a request may take.
        return None
    return Hold(f"{decode} (finished)", "client", f"{decode} {UNREAD}")


def _no_worker(ctx: Context, record: ClientRecord) -> Hold:
    """Sent, and no worker has it: the client->router link or the router holds it."""
    router_links = [f"router->{w}" for w in ctx.snapshot.workers]
    hop = ctx.suspect(["client->router", "router"])
    if hop is None and ctx.router_silent:
        hop = "router"
    if hop is None:
        hop = (
            ctx.restarted(record, ctx.snapshot.workers)
            or ctx.suspect(sorted(ctx.silent))
            or ctx.suspect(router_links)
            or "router"
        )
    what = "no worker ledger has it"
    if record.get("first_byte") is not None:
        what = "a response head came back but no worker ledger has it"
    return Hold("client->router (sent)", hop, what)


def _failed_at_the_front(ctx: Context, record: ClientRecord, error: str) -> Hold | None:
    """A failure the client's connection or the router's refusal explains."""
    status = record.get("status")
    if (status is None or status < 400) and any(c in error for c in BROKEN_CONNECTION):
        # The worker ledgers only show where the request was when its connection was cut
        # (the router then aborts both legs); the cut itself is the client<->router hop's. A
        # faulty client->router link is a cut for certain, so it comes before a router restart
        # within the slack, which may have been over before the request was sent.
        cut = (
            ctx.suspect(["client->router"])
            or ctx.restarted(record, ["router"])
            or ctx.suspect(["router"])
        )
        if cut is None:
            cut = "router" if ctx.router_silent else "client->router"
        return Hold("client->router (sent)", cut, f"connection to the router broke: {error[:60]}")
    if REFUSED in error:
        # The router refused the last attempt; earlier ones in the ledgers say why the breakers
        # opened: the router holds it unless what failed them is failing still.
        snap = ctx.snapshot
        after_router = hops_in_order(snap.prefill, snap.decode)[3:]
        request_id = record.get("request_id", "")
        hop = ctx.suspect(after_router) or ctx.still_failing(request_id) or "router"
        return Hold("router (refused)", hop, f"the router refused it: {error[:60]}")
    return None


def _prefill_only(ctx: Context, record: ClientRecord, p: Seen) -> Hold:
    stage = _prefill_stage(p)
    if stage in ("queued", "prefilling") and p.state != "ok":
        return Hold(f"{p.component} ({stage})", p.component, f"{p.component}: {stage}")
    lost = ctx.lost_among(record, ctx.snapshot.decode)
    has = f"{p.component} has the KV ({p.state})"
    return Hold(f"{p.component} ({stage})", lost, f"{has}; no decode ledger has the request")


def _waiting_for_kv(ctx: Context, record: ClientRecord, d: Seen, p: Seen | None) -> Hold:
    where = f"{d.component} (waiting for KV)"
    if "BlockingBootstrapCall" in ctx.faulty.get(d.component, ""):
        # Its scheduler loop is held by a call to a prefill: no transfer of it moves.
        return Hold(where, d.component, f"{d.component}'s loop is held by a bootstrap call")
    if p is None:
        gap = ctx.lost_among(record, ctx.snapshot.prefill)
        return Hold(where, gap, f"{d.component} waits for KV; no prefill ledger has the request")
    pstage = _prefill_stage(p)
    link = f"{d.component}->{p.component}"
    if d.state == "aborted":  # its own request was cut: by whatever is on the way back
        back = ctx.on_the_way_back(d.component)
        if back is not None:
            return Hold(where, back, f"{d.component}'s request was cut; {back} shows trouble")
    if d.state == "error":  # the decode gave up on the transfer: it failed on the link
        why = str(d.entry.get("error"))[:60]
        return Hold(where, link, f"{d.component} failed the KV transfer: {why}")
    if pstage in ("queued", "prefilling"):
        cut = ctx.suspect([f"router->{p.component}"])
        if cut is not None and record.get("state") in FAILED_STATES:
            # It failed while the prefill still had it: the router's request to it was cut.
            why = f"it failed while {p.component} was {pstage}; {cut} shows trouble"
            return Hold(f"{p.component} ({pstage})", cut, why)
        waits = f"{p.component}: {pstage}; {d.component} waits for its KV"
        return Hold(f"{p.component} ({pstage})", p.component, waits)
    kv = f"{p.component} KV {pstage} ({p.state})"
    return Hold(where, link, f"{kv}; {d.component} still waits for it")


def _slow_transfer(ctx: Context, d: Seen, p: Seen) -> str | None:
    """The KV came, late: the decode waited for it, after the prefill had it ready, longer than
    the request has spent since. A slow link passes its requests on; they are overdue for the
    time the transfer took, not where they are now."""
    asked, got = d.t.get("transfer_start"), d.t.get("kv_received")
    if asked is None or got is None:
        return None
    waited = got - max(asked, p.t.get("kv_ready", asked))
    # Nor can a wait shorter than half the time a request may take make it overdue: a request
    # that got its KV at once and then broke on another hop is held there.
    if waited <= ctx.client_at - got or waited < ctx.overdue_after_s / 2:
        return None
    return f"{d.component} waited {waited:.1f} s for its KV after {p.component} had it ready"


def _at_decode(
    ctx: Context, record: ClientRecord, d: Seen, p: Seen | None, failed: bool
) -> Hold | None:
    stage = _decode_stage(d)
    where = f"{d.component} ({stage})"
    if p is not None and ctx.refused_fetch(d, p, record):
        return Hold(where, p.component, f"{p.component}'s bootstrap server refused the KV fetch")
    if stage == "waiting for KV":
        return _waiting_for_kv(ctx, record, d, p)
    if p is not None and (slow := _slow_transfer(ctx, d, p)) is not None:
        return Hold(where, f"{d.component}->{p.component}", slow)
    if stage == "ok":
        return _back_to_client(ctx, record, d, p.component if p else None)
    client_tokens = int(record.get("tokens") or 0)
    if d.tokens > client_tokens + 1 and record.get("state") == "pending":
        # The decode produced more than the client got: the bytes are stuck on the way back.
        back = ctx.on_the_way_back(d.component)
        if back is not None:
            sent = f"{d.component} sent {d.tokens} tokens, client got {client_tokens}"
            return Hold(where, back, sent)
    if d.state in ("ok", "aborted", "error", "released") or failed:
        # The decode let go of it (or the client did); what holds it is on the way back.
        back = ctx.on_the_way_back(d.component)
        if back is not None:
            return Hold(where, back, f"{d.component} ended it ({d.state}); {back} shows trouble")
    return Hold(where, d.component, f"{d.component}: {stage}, state {d.state}")


def classify(ctx: Context, record: ClientRecord) -> Hold | None:
    """The furthest hop ``record`` reached and the hop that holds it; None when nothing holds
    it (finished a moment ago, on its way to a client that has yet to read it)."""
    error = record.get("error") or ""
    failed = record.get("state") in FAILED_STATES
    if record.get("sent") is None:
        if failed and any(c in error for c in NO_CONNECTION):
            hop = ctx.suspect(["client->router", "router"]) or "client->router"
            return Hold("client", hop, f"could not connect: {error[:80]}")
        return Hold("client", "client", "never left the client (waiting for a connection)")
    if failed and (hold := _failed_at_the_front(ctx, record, error)) is not None:
        return hold
    d, p = ctx.attempt(record.get("request_id", ""))
    if d is not None:
        return _at_decode(ctx, record, d, p, failed)
    if p is not None:
        return _prefill_only(ctx, record, p)
    return _no_worker(ctx, record)
