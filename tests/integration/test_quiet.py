"""Both halves of validating a watchdog: the healthy-edge check fails a watchdog that cuts
healthy work, and passes one that measures the right thing, on the same load."""

from __future__ import annotations

import pytest

from pytest_wedge.watchdogs import FalsePositiveError, NoProgressWatchdog, RequestTimeout

pytestmark = pytest.mark.timeout(120)

# Streams of 40 tokens at 75 ms each take about 3 s: healthy, and longer than a 2 s cap.
SLOW_TOKENS = {"itl_ms": 75.0}


@pytest.mark.wedge(router_args=["--request-timeout-secs", "2"], stub=SLOW_TOKENS)
def test_smg_hard_cap_is_a_false_positive_on_healthy_long_streams(wedge):
    with pytest.raises(FalsePositiveError) as failure:  # noqa: SIM117 - the block starts the load
        with wedge.expect_quiet(within_s=20, watchdogs=[RequestTimeout(2)]):
            wedge.harness(agents=3, rounds=1, max_tokens=40)
    text = str(failure.value)
    assert failure.value.headline == (
        "false positive: router --request-timeout-secs 2 cuts healthy streams longer than 2 s"
    ), text
    assert "cut or errored: 3" in text, text
    # Each cut stream is named with how long it had run: the cap, not the stream, ended it.
    cut = [line for line in text.splitlines() if line.strip().startswith("harness-")]
    assert len(cut) == 3, text
    for line in cut:
        took = float(line.split(" after ")[1].split(" s ")[0])
        assert 1.8 <= took <= 4.0, line


@pytest.mark.wedge(stub=SLOW_TOKENS)  # the cap swapped for a no-progress watchdog
def test_a_no_progress_watchdog_stays_quiet_on_the_same_load(wedge):
    with wedge.expect_quiet(within_s=20, watchdogs=[NoProgressWatchdog(idle_s=1.0)]) as check:
        harness = wedge.harness(agents=3, rounds=1, max_tokens=40, client_timeout_s=None)
    assert harness.wait(1)
    assert check.fired == [] and check.harmed == [] and check.healthy == 3
    # Not vacuous: these streams ran longer than the cap that cut them in the test above.
    durations = [r.finished - r.sent for r in wedge.ledger.by_origin("harness")]
    assert min(durations) > 2.0, durations


@pytest.mark.wedge(stub=SLOW_TOKENS)
def test_the_no_progress_watchdog_still_fires_on_a_real_stall(wedge):
    from pytest_wedge.faults import StallAfterTokens

    dog = NoProgressWatchdog(idle_s=1.0, interval_s=0.1)
    with pytest.raises(FalsePositiveError, match="no progress for 1 s"):  # noqa: SIM117
        with wedge.expect_quiet(within_s=4, watchdogs=[dog]):
            wedge.apply(StallAfterTokens("decode-0", tokens=3))
            wedge.harness(agents=2, rounds=1, max_tokens=40)
