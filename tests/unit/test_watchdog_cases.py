"""A watchdog is a detector plus an action: the firing is recorded when the detector decides,
before the action runs; each row names one of five cases, and its advice says what to do."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pytest_wedge.waiting import wait_for
from pytest_wedge.watchdogs.actions import WatchdogAction
from pytest_wedge.watchdogs.clearing import watchdog_advice, watchdog_case
from pytest_wedge.watchdogs.policies import NoProgressWatchdog
from pytest_wedge.watchdogs.watchdog import CallableWatchdog, watchdog_report

SCENE: Any = object()
ONSET = 1000.0


class SlowRestart(WatchdogAction):
    """An action that takes a while, as a restart does; the test opens its gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def describe(self) -> str:
        return "restart decode-0"

    def act(self, scene: Any) -> str:
        self.gate.wait(5)
        return "decode-0 is back"


def test_the_firing_is_recorded_when_the_detector_decides_before_the_action_ends() -> None:
    action = SlowRestart()
    dog = CallableWatchdog(lambda scene: "3 s without progress", 0.01, "stall", action=action)
    dog.arm(SCENE)
    try:
        wait_for(lambda: dog._fired, timeout_s=5, what="the detector's decision")
        firing = dog._fired[0]
        assert firing.outcome == "running" and firing.action_ended is None
        action.gate.set()
        [row] = watchdog_report(SCENE, [dog])  # waits for the action under way
    finally:
        dog.disarm(SCENE)
    assert row["fired"] and row["acts"] and row["action"] == "restart decode-0"
    assert row["first_at"] <= row["action_started"] <= row["action_ended"]
    assert row["outcome"] == "done: decode-0 is back"


def test_a_check_that_acts_itself_is_read_after_it_returns() -> None:
    """The report is read as soon as the wedge clears, which may be while the user's check
    that cleared it is still returning: the row must still say it fired."""
    returned = threading.Event()

    def restart_in_check(scene: Any) -> str | None:
        if returned.is_set():
            return None
        time.sleep(0.3)  # the restart, inside the user's own check
        returned.set()
        return "restarted decode-0"

    dog = CallableWatchdog(restart_in_check, 0.01, "user restart")
    dog.arm(SCENE)
    try:
        wait_for(lambda: dog._busy.locked(), timeout_s=5, what="the check under way")
        [row] = watchdog_report(SCENE, [dog])
    finally:
        dog.disarm(SCENE)
    assert row["fired"] and row["count"] == 1 and row["detail"] == "restarted decode-0"


def test_a_failing_action_is_recorded_as_failed() -> None:
    class Broken(WatchdogAction):
        def describe(self) -> str:
            return "run fix.sh"

        def act(self, scene: Any) -> str:
            raise RuntimeError("fix.sh exited with 2")

    dog = CallableWatchdog(lambda scene: "seen", 0.01, "broken", action=Broken())
    dog.arm(SCENE)
    try:
        wait_for(lambda: dog._fired, timeout_s=5, what="a firing")
        [row] = watchdog_report(SCENE, [dog])
    finally:
        dog.disarm(SCENE)
    assert row["outcome"] == "failed: RuntimeError: fix.sh exited with 2"


def row(**fields: Any) -> dict[str, Any]:
    base = {"watchdog": "wd", "acts": True, "signal": "", "fires_after_s": None, "fired": False}
    return base | fields


CASES = {
    "cleared": (row(fired=True, first_at=ONSET + 3.1, action="restart decode-0"), True),
    "observes only": (row(fired=True, first_at=ONSET + 3.14, acts=False), False),
    "acted, wedge stayed": (
        row(fired=True, first_at=ONSET + 2, action="restart router", outcome="done: ok"),
        False,
    ),
    "slower than the budget": (row(fires_after_s=5.0), False),
    "never saw the signal": (row(fires_after_s=1.0, signal="decode-0 tok/s"), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_row_names_its_case(case: str) -> None:
    given, cleared = CASES[case]
    assert (
        watchdog_case(given, ONSET, 10.0 if case != "slower than the budget" else 3.0, cleared)
        == case
    )


def test_advice_for_a_watchdog_that_only_observes_says_so_and_how_to_act() -> None:
    given, _ = CASES["observes only"]
    text = watchdog_advice(given, "observes only", ONSET, 10.0, "")
    assert "fired at +3.14 s, within the 10 s budget, but it only observes" in text
    assert "action=Restart" in text and "lower its timeout" not in text


def test_advice_for_a_timeout_longer_than_the_budget_gives_both_numbers() -> None:
    given, _ = CASES["slower than the budget"]
    text = watchdog_advice(given, "slower than the budget", ONSET, 3.0, "")
    assert "waits 5 s before it can fire, longer than the 3 s budget" in text
    assert "watches" not in text


def test_advice_for_a_watchdog_that_never_saw_the_signal_names_both_signals() -> None:
    given, _ = CASES["never saw the signal"]
    changed = "harness requests held at router"
    text = watchdog_advice(given, "never saw the signal", ONSET, 10.0, changed)
    assert "it watches decode-0 tok/s" in text and changed in text


def test_advice_for_an_action_that_did_not_cure_names_action_and_outcome() -> None:
    given, _ = CASES["acted, wedge stayed"]
    text = watchdog_advice(given, "acted, wedge stayed", ONSET, 10.0, "held at decode-0")
    assert "restart router (done: ok), but the wedge stayed" in text


def test_advice_for_a_clearing_watchdog_names_its_action() -> None:
    given, _ = CASES["cleared"]
    text = watchdog_advice(given, "cleared", ONSET, 10.0, "")
    assert text == "wd fired at +3.10 s and restart decode-0 cleared the wedge"


def test_no_progress_watchdog_observes_unless_given_an_action() -> None:
    assert not NoProgressWatchdog(idle_s=3).acts
    assert NoProgressWatchdog(idle_s=3, action=SlowRestart()).acts
    assert NoProgressWatchdog(idle_s=3).fires_after_s() == 3
