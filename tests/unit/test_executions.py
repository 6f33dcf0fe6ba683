"""Executions counted on hand-made ledgers: attempts per request id (one per bootstrap room),
the workers of each, what counts as executed, and the duplicate-execution error."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_wedge.errors import WedgeError
from pytest_wedge.load import RequestRecord
from pytest_wedge.load.executions import (
    DuplicateExecutionError,
    assert_executed_once,
    count_executions,
    duplicates,
    retry_table,
)

pytestmark = pytest.mark.timeout(30)


def record(rid: str, state: str = "ok", origin: str = "harness") -> RequestRecord:
    r = RequestRecord(request_id=rid, origin=origin, target="http://127.0.0.1:1")
    if state != "pending":
        r.finish(state)  # type: ignore[arg-type]
    return r


def entry(
    rid: str,
    room: int | None,
    state: str,
    at: float,
    *,
    tokens: int = 0,
    origin: str = "harness",
    first_token: bool = False,
    error: str | None = None,
) -> dict[str, Any]:
    t = {"arrived": at}
    if first_token:
        t["first_token"] = at + 0.01
    return {
        "request_id": rid,
        "origin": origin,
        "room": room,
        "state": state,
        "tokens": tokens,
        "error": error,
        "t": t,
    }


def ledgers(prefill: list[dict[str, Any]], decode: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "prefill-0": {"role": "prefill", "entries": prefill},
        "decode-0": {"role": "decode", "entries": decode},
    }


def test_one_attempt_per_request_is_one_execution() -> None:
    led = ledgers(
        [entry("a", 1, "ok", 1.0), entry("b", 2, "ok", 1.1)],
        [
            entry("a", 1, "ok", 1.0, tokens=8, first_token=True),
            entry("b", 2, "ok", 1.1, tokens=8, first_token=True),
        ],
    )
    executions = count_executions([record("a"), record("b")], led, origin="harness")
    assert [e.request_id for e in executions] == ["a", "b"]
    for e in executions:
        assert (len(e.attempts), e.retries, e.executed, e.completed) == (1, 0, 1, 1)
        assert e.workers == ("prefill-0", "decode-0") and e.client_state == "ok"
    assert_executed_once(executions)  # does not raise
    assert retry_table(executions) == "no request was retried"


def test_a_replay_the_decode_had_run_is_a_duplicate_named_with_rooms_and_workers() -> None:
    led = ledgers(
        [
            entry("a", 7, "error", 1.0, error="error_status fault: 500 after the KV hand-over"),
            entry("a", 9, "ok", 1.2),
        ],
        [
            entry("a", 7, "aborted", 1.0, tokens=3, first_token=True),  # cut mid-stream
            entry("a", 9, "ok", 1.2, tokens=8, first_token=True),
        ],
    )
    (execution,) = count_executions([record("a")], led, origin="harness")
    assert execution.rooms == (7, 9) and execution.retries == 1
    # Executed twice (tokens on both attempts) though it ran to completion only once.
    assert (execution.executed, execution.completed, execution.duplicated) == (2, 1, True)
    with pytest.raises(DuplicateExecutionError) as failure:
        assert_executed_once([execution], "harness")
    error = failure.value
    assert isinstance(error, WedgeError) and isinstance(error, AssertionError)
    assert error.headline == "1 harness request id(s) executed more than once: a (2 executions)"
    text = str(error)
    assert "request ids: 1 of harness; 1 retried by the router; 1 executed more than once" in text
    assert "a: 2 attempt(s), 2 executed, 1 ran to completion (client: ok)" in text
    assert (
        "attempt 1, room 7: prefill-0 error [error_status fault: 500 after the KV "
        "hand-over], decode-0 aborted (3 tokens)"
    ) in text
    assert "attempt 2, room 9: prefill-0 ok, decode-0 ok (8 tokens)" in text
    assert "sglang issue #34572" in error.fix
    assert (
        retry_table([execution]) == "a: 2 attempts, rooms 7, 9; workers prefill-0, decode-0; "
        "2 executed"
    )


def test_a_replay_of_an_attempt_no_decode_started_is_a_retry_not_a_duplicate() -> None:
    led = ledgers(
        [entry("a", 7, "error", 1.0), entry("a", 9, "ok", 1.2)],
        [entry("a", 7, "aborted", 1.0), entry("a", 9, "ok", 1.2, tokens=8, first_token=True)],
    )
    executions = count_executions([record("a")], led)
    assert executions[0].retries == 1 and executions[0].executed == 1
    assert duplicates(executions) == []
    assert_executed_once(executions)


def test_attempts_are_ordered_by_arrival_and_split_across_decodes() -> None:
    led = {
        "prefill-0": {
            "role": "prefill",
            "entries": [entry("a", 2, "ok", 2.0), entry("a", 1, "error", 1.0)],
        },
        "decode-0": {"role": "decode", "entries": [entry("a", 1, "aborted", 1.0)]},
        "decode-1": {
            "role": "decode",
            "entries": [entry("a", 2, "ok", 2.0, tokens=4, first_token=True)],
        },
    }
    (execution,) = count_executions([record("a")], led)
    assert execution.rooms == (1, 2)
    assert [a.workers for a in execution.attempts] == [
        ("prefill-0", "decode-0"),
        ("prefill-0", "decode-1"),
    ]
    assert execution.workers == ("prefill-0", "decode-0", "decode-1")


def test_origins_are_kept_apart_and_direct_requests_are_attempts_of_their_own() -> None:
    led = ledgers(
        [],
        [
            entry("s", None, "ok", 1.0, tokens=4, first_token=True, origin="stray-1"),
            entry("a", 3, "ok", 1.0, tokens=4, first_token=True),
        ],
    )
    stray = count_executions([record("s", origin="stray-1")], led, origin="stray-1")
    assert [(e.request_id, e.rooms, e.executed) for e in stray] == [("s", (None,), 1)]
    harness = count_executions([record("a")], led, origin="harness")
    assert [e.request_id for e in harness] == ["a"]


def test_a_request_no_worker_saw_has_no_attempts_and_an_unknown_one_no_client_record() -> None:
    led = ledgers([entry("ghost", 5, "ok", 1.0)], [])
    executions = count_executions([record("lost", state="pending")], led, origin="harness")
    by_id = {e.request_id: e for e in executions}
    assert by_id["lost"].attempts == () and by_id["lost"].client_state == "pending"
    assert by_id["ghost"].client_state is None and by_id["ghost"].origin == "harness"
    assert "no client record" in by_id["ghost"].summary()


def test_many_duplicates_are_listed_eight_at_most_then_named() -> None:
    pre, dec = [], []
    for i in range(10):
        for room, at in ((2 * i, 1.0), (2 * i + 1, 2.0)):
            pre.append(entry(f"r{i}", room, "ok", at))
            dec.append(entry(f"r{i}", room, "ok", at, tokens=2, first_token=True))
    executions = count_executions([record(f"r{i}") for i in range(10)], ledgers(pre, dec))
    with pytest.raises(DuplicateExecutionError) as failure:
        assert_executed_once(executions)
    assert failure.value.headline.endswith("r2 (2 executions) ...")
    assert failure.value.facts["more"] == "r8, r9"


def test_a_snapshot_form_counts_the_same_client_json_and_bare_entry_lists() -> None:
    # diagnostics snapshots keep each worker's entries as a list and the client ledger as JSON.
    pre = [entry("a", 7, "error", 1.0), entry("a", 9, "ok", 1.2)]
    dec = [
        entry("a", 7, "ok", 1.0, tokens=2, first_token=True),
        entry("a", 9, "ok", 1.2, tokens=2, first_token=True),
    ]
    client = [{"request_id": "a", "origin": "harness", "state": "ok"}]
    from_snapshot = count_executions(client, {"prefill-0": pre, "decode-0": dec}, "harness")
    from_handle = count_executions([record("a")], ledgers(pre, dec), "harness")
    assert from_snapshot == from_handle and duplicates(from_snapshot)[0].request_id == "a"
