"""The lost-requests check: ``assert_nothing_lost``, its error, and the table it prints."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable

from pytest_wedge.load.client_ledger import ClientLedger, RequestRecord


def _when(ts: float | None, since: float) -> str:
    return "-" if ts is None else f"+{ts - since:.2f}s"


def summary_table(
    records: Iterable[RequestRecord],
    *,
    now: float | None = None,
    last_hop: Callable[[RequestRecord], str] | None = None,
) -> str:
    """Fixed-width text table; sent/first byte are shown as offsets from creation, the age on
    the overdue clock (since sent), or how long a request not sent yet has waited."""
    now = now or time.time()
    header = ["request_id", "origin", "state", "sent?", "first byte?", "age"]
    if last_hop is not None:
        header.append("last hop")
    rows = [header]
    for r in records:
        state = f"{r.state} (by stop)" if r.cut_by_stop else r.state
        row = [
            r.request_id,
            r.origin,
            state,
            _when(r.sent, r.created),
            _when(r.first_byte, r.created),
            f"{r.age(now):.1f}s" if r.sent is not None else f"not sent ({r.waited(now):.1f}s)",
        ]
        if last_hop is not None:
            row.append(last_hop(r))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


class LostRequestsError(AssertionError):
    """Some requests never reached a final state. Carries them for the diagnostics layer."""

    def __init__(self, message: str, lost: list[RequestRecord]) -> None:
        super().__init__(message)
        self.lost = lost


def lost_headline(lost: list[RequestRecord], origin: str | None) -> str:
    count = len(lost)
    noun = "request has" if count == 1 else "requests have"
    who = f"{origin} " if origin is not None else ""
    by_origin = Counter(r.origin for r in lost)
    mix = ""
    if origin is None and len(by_origin) > 1:
        mix = " (" + ", ".join(f"{n} {o}" for o, n in sorted(by_origin.items())) + ")"
    unsent = sum(1 for r in lost if r.sent is None)
    detail = f"; {unsent} never left the client" if unsent else ""
    return f"{count} {who}{noun} no final state{mix}{detail}"


def _fix_hint(lost: list[RequestRecord]) -> str:
    if any(r.sent is None for r in lost):
        return (
            "requests that never left the client point at the client itself, a connection "
            "pool exhausted by streams that were never closed or a lock held across a call: "
            "close every stream (`async with client.stream(...)`) and give every request a "
            "total deadline, so that each ends as ok, error or timeout."
        )
    return (
        "find the hop that holds them (the last hop they reached, in the wedge report) and "
        "give that hop's watchdog, or the client, a deadline shorter than the test's, so that "
        "every request ends as ok, error or timeout."
    )


def assert_nothing_lost(
    ledger: ClientLedger,
    origin: str | None = None,
    *,
    last_hop: Callable[[RequestRecord], str] | None = None,
) -> None:
    """Raise :class:`LostRequestsError` if any request (of ``origin``) has no final state of
    its own. Call it after the load has stopped."""
    view = ledger.by_origin(origin) if origin is not None else ledger.view()
    lost = view.lost()
    if not lost:
        return
    message = "\n".join(
        [
            lost_headline(lost, origin),
            summary_table(lost, last_hop=last_hop),
            f"To fix this: {_fix_hint(lost)}",
        ]
    )
    raise LostRequestsError(message, lost)
