"""A re-armed CallableWatchdog reports its latest arming only, on exactly one thread."""

from __future__ import annotations

import threading
from typing import Any

from pytest_wedge.waiting import wait_for
from pytest_wedge.watchdogs.watchdog import CallableWatchdog

SCENE: Any = object()  # CallableWatchdog only hands the scene to its check


class Switchable:
    """A check whose outcome the test sets: act, raise, or do nothing; records its threads."""

    def __init__(self) -> None:
        self.mode = "act"
        self.calls = 0
        self.threads: set[int] = set()

    def __call__(self, scene: Any) -> str | None:
        self.calls += 1
        self.threads.add(threading.get_ident())
        if self.mode == "raise":
            raise RuntimeError("check broke")
        return "restarted decode-0" if self.mode == "act" else None


def _threads_of(label: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"wedge-{label}" and t.is_alive()]


def test_rearming_forgets_earlier_firings_and_errors() -> None:
    check = Switchable()
    dog = CallableWatchdog(check, interval_s=0.001, label="rearm-forgets")
    dog.arm(SCENE)
    wait_for(lambda: dog.firings(SCENE), timeout_s=5, what="a first firing")
    check.mode = "raise"
    wait_for(lambda: dog.errors, timeout_s=5, what="a first error")
    dog.disarm(SCENE)

    check.mode = "quiet"
    dog.arm(SCENE)
    try:
        assert dog.firings(SCENE) == []
        assert dog.errors == []
        calls = check.calls
        wait_for(lambda: check.calls >= calls + 3, timeout_s=5, what="three quiet checks")
        assert dog.firings(SCENE) == [] and dog.errors == []

        check.mode = "act"
        fired = wait_for(lambda: dog.firings(SCENE), timeout_s=5, what="a firing after re-arm")
        assert fired[0].detail == "restarted decode-0" and fired[0].watchdog == "rearm-forgets"
    finally:
        dog.disarm(SCENE)


def test_disarm_then_arm_leaves_exactly_one_thread_checking() -> None:
    check = Switchable()
    check.mode = "quiet"
    dog = CallableWatchdog(check, interval_s=0.001, label="rearm-one-thread")
    dog.arm(SCENE)
    dog.disarm(SCENE)
    assert _threads_of("rearm-one-thread") == []
    dog.arm(SCENE)
    try:
        assert len(_threads_of("rearm-one-thread")) == 1
        check.threads.clear()
        calls = check.calls
        wait_for(lambda: check.calls >= calls + 5, timeout_s=5, what="five checks")
        assert len(check.threads) == 1
    finally:
        dog.disarm(SCENE)
    assert _threads_of("rearm-one-thread") == []


def test_arming_an_armed_watchdog_replaces_its_thread() -> None:
    check = Switchable()
    dog = CallableWatchdog(check, interval_s=0.001, label="rearm-twice")
    dog.arm(SCENE)
    wait_for(lambda: dog.firings(SCENE), timeout_s=5, what="a first firing")
    check.mode = "quiet"
    dog.arm(SCENE)  # no disarm in between
    try:
        assert len(_threads_of("rearm-twice")) == 1
        assert dog.firings(SCENE) == []
        check.threads.clear()
        calls = check.calls
        wait_for(lambda: check.calls >= calls + 5, timeout_s=5, what="five checks")
        assert len(check.threads) == 1
    finally:
        dog.disarm(SCENE)
    assert _threads_of("rearm-twice") == []
