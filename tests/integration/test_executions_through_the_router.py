"""Executions counted from the worker ledgers: ``wedge.assert_executed_once`` fails on smg's
replay of requests a decode had already run (sglang issue #34572), naming the request ids and
their attempts, and passes on a healthy run and on a replay that is safe."""

from __future__ import annotations

import re

import pytest

from pytest_wedge.faults import ErrorStatus
from pytest_wedge.load.executions import DuplicateExecutionError

pytestmark = pytest.mark.timeout(90)
AGENTS = 4


def test_a_healthy_run_executes_every_request_once(wedge):
    harness = wedge.harness(agents=AGENTS, rounds=2, max_tokens=8)
    assert harness.wait(30)
    executions = wedge.assert_executed_once("harness")
    assert len(executions) == 2 * AGENTS
    for execution in executions:
        assert (len(execution.attempts), execution.executed, execution.completed) == (1, 1, 1)
        assert execution.workers == ("prefill-0", "decode-0")
        assert execution.client_state == "ok" and execution.retries == 0


def test_a_replay_after_the_kv_hand_over_is_named_with_its_attempts(wedge):
    # The prefill answers 500 after the decode took its KV, late enough for the decode to run
    # the attempt to completion; smg replays each request once with a new room.
    wedge.apply(
        ErrorStatus(
            "prefill-0", origin="harness", first_n=AGENTS, after_kv_taken=True, delay_ms=100
        )
    )
    harness = wedge.harness(agents=AGENTS, rounds=1, max_tokens=8)
    assert harness.wait(30)
    assert wedge.ledger.by_origin("harness").states()["ok"] == AGENTS  # the client saw nothing
    with pytest.raises(DuplicateExecutionError) as failure:
        wedge.assert_executed_once("harness")
    error, text = failure.value, str(failure.value)
    assert isinstance(error, AssertionError)
    assert error.headline.startswith(f"{AGENTS} harness request id(s) executed more than once: ")
    executions = wedge.executions("harness")
    for execution in executions:
        assert execution.request_id in text, text
        assert (execution.retries, execution.executed) == (1, 2)
        first, second = execution.attempts
        assert first.room != second.room
        # Each attempt is named with its room and what every worker did with it.
        assert f"attempt 1, room {first.room}: prefill-0 error" in text, text
        assert f"attempt 2, room {second.room}: prefill-0 ok, decode-0 ok (8 tokens)" in text
    assert re.search(r"request ids: 4 of harness; 4 retried by the router; 4 executed", text)
    assert "#34570" in error.fix and "--disable-retries" in error.fix


def test_a_replay_before_any_decode_ran_is_a_retry_not_a_duplicate(wedge):
    wedge.apply(ErrorStatus("prefill-0", origin="harness", first_n=AGENTS))  # 500 at arrival
    harness = wedge.harness(agents=AGENTS, rounds=1, max_tokens=8)
    assert harness.wait(30)
    executions = wedge.assert_executed_once("harness")
    assert [e.executed for e in executions] == [1] * AGENTS
    # Retried all the same: the first attempt's decode leg never generated.
    assert all(e.retries >= 1 and not e.attempts[0].generated for e in executions)
