"""Where one request is held: the hop-by-hop walk of design.md step 5, as pure functions.

A request's path is client -> client->router -> router -> (router->prefill-i -> prefill-i,
router->decode-j -> decode-j) -> decode-j->prefill-i (KV) -> decode-j -> back to the client.
The worker ledgers say how far it got; the client ledger says whether it left the client and
what came back. Links and processes only break ties the ledgers cannot (a request no worker
saw is held either by the client->router link or by the router).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pytest_wedge.evidence.snapshot import Snapshot

Entry = dict[str, Any]
CONNECT_ERRORS = (
    "ConnectError",
    "onnection refused",
    "All connection attempts failed",
    "ConnectTimeout",
)
# The client's connection to the router broke (as opposed to an HTTP answer or a deadline).
BROKEN_CONNECTION = (
    *CONNECT_ERRORS,
    "RemoteProtocolError",
    "ReadError",
    "WriteError",
    "Server disconnected",
    "onnection reset",
)
FAILED = frozenset({"error", "timeout", "unknown"})
RESTART_SLACK_S = 2.0  # a component this fresh was still starting when the request came


@dataclass(frozen=True)
class Seen:
    """A worker ledger entry with the worker that wrote it."""

    component: str
    entry: Entry

    @property
    def state(self) -> str:
        return str(self.entry.get("state", "?"))

    @property
    def t(self) -> dict[str, float]:
        stamps: dict[str, float] = self.entry.get("t") or {}
        return stamps

    @property
    def tokens(self) -> int:
        return int(self.entry.get("tokens") or 0)


@dataclass(frozen=True)
class Hold:
    furthest: str
    holding: str
    note: str


def hop_order(snapshot: Snapshot) -> list[str]:
    """Every hop in the order a request meets it: upstream first (used to break ties)."""
    hops = ["client", "client->router", "router"]
    hops += [h for p in snapshot.prefill for h in (f"router->{p}", p)]
    hops += [f"{d}->{p}" for d in snapshot.decode for p in snapshot.prefill]
    hops += [h for d in snapshot.decode for h in (f"router->{d}", d)]
    return hops


def as_of(entry: Entry, at: float) -> Entry | None:
    """A worker ledger entry as it was at ``at``: None if it had not arrived yet; without
    the stamps of later steps, and not yet ended if it ended later."""
    stamps: dict[str, float] = entry.get("t") or {}
    if stamps.get("arrived", 0.0) > at:
        return None
    if all(v <= at for v in stamps.values()):
        return entry
    earlier = {k: v for k, v in stamps.items() if v <= at}
    state = "live" if "finished" not in earlier else entry.get("state")
    return {
        **entry,
        "t": earlier,
        "state": state,
        "error": entry.get("error") if state == entry.get("state") else None,
    }


def describe_link(info: dict[str, Any]) -> str | None:
    """What is wrong with a link, or None when it is enabled and has no toxic."""
    parts = [] if info.get("enabled", True) else ["disabled (down)"]
    for toxic in info.get("toxics") or []:
        attrs = ", ".join(f"{k}={v}" for k, v in sorted((toxic.get("attributes") or {}).items()))
        parts.append(f"toxic {toxic.get('type')} on {toxic.get('stream')} ({attrs})")
    return "; ".join(parts) or None


class Context:
    """The snapshot indexed for the walk: entries by request id, faulty links, silent parts."""

    def __init__(self, snapshot: Snapshot, since: float | None = None) -> None:
        self.snapshot = snapshot
        self.since = since
        # The client's view was copied first and the worker ledgers are read last (under
        # load, a good while later): the walk reads them as they were at the client's moment.
        self.client_at = (
            snapshot.observed.client_now if snapshot.observed is not None else snapshot.taken_at
        )
        self.prefill: dict[str, list[Seen]] = {}
        self.decode: dict[str, list[Seen]] = {}
        for component, entries in snapshot.ledgers.items():
            index = self.prefill if component in snapshot.prefill else self.decode
            for entry in entries:
                seen = as_of(entry, self.client_at)
                if seen is not None:
                    index.setdefault(str(entry.get("request_id")), []).append(Seen(component, seen))
        self.link_faults = {
            name: why
            for name, info in snapshot.links.items()
            if (why := describe_link(info)) is not None
        }
        self.silent = {name for name in snapshot.workers if name not in snapshot.ledgers}
        self.not_running = {n: s for n, s in snapshot.components.items() if s != "running"}
        self.router_silent = "router metrics" in snapshot.unanswered
        started = snapshot.observed.started if snapshot.observed is not None else {}
        self.started: dict[str, float] = dict(started)

    def restarted(self, record: dict[str, Any], names: list[str]) -> str | None:
        """The first of ``names`` whose process started after ``record`` was sent, or so
        shortly before it that it was still coming up: its ledger (and the request with it)
        is gone, or it was not ready to take it."""
        sent = float(record.get("sent") or record.get("created") or 0.0)
        after = self.since if self.since is not None else sent - RESTART_SLACK_S
        return next((n for n in names if self.started.get(n, 0.0) > after), None)

    def latest(self, index: dict[str, list[Seen]], request_id: str) -> Seen | None:
        # smg retries send the same request id with a new room: the last attempt is the live one.
        seen = index.get(request_id)
        return max(seen, key=lambda s: s.t.get("arrived", 0.0)) if seen else None

    def _culprits(self, request_id: str) -> list[str]:
        """The workers that failed attempts of ``request_id`` and still have an engine fault."""
        found = []
        for seen in self.decode.get(request_id, []):
            if seen.state != "error":
                continue
            culprit = seen.component
            if "prefill answered" in str(seen.entry.get("error") or ""):
                culprit = next(
                    (
                        p.component
                        for p in self.prefill.get(request_id, [])
                        if p.entry.get("room") == seen.entry.get("room")
                    ),
                    culprit,
                )
            found.append(culprit)
        found += [p.component for p in self.prefill.get(request_id, []) if p.state == "error"]
        return [c for c in found if self.snapshot.stub_states.get(c, {}).get("faults")]

    def still_failing(self, request_id: str) -> str | None:
        """A worker that failed an earlier attempt of this request and still has an engine
        fault on: the router's breakers opened because of it, and it would fail them again.
        A request the router refused at once had no attempt of its own: then the worker that
        failed most attempts of any request in the window (which opened the breakers)."""
        own = self._culprits(request_id)
        if own:
            return own[0]
        failed_at: Counter[str] = Counter()
        for request, seen in [*self.decode.items(), *self.prefill.items()]:
            arrived = [s.t.get("arrived", 0.0) for s in seen]
            if self.since is None or max(arrived, default=0.0) >= self.since:
                failed_at.update(self._culprits(request))
        return failed_at.most_common(1)[0][0] if failed_at else None

    def router_stopped(self) -> bool:
        return "router" in self.not_running

    def suspect(self, candidates: list[str]) -> str | None:
        """The first candidate hop with observable trouble: a faulty link, a stopped or
        silent component."""
        for hop in candidates:
            if hop in self.link_faults or hop in self.not_running or hop in self.silent:
                return hop
        return None


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
    if "kv_received" in t or seen.entry.get("room") is None:
        return "queued"
    return "waiting for KV"


def _back_to_client(ctx: Context, decode: str, prefill: str | None) -> Hold:
    """The decode finished; the bytes were lost on the way back (or the router still waits for
    the prefill's answer, which it needs before it answers the client)."""
    first = [f"router->{prefill}"] if prefill else []
    hop = ctx.suspect([*first, f"router->{decode}", "router", "client->router"])
    if hop is None and ctx.router_silent:
        hop = "router"
    if hop is not None:
        return Hold(f"{decode} (finished)", hop, f"{decode} finished it; {hop} did not pass it on")
    return Hold(
        f"{decode} (finished)",
        "client",
        f"{decode} finished it but the client never read the response (a leaked stream?)",
    )


def _no_worker(ctx: Context, record: dict[str, Any]) -> Hold:
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


def classify(ctx: Context, record: dict[str, Any]) -> Hold:
    """The furthest hop ``record`` reached and the hop that holds it."""
    request_id = str(record.get("request_id"))
    error = str(record.get("error") or "")
    failed = record.get("state") in FAILED
    if record.get("sent") is None:
        if failed and any(c in error for c in CONNECT_ERRORS):
            return Hold("client", "client->router", f"could not connect: {error[:80]}")
        return Hold("client", "client", "never left the client (waiting for a connection)")
    if failed and not error.startswith("HTTP ") and any(c in error for c in BROKEN_CONNECTION):
        # The worker ledgers only show where the request was when its connection was cut
        # (the router then aborts both legs); the cut itself is the client<->router hop's.
        cut = ctx.restarted(record, ["router"]) or ctx.suspect(["client->router", "router"])
        if cut is None:
            cut = "router" if ctx.router_silent else "client->router"
        return Hold("client->router (sent)", cut, f"connection to the router broke: {error[:60]}")
    if failed and "no_available_workers" in error:
        # The last attempt never left the router: it refused (breakers open or workers marked
        # unhealthy). Earlier attempts in the ledgers say why the breakers opened: the router
        # holds it unless what failed them is failing still.
        hop = ctx.suspect(hop_order(ctx.snapshot)[3:]) or ctx.still_failing(request_id) or "router"
        return Hold("router (refused)", hop, f"the router refused it: {error[:60]}")
    d = ctx.latest(ctx.decode, request_id)
    p = ctx.latest(ctx.prefill, request_id)
    if d is not None and d.entry.get("room") is not None:
        # The prefill leg of the decode's own attempt (same room), not an earlier attempt's.
        p = next(
            (
                s
                for s in ctx.prefill.get(request_id, [])
                if s.entry.get("room") == d.entry.get("room")
            ),
            None,
        )
    if p is None and d is None:
        return _no_worker(ctx, record)
    if d is None:
        assert p is not None
        stage = _prefill_stage(p)
        if stage in ("queued", "prefilling") and p.state not in ("ok",):
            return Hold(f"{p.component} ({stage})", p.component, f"{p.component}: {stage}")
        decodes = ctx.snapshot.decode
        lost = (
            ctx.restarted(record, decodes)
            or ctx.suspect([h for dd in decodes for h in (f"router->{dd}", dd)])
            or "router"
        )
        return Hold(
            f"{p.component} ({stage})",
            lost,
            f"{p.component} has the KV ({p.state}); no decode ledger has the request",
        )
    stage = _decode_stage(d)
    where = f"{d.component} ({stage})"
    if d.state == "error" and "prefill answered" in str(d.entry.get("error") or "") and p:
        return Hold(where, p.component, f"{p.component}'s bootstrap server refused the KV fetch")
    if stage == "waiting for KV":
        if p is None:
            prefills = ctx.snapshot.prefill
            gap = (
                ctx.restarted(record, prefills)
                or ctx.suspect([h for pp in prefills for h in (f"router->{pp}", pp)])
                or "router"
            )
            return Hold(
                where, gap, f"{d.component} waits for KV; no prefill ledger has the request"
            )
        pstage = _prefill_stage(p)
        link = f"{d.component}->{p.component}"
        if d.state == "aborted":  # its own request was cut: by whatever is on the way back
            back = ctx.suspect([f"router->{d.component}", "router", "client->router"])
            if back is not None:
                return Hold(where, back, f"{d.component}'s request was cut; {back} shows trouble")
        if d.state == "error":  # the decode gave up on the transfer: it failed on the link
            return Hold(
                where,
                link,
                f"{d.component} failed the KV transfer: {str(d.entry.get('error'))[:60]}",
            )
        if pstage in ("queued", "prefilling"):
            return Hold(
                f"{p.component} ({pstage})",
                p.component,
                f"{p.component}: {pstage}; {d.component} waits for its KV",
            )
        return Hold(
            where, link, f"{p.component} KV {pstage} ({p.state}); {d.component} still waits for it"
        )
    if stage == "ok":
        return _back_to_client(ctx, d.component, p.component if p else None)
    client_tokens = int(record.get("tokens") or 0)
    if d.tokens > client_tokens + 1 and record.get("state") == "pending":
        # The decode produced more than the client got: the bytes are stuck on the way back.
        back = ctx.suspect([f"router->{d.component}", "router", "client->router"])
        if back is not None:
            return Hold(
                where, back, f"{d.component} sent {d.tokens} tokens, client got {client_tokens}"
            )
    if d.state in ("ok", "aborted", "error", "released") or failed:
        # The decode let go of it (or the client did); what holds it is on the way back.
        back = ctx.suspect([f"router->{d.component}", "router", "client->router"])
        if back is not None:
            return Hold(where, back, f"{d.component} ended it ({d.state}); {back} shows trouble")
    return Hold(where, d.component, f"{d.component}: {stage}, state {d.state}")
