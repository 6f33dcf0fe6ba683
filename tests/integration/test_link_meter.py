"""The link meter samples in a process forked by the zygote: its series reaches the test process
only when asked for, it survives its stop for the timeline, and a lost meter is never the
test's error."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from pytest_wedge.evidence import launch
from pytest_wedge.evidence.linkrates import LinkMeter
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _child_pid(meter: LinkMeter) -> int:
    assert meter.pid is not None, "the meter samples in a thread: the zygote did not fork it"
    return meter.pid


def test_the_meter_samples_in_a_forked_process_and_keeps_its_series_after_stop(wedge):
    meter = LinkMeter(wedge.topology, interval_s=0.1).start()
    pid = _child_pid(meter)
    assert psutil.Process(pid).ppid() == launch.shared_zygote().proc.pid
    assert meter._thread is None  # nothing samples in this process
    harness = wedge.harness(agents=4, rounds=5)
    assert harness.wait(60)
    # The router's connections to the workers stay open: their bytes are the kernel's.
    series = wait_for(lambda: (s := meter.series()) and s[-1][1].get("router->decode-0", {})
                      .get("downstream", 0) > 0 and s, timeout_s=10,
                      what="a point with bytes on router->decode-0")  # fmt: skip
    assert [t for t, _ in series] == sorted(t for t, _ in series)
    assert set(series[-1][1]) <= set(wedge.topology.links)
    meter.stop()
    assert _gone(pid)
    kept = meter.series()
    assert len(kept) >= len(series)
    assert "router->decode-0" in meter.rates().spans


def test_a_lost_meter_keeps_what_it_had_and_is_never_the_tests_error(wedge):
    meter = LinkMeter(wedge.topology, interval_s=0.1).start()
    pid = _child_pid(meter)
    wait_for(lambda: len(meter.series()) >= 3, timeout_s=10, what="3 meter points")
    fetched = len(meter.series())
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _gone(pid), timeout_s=10, what="the meter's process to end")
    assert len(meter.series()) >= fetched  # the last fetched series stays
    meter.stop()  # quiet
    assert len(meter.series()) >= fetched


def test_in_process_samples_in_a_thread(wedge):
    with LinkMeter(wedge.topology, interval_s=0.1, in_process=True) as meter:
        assert meter._child is None and meter._thread is not None
        wait_for(lambda: len(meter.series()) >= 2, timeout_s=10, what="2 meter points")
