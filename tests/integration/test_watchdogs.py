"""Watchdog checks: each kind clears its wedge within budget, and fails plainly when it can't."""

from __future__ import annotations

import time

import pytest

from pytest_wedge.faults import DecodeOnlyRestart, PinOnAbort, StallAfterTokens
from pytest_wedge.load import Aborter
from pytest_wedge.watchdogs import (
    CoRestartWatchdog,
    InflightPinWatchdog,
    NotClearedError,
    RequestTimeout,
    StreamBodyStallTimeout,
)

pytestmark = pytest.mark.timeout(60)
REQUEST_TIMEOUT = pytest.mark.wedge(router_args=["--request-timeout-secs", "2"])
STREAM_BODY_STALL = pytest.mark.wedge(router_args=["--stream-body-stall-timeout-secs", "1"])
SLOW_PREFILL_ONE_SLOT = pytest.mark.wedge(stub={"prefill_ms_per_token": 20.0, "max_running": 1})
FAST_BREAKER = pytest.mark.wedge(router_args=["--cb-timeout-duration-secs", "1"])


def half_open_streams(wedge):
    wedge.apply(StallAfterTokens("decode-0", tokens=3))
    wedge.harness(agents=5, rounds=1, client_timeout_s=30)


@REQUEST_TIMEOUT
def test_the_budget_runs_from_the_first_request_sent_when_the_client_is_late(wedge):
    # A loaded CI runner can take seconds to send its first request after the fault; the
    # watchdog cannot act on a wedge that holds nothing yet, so that time is not its budget.
    late_client_s = 2.0
    with wedge.expect_cleared(
        within_s=3.5, watchdogs=[RequestTimeout(2)], require_recovery=False
    ) as check:
        wedge.apply(StallAfterTokens("decode-0", tokens=3))
        time.sleep(late_client_s)  # the client is late on purpose: nothing to wait for
        wedge.harness(agents=5, rounds=1, client_timeout_s=30)
    fault_at = wedge.faults.windows[-1].started
    first_sent = min(r.sent for r in wedge.ledger.by_origin("harness") if r.sent is not None)
    assert first_sent - fault_at >= late_client_s
    assert check.onset == first_sent
    assert check.time_to_clear_s is not None and 1.9 <= check.time_to_clear_s <= 3.5


@REQUEST_TIMEOUT
def test_router_request_timeout_clears_half_open_streams_within_budget(wedge):
    with wedge.expect_cleared(
        within_s=3.5, watchdogs=[RequestTimeout(2)], require_recovery=False
    ) as check:
        half_open_streams(wedge)
    assert 1.9 <= check.time_to_clear_s <= 3.5
    assert check.watchdog_rows[0]["fired"] is True
    assert {r.state for r in wedge.ledger.by_origin("harness")} == {"error"}
    wedge.assert_nothing_lost("harness")


@REQUEST_TIMEOUT
def test_router_request_timeout_fails_a_budget_below_what_it_can_do(wedge):
    with (
        pytest.raises(NotClearedError) as failure,
        wedge.expect_cleared(within_s=1.0, watchdogs=[RequestTimeout(2)], require_recovery=False),
    ):
        half_open_streams(wedge)
    message = str(failure.value)
    assert "The harness wedge was not cleared within 1 s" in message
    assert "still stuck: 5 harness requests" in message
    assert "router --request-timeout-secs 2: armed, did not fire" in message
    assert "located at: decode-0" in message


@STREAM_BODY_STALL
def test_stream_body_stall_timeout_does_not_clear_a_stalled_decode(wedge):
    with (
        pytest.raises(NotClearedError) as failure,
        wedge.expect_cleared(
            within_s=2.5, watchdogs=[StreamBodyStallTimeout(1)], require_recovery=False
        ),
    ):
        half_open_streams(wedge)
    assert "router --stream-body-stall-timeout-secs 1: armed, did not fire" in str(failure.value)
    assert all(r.state == "pending" and r.tokens == 3 for r in wedge.ledger.by_origin("harness"))


def pinned_prefill(wedge):
    wedge.apply(PinOnAbort())
    long_prompt = {"messages": [{"role": "user", "content": "x" * 400}]}
    aborter = Aborter(
        wedge.url, count=1, abort_after_s=0.2, ledger=wedge.ledger, extra_body=long_prompt
    )
    wedge.track(aborter).start()
    assert aborter.wait(10)
    # With one running slot, every later request queues behind the pinned one.
    wedge.harness(agents=3, rounds=1, client_timeout_s=30)


@SLOW_PREFILL_ONE_SLOT
def test_inflight_pin_watchdog_clears_an_abort_pin_within_budget(wedge):
    with wedge.expect_cleared(within_s=4.0, watchdogs=[InflightPinWatchdog(0.5)]) as check:
        pinned_prefill(wedge)
    assert check.watchdog_rows[0]["fired"] is True
    assert wedge.ledger.by_origin("harness").states()["ok"] == 3
    wedge.assert_nothing_lost("harness")


@SLOW_PREFILL_ONE_SLOT
def test_inflight_pin_watchdog_fails_a_budget_below_its_threshold(wedge):
    with (
        pytest.raises(NotClearedError, match=r"not cleared within 0\.3 s"),
        wedge.expect_cleared(within_s=0.3, watchdogs=[InflightPinWatchdog(2.0)]),
    ):
        pinned_prefill(wedge)


def transfer_wedge(wedge):
    assert wedge.harness(agents=1, rounds=1, origin="warmup").wait(10)
    wedge.apply(DecodeOnlyRestart("decode-0"))
    wedge.harness(agents=3, rounds=1, client_timeout_s=30)


@FAST_BREAKER
def test_reference_co_restart_watchdog_clears_a_decode_only_restart(wedge):
    watchdog = CoRestartWatchdog(overdue_after_s=0.5)
    with wedge.expect_cleared(within_s=8.0, watchdogs=[watchdog]) as check:
        transfer_wedge(wedge)
    row = check.watchdog_rows[0]
    assert row["fired"] and "co-restarted decode-0" in row["detail"]
    assert "decode-0->prefill-0" in row["detail"]
    wedge.assert_nothing_lost("harness")


@FAST_BREAKER
def test_co_restart_watchdog_fails_a_budget_below_what_it_can_do(wedge):
    with (
        pytest.raises(NotClearedError) as failure,
        wedge.expect_cleared(within_s=0.3, watchdogs=[CoRestartWatchdog(overdue_after_s=0.5)]),
    ):
        transfer_wedge(wedge)
    assert "not cleared within 0.3 s" in str(failure.value)


RELEASE_PIN_SCRIPT = """
import json, os, urllib.request
url = os.environ["WEDGE_PREFILL_0_URL"]
state = json.load(urllib.request.urlopen(url + "/control/state", timeout=2))
if state["inflight"] and not state["running"]:
    body = json.dumps({"inflight_pin_s": 0.1}).encode()
    request = urllib.request.Request(url + "/control/watchdogs", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=2)
    print("switched on prefill-0's in-flight pin release")
"""


@SLOW_PREFILL_ONE_SLOT
def test_an_external_command_can_be_the_watchdog(wedge):
    import sys

    from pytest_wedge.watchdogs import CommandWatchdog

    watchdog = CommandWatchdog([sys.executable, "-c", RELEASE_PIN_SCRIPT], interval_s=0.3)
    with wedge.expect_cleared(within_s=6.0, watchdogs=[watchdog]) as check:
        pinned_prefill(wedge)
    row = check.watchdog_rows[0]
    assert row["fired"] and "pin release" in row["detail"]
    wedge.assert_nothing_lost("harness")


@FAST_BREAKER  # the streams the restart breaks open smg's breaker on decode-0
def test_an_acting_no_progress_watchdog_clears_a_stall_and_is_reported_as_acting(wedge):
    """No progress for 3 s -> co-restart decode-0 with its prefill (a decode restarted alone
    strands new transfers, incident 2): its row says it fired, with the detector's time, and
    the restart's start, end and outcome, read right as the wedge cleared."""
    from pytest_wedge.faults import CoRestart
    from pytest_wedge.watchdogs import NoProgressWatchdog

    watchdog = NoProgressWatchdog(idle_s=3.0, action=CoRestart("decode-0"))
    with wedge.expect_cleared(within_s=10.0, watchdogs=[watchdog]) as check:
        half_open_streams(wedge)
    row = check.watchdog_rows[0]
    assert row["fired"] is True and row["count"] >= 1, row
    assert row["case"] == "cleared", row
    assert row["action"] == "CoRestart on decode-0" and row["outcome"].startswith("done"), row
    assert check.onset + 3.0 <= row["first_at"] <= row["action_started"] <= row["action_ended"]
    assert row["action_ended"] <= check.cleared_at + 0.5


def test_an_observing_watchdog_is_advised_to_act(wedge):
    from pytest_wedge.watchdogs import NoProgressWatchdog

    with (
        pytest.raises(NotClearedError) as failure,
        wedge.expect_cleared(within_s=5.0, watchdogs=[NoProgressWatchdog(idle_s=1.0)]),
    ):
        half_open_streams(wedge)
    text = str(failure.value)
    assert "within the 5 s budget, but it only observes" in text, text
    assert "lower its timeout" not in text, text


def test_an_oldest_request_watchdog_aborts_the_oldest_request_as_its_client_would(wedge):
    from pytest_wedge.watchdogs import AbortOldest, OldestRequestWatchdog

    watchdog = OldestRequestWatchdog(max_age_s=1.0, action=AbortOldest())
    with wedge.expect_cleared(within_s=8.0, watchdogs=[watchdog], require_recovery=False) as check:
        wedge.apply(StallAfterTokens("decode-0", tokens=3))
        wedge.harness(agents=2, rounds=1, client_timeout_s=30)
    row = check.watchdog_rows[0]
    assert row["fired"] and row["outcome"].startswith("done: aborted harness-"), row
    aborted = [r for r in wedge.ledger.by_origin("harness") if r.state == "aborted"]
    assert aborted and all(r.error == "aborted by a watchdog" for r in aborted)
