"""The client ledger on hand-made records: states, accounting, JSON, the lost-requests error."""

from __future__ import annotations

import threading

import pytest

from pytest_wedge.load import (
    FINAL_STATES,
    ClientLedger,
    FinalStateError,
    LostRequestsError,
    RequestRecord,
    assert_nothing_lost,
    summary_table,
)


def _record(rid: str, origin: str = "harness", **facts: object) -> RequestRecord:
    return RequestRecord(request_id=rid, origin=origin, target="http://127.0.0.1:1", **facts)  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_every_final_state_can_be_set_once_and_only_once() -> None:
    for state in sorted(FINAL_STATES):
        record = _record(f"r-{state}")
        record.finish(state, error="x" * 500, status=200)
        assert record.state == state and record.final and record.finished is not None
        assert record.error is not None and len(record.error) <= 200
        with pytest.raises(FinalStateError, match="already ended"):
            record.finish("ok")
        assert record.state == state
        assert not record.finish_if_pending("unknown")


@pytest.mark.timeout(30)
def test_pending_is_not_a_final_state() -> None:
    with pytest.raises(ValueError, match="not a final state"):
        _record("r").finish("pending")


@pytest.mark.timeout(30)
def test_racing_finishes_leave_exactly_one_final_state() -> None:
    record = _record("race")
    wins: list[str] = []
    barrier = threading.Barrier(8)

    def finish(state: str) -> None:
        barrier.wait()
        if record.finish_if_pending(state):  # type: ignore[arg-type]
            wins.append(state)

    threads = [threading.Thread(target=finish, args=(s,)) for s in ["ok", "unknown"] * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins == [record.state]


@pytest.mark.timeout(30)
def test_duplicate_request_ids_are_refused() -> None:
    ledger = ClientLedger([_record("same")])
    with pytest.raises(ValueError, match="already in this ledger"):
        ledger.add(_record("same"))


def _stopped_ledger() -> ClientLedger:
    ok = _record("harness-a0-r0-t0", sent=1.0)
    ok.finish("ok")
    wedged = _record("harness-a1-r0-t0", sent=2.0, first_byte=2.5)
    wedged.finish_if_pending("unknown")
    stuck = _record("harness-a2-r0-t0")
    stuck.finish_if_pending("aborted")
    still = _record("harness-a3-r0-t0", sent=3.0)
    stray = _record("stray-1-0", origin="stray-1", sent=1.0)
    stray.finish("ok")
    return ClientLedger([ok, wedged, stuck, still, stray])


@pytest.mark.timeout(30)
def test_views_answer_the_accounting_questions() -> None:
    ledger = _stopped_ledger()
    harness = ledger.by_origin("harness")
    assert harness.states() == {
        "pending": 1,
        "ok": 1,
        "error": 0,
        "timeout": 0,
        "aborted": 1,
        "unknown": 1,
    }
    assert [r.request_id for r in harness.pending()] == ["harness-a3-r0-t0"]
    assert [r.request_id for r in harness.lost()] == [
        "harness-a1-r0-t0",
        "harness-a2-r0-t0",
        "harness-a3-r0-t0",
    ]
    assert [r.request_id for r in harness.never_sent()] == ["harness-a2-r0-t0"]
    assert ledger.by_origin("stray-1").lost() == []
    assert ledger.origins() == ["harness", "stray-1"]


@pytest.mark.timeout(30)
def test_json_round_trip_keeps_every_field() -> None:
    ledger = _stopped_ledger()
    again = ClientLedger.from_json(ledger.to_json(indent=2))
    assert [r.to_dict() for r in again.records] == [r.to_dict() for r in ledger.records]
    assert again.by_origin("harness").states() == ledger.by_origin("harness").states()
    with pytest.raises(ValueError, match="client-ledger"):
        ClientLedger.from_json('{"records": []}')


@pytest.mark.timeout(30)
def test_summary_table_is_fixed_width() -> None:
    table = summary_table(_stopped_ledger().records, now=100.0)
    lines = table.splitlines()
    assert lines[0].split() == ["request_id", "origin", "state", "sent?", "first", "byte?", "age"]
    assert "unknown (by stop)" in table
    # Fixed width: every row's second column starts where the header's does.
    column = lines[0].index("origin")
    assert all(line[column - 2 : column] == "  " and line[column] != " " for line in lines)


@pytest.mark.timeout(30)
def test_assert_nothing_lost_names_headline_table_and_fix() -> None:
    ledger = _stopped_ledger()
    with pytest.raises(LostRequestsError) as info:
        assert_nothing_lost(ledger, "harness", last_hop=lambda r: "router")
    text = str(info.value)
    lines = text.splitlines()
    assert lines[0] == "3 harness requests have no final state; 1 never left the client"
    assert lines[1].split()[:3] == ["request_id", "origin", "state"]
    assert "last hop" in lines[1]
    assert sum("harness-a" in line for line in lines) == 3
    assert lines[-1].startswith("To fix this: ")
    assert "close every stream" in lines[-1]
    assert [r.request_id for r in info.value.lost] == [
        "harness-a1-r0-t0",
        "harness-a2-r0-t0",
        "harness-a3-r0-t0",
    ]
    assert isinstance(info.value, AssertionError)


@pytest.mark.timeout(30)
def test_assert_nothing_lost_passes_and_counts_per_origin() -> None:
    ledger = _stopped_ledger()
    assert_nothing_lost(ledger, "stray-1")
    lost = _record("stray-1-1", origin="stray-1", sent=1.0)
    ledger.add(lost)
    with pytest.raises(LostRequestsError) as info:
        assert_nothing_lost(ledger)
    headline = str(info.value).splitlines()[0]
    assert headline.startswith("4 requests have no final state (3 harness, 1 stray-1)")
    single = ClientLedger([_record("one", sent=1.0)])
    with pytest.raises(LostRequestsError, match=r"^1 harness request has no final state\n"):
        assert_nothing_lost(single, "harness")
    with pytest.raises(LostRequestsError, match="the last hop they reached"):
        assert_nothing_lost(single, "harness")
