"""Where each request went: its waterfall of hops from the client and stub ledgers (the timeline
is a report, not the locator, so it may read the ground truth)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_wedge.diagnostics.diagnosis import Diagnosis
from pytest_wedge.evidence.observed import ClientRecord
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.evidence.truth import LedgerEntry


@dataclass(frozen=True)
class Segment:
    """Time a request spent at one hop (a component or a link)."""

    hop: str
    start: float
    end: float


@dataclass
class RequestRow:
    """One request: its origin, final state and the hops it reached, in order."""

    request_id: str
    origin: str
    state: str
    start: float
    end: float
    segments: list[Segment] = field(default_factory=list)
    wedged: bool = False
    holding: str | None = None
    error: str | None = None


def _latest(entries: list[LedgerEntry]) -> LedgerEntry | None:
    return max(entries, key=lambda e: (e.get("t") or {}).get("arrived", 0.0)) if entries else None


def _latest_each(by_component: dict[str, list[LedgerEntry]]) -> dict[str, LedgerEntry]:
    return {c: last for c, es in by_component.items() if (last := _latest(es)) is not None}


def _by_request(snapshot: Snapshot) -> dict[str, dict[str, list[LedgerEntry]]]:
    found: dict[str, dict[str, list[LedgerEntry]]] = {}
    for component, entries in snapshot.ledgers.items():
        for e in entries:
            found.setdefault(str(e.get("request_id")), {}).setdefault(component, []).append(e)
    return found


def _worker_segments(snapshot: Snapshot, seen: dict[str, LedgerEntry], now: float) -> list[Segment]:
    first = snapshot.prefill[0] if snapshot.prefill else "prefill-0"
    prefill = next((c for c in seen if c in snapshot.prefill), first)
    out: list[Segment] = []
    for component, e in seen.items():
        t = e.get("t") or {}
        stop = float(t.get("finished", now))
        start = float(t.get("arrived", stop))
        if component in snapshot.decode and e.get("room") is not None:
            # A disaggregated decode waits for its KV over the bootstrap link first.
            kv = float(t.get("kv_received", stop))
            out.append(Segment(f"{component}->{prefill}", start, kv))
            start = kv
        out.append(Segment(component, start, stop))
    return out


def client_row(
    record: ClientRecord, seen: dict[str, LedgerEntry], snapshot: Snapshot, holding: str | None
) -> RequestRow:
    """The waterfall of one request our client ledger knows."""
    now = snapshot.taken_at
    created = float(record.get("created") or now)
    end = float(record.get("finished") or now)
    sent = record.get("sent")
    segments = [Segment("client", created, float(sent) if sent else end)]
    arrivals = [float((e.get("t") or {}).get("arrived", end)) for e in seen.values()]
    direct = all(c in snapshot.decode and e.get("room") is None for c, e in seen.items())
    if sent and not (seen and direct):
        segments.append(Segment("router", float(sent), min(arrivals, default=end)))
    segments += _worker_segments(snapshot, seen, now)
    if holding and "->" in holding and sent and holding not in {s.hop for s in segments}:
        # A link that holds the request keeps no ledger: draw the hold there.
        segments.append(Segment(holding, float(sent), end))
    segments.sort(key=lambda s: (s.start, s.end))
    return RequestRow(
        str(record.get("request_id")),
        str(record.get("origin")),
        str(record.get("state")),
        created,
        end,
        segments,
        wedged=holding is not None,
        holding=holding,
        error=record.get("error"),
    )


def worker_only_row(
    request_id: str, by_component: dict[str, list[LedgerEntry]], snapshot: Snapshot
) -> RequestRow:
    """A request no client ledger of ours knows (another process's load): worker side only."""
    seen = _latest_each(by_component)
    segments = _worker_segments(snapshot, seen, snapshot.taken_at)
    segments.sort(key=lambda s: (s.start, s.end))
    some = next(iter(seen.values()))
    return RequestRow(
        request_id,
        str(some.get("origin")),
        str(some.get("state")),
        min(s.start for s in segments),
        max(s.end for s in segments),
        segments,
        error=some.get("error"),
    )


def request_rows(snapshot: Snapshot, diagnosis: Diagnosis | None) -> list[RequestRow]:
    """Every request of the snapshot as a waterfall row, in the order they were created."""
    held = {r.request_id: r.holding for r in (diagnosis.requests if diagnosis else [])}
    found = _by_request(snapshot)
    rows: list[RequestRow] = []
    for record in snapshot.client:
        rid = str(record.get("request_id"))
        rows.append(client_row(record, _latest_each(found.get(rid, {})), snapshot, held.get(rid)))
    known = {str(r.get("request_id")) for r in snapshot.client}
    rows += [worker_only_row(rid, by, snapshot) for rid, by in found.items() if rid not in known]
    return sorted(rows, key=lambda r: r.start)
