"""Recovery figures around a fault window, from the client ledger alone."""

from __future__ import annotations

from pytest_wedge.diagnostics.recovery import recovery
from pytest_wedge.load.client_ledger import RequestRecord

T0 = 1000.0


def request(n: int, sent: float, took: float | None, state: str = "ok") -> RequestRecord:
    record = RequestRecord(f"h-{n}", "harness", "router", created=sent, sent=sent)
    if took is not None:
        record.finish(state, error=None if state == "ok" else "x")  # type: ignore[arg-type]
        record.finished = sent + took
    return record


def test_before_during_and_after_a_window_and_the_time_to_recover() -> None:
    # Four successes a second for 4 s, a 3 s window in which everything fails, then recovery.
    before = [request(i, T0 + i * 0.25, 0.1) for i in range(16)]
    during = [request(100 + i, T0 + 4 + i * 0.5, 2.0, "error") for i in range(6)]
    after = [request(200 + i, T0 + 7.5 + i * 0.25, 0.2) for i in range(12)]
    figures = recovery([*before, *during, *after], T0 + 4, T0 + 7, now=T0 + 11)
    assert (figures.before.sent, figures.before.ok, figures.before.success_pct) == (16, 16, 100.0)
    assert figures.before.p50_s is not None and abs(figures.before.p50_s - 0.1) < 1e-9
    assert (figures.during.sent, figures.during.success_pct) == (6, 0.0)
    assert figures.during.p50_s is None  # no success, no latency
    assert figures.after.success_pct == 100.0 and figures.lost == 0
    assert figures.first_success_s == 0.5
    # Four successes a second again from the bin starting 0.5 s after the window.
    assert figures.throughput_back_s is not None and 0.5 <= figures.throughput_back_s <= 1.0


def test_an_open_window_has_no_recovery_yet_and_pending_requests_are_lost() -> None:
    records = [request(1, T0 - 2, 0.1), request(2, T0 + 1, None)]
    figures = recovery(records, T0, None, now=T0 + 5)
    assert figures.first_success_s is None and figures.throughput_back_s is None
    assert figures.during.sent == 1 and figures.lost == 1
    assert figures.to_json()["during"] == {
        "sent": 1,
        "ok": 0,
        "p50_s": None,
        "p99_s": None,
        "success_pct": 0.0,
    }
