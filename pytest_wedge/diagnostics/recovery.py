"""Recovery figures around a fault window, from the client ledger alone: the origin's success
rate and latency before, during and after the window, how long until it recovered, and what
was lost. The same figures a user would read off their own client's logs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from pytest_wedge.load.client_ledger import LedgerView, RequestRecord


@dataclass(frozen=True)
class Period:
    """Requests of one origin that were sent within one period."""

    sent: int
    ok: int
    p50_s: float | None
    p99_s: float | None

    @property
    def success_pct(self) -> float | None:
        return None if not self.sent else 100.0 * self.ok / self.sent

    def to_json(self) -> dict[str, float | int | None]:
        return {**asdict(self), "success_pct": self.success_pct}


@dataclass(frozen=True)
class Recovery:
    """Before, during and after one window, and the two recovery times, measured from the
    window's end: the first success sent after it, and the first second whose throughput of
    successes is back to the level before the window."""

    before: Period
    during: Period
    after: Period
    first_success_s: float | None
    throughput_back_s: float | None
    lost: int

    def to_json(self) -> dict[str, object]:
        return {
            "before": self.before.to_json(),
            "during": self.during.to_json(),
            "after": self.after.to_json(),
            "first_success_s": self.first_success_s,
            "throughput_back_s": self.throughput_back_s,
            "lost": self.lost,
        }


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _period(records: Sequence[RequestRecord]) -> Period:
    latencies = [
        r.finished - r.sent
        for r in records
        if r.state == "ok" and r.finished is not None and r.sent is not None
    ]
    return Period(
        sent=len(records),
        ok=sum(1 for r in records if r.state == "ok"),
        p50_s=_quantile(latencies, 0.5),
        p99_s=_quantile(latencies, 0.99),
    )


def _throughput_back(
    successes: Sequence[float], level: float, ended: float, until: float
) -> float | None:
    """Seconds after ``ended`` to the start of the first one-second bin after it that holds
    at least ``level`` successes (finished, by their finish time)."""
    if level <= 0:
        return None
    start = ended
    while start < until:
        if sum(1 for t in successes if start <= t < start + 1.0) >= level:
            return start - ended
        start += 0.25
    return None


def recovery(
    records: Sequence[RequestRecord], started: float, ended: float | None, now: float
) -> Recovery:
    """The figures for one origin's ``records`` around the window ``[started, ended]``
    (``ended`` None: still open at ``now``)."""
    end = ended if ended is not None else now
    sent = [r for r in records if r.sent is not None]
    before = [r for r in sent if (r.sent or 0.0) < started]
    during = [r for r in sent if started <= (r.sent or 0.0) < end]
    after = [r for r in sent if (r.sent or 0.0) >= end]
    successes_after = sorted(
        r.finished for r in after if r.state == "ok" and r.finished is not None
    )
    first_sent_ok = min(((r.sent or end) - end for r in after if r.state == "ok"), default=None)
    ok_before = [r.finished for r in before if r.state == "ok" and r.finished is not None]
    span = (started - min(r.sent or started for r in before)) if before else 0.0
    level = len(ok_before) / span if span >= 1.0 else 0.0
    return Recovery(
        before=_period(before),
        during=_period(during),
        after=_period(after),
        first_success_s=first_sent_ok if ended is not None else None,
        throughput_back_s=(
            _throughput_back(successes_after, level, end, now) if ended is not None else None
        ),
        lost=len(LedgerView(records).lost()),
    )
