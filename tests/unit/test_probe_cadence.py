"""The probe's thread on its own (no topology: each sample is a stand-in): samples come once a
second by default (the first in start()), a mark takes one at once, and a failing sample never
ends the probe."""

from __future__ import annotations

import threading
import time

import pytest

from pytest_wedge.evidence.probe import SLOW_INTERVAL_S, Probe, ProbeError
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.waiting import wait_for


class StandIn(Probe):
    """A probe whose samples are empty snapshots; ``fail`` makes them raise."""

    def __init__(self, interval_s: float = SLOW_INTERVAL_S) -> None:
        super().__init__(None, interval_s)  # type: ignore[arg-type]
        self.fail: BaseException | None = None
        self.taken = 0

    def sample(self) -> Snapshot:
        self.taken += 1
        if self.fail is not None:
            raise self.fail
        return Snapshot(time.time(), [], [], [])


def test_samples_come_once_a_second_by_default() -> None:
    assert SLOW_INTERVAL_S == 1.0
    with StandIn() as probe:
        wait_for(lambda: probe.taken >= 1, timeout_s=5, what="the first sample, at once")
        time.sleep(0.3)
        assert probe.taken == 1


def test_a_mark_takes_a_sample_at_once_and_returns_its_moment() -> None:
    with StandIn(interval_s=60.0) as probe:
        wait_for(lambda: len(probe.samples()) == 1, timeout_s=5, what="the first sample")
        asked = time.time()
        at = probe.mark()
        assert at is not None and at >= asked
        newest = probe.slow_before(time.time())
        assert newest is not None and newest.taken_at == at
        assert len(probe.samples()) == 2
        assert probe.latest_slow(min_age_s=30.0) is None
        first = probe.samples()[0]
        assert probe.slow_before(first.taken_at - 1.0) is first  # else the oldest one kept
    assert probe.mark() is None  # stopped: no wait


def test_start_takes_the_first_sample_and_a_marks_point_is_in_before_it_returns() -> None:
    probe = StandIn(interval_s=60.0)
    points: list[float] = []
    probe.on_sample = lambda sample: points.append(sample.taken_at)
    with probe:
        # Taken in start(): the link meter's points start with the test, before its load.
        assert len(probe.samples()) == 1 and len(points) == 1
        at = probe.mark()
        # A fault goes ahead once mark() returns: its window's first point is in by then.
        assert at is not None and points[-1] == at


def test_marks_from_several_threads_each_get_a_sample_after_they_asked() -> None:
    with StandIn(interval_s=60.0) as probe:
        moments: list[tuple[float, float | None]] = []

        def ask() -> None:
            asked = time.time()
            moments.append((asked, probe.mark(timeout_s=5.0)))

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    assert len(moments) == 4
    assert all(at is not None and at >= asked for asked, at in moments)


def test_a_failing_sample_is_counted_and_the_probe_goes_on() -> None:
    probe = StandIn(interval_s=0.05)
    probe.fail = ConnectionError("decode-0 is paused")
    with probe:
        wait_for(lambda: probe.errors >= 2, timeout_s=5, what="two failed samples")
        assert probe.mark(timeout_s=0.5) is None  # no sample came: the fault goes ahead
        probe.fail = None
        wait_for(lambda: probe.samples(), timeout_s=5, what="a sample once it answers again")
    assert probe.last_error == "ConnectionError: decode-0 is paused"


def test_a_dead_sampling_thread_is_reported_once_at_stop() -> None:
    probe = StandIn(interval_s=0.05).start()
    wait_for(lambda: probe.samples(), timeout_s=5, what="a sample")
    probe.fail = SystemExit("gone")  # not an Exception: it ends the thread
    wait_for(lambda: probe.failure is not None, timeout_s=5, what="the probe to see its loss")
    assert probe.mark() is None
    with pytest.raises(ProbeError) as failure:
        probe.stop()
    text = str(failure.value)
    assert "sampling thread died" in text and "SystemExit: gone" in text, text
    assert "To fix this:" in text
    assert probe.samples()  # what came before stays evidence
    probe.stop()  # raised once
