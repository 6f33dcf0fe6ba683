"""The links are metered by the probe's sampler, in its own process: the series reaches the test
process only when asked for, it survives the stop for the timeline, and a lost sampler is never
the meter's error. Without a sampler from the start, a thread here meters them."""

from __future__ import annotations

import itertools
import os
import signal
import statistics

import psutil
import pytest

from pytest_wedge.evidence import launch
from pytest_wedge.evidence.probe import Probe, ProbeError
from pytest_wedge.links.rates import LINK_WALK_GAP_S, LinkMeter
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _metering_probe(wedge) -> Probe:
    if not launch.zygote_warm():  # a first probe waits for the zygote's imports
        first = Probe(wedge.topology, interval_s=0.1).start()
        assert first.pid is not None
        first.stop()
    probe = Probe(wedge.topology, interval_s=0.1, meter_links=True).start()
    assert probe.meters_links, "the sampler was not forked at the start"
    return probe


def test_the_sampler_meters_the_links_and_the_series_outlives_the_stop(wedge):
    probe = _metering_probe(wedge)
    meter = LinkMeter(wedge.topology, source=probe.link_series).start()
    assert meter._thread is None  # nothing samples in this process
    try:
        assert psutil.Process(probe.pid).ppid() == launch.shared_zygote().proc.pid
        harness = wedge.harness(agents=4, rounds=5)
        assert harness.wait(60)
        # The router's connections to the workers stay open: their bytes are the kernel's.
        series = wait_for(
            lambda: (
                (s := meter.series())
                and len(s) >= 3
                and s[-1][1].get("router->decode-0", {}).get("downstream", 0) > 0
                and s
            ),
            timeout_s=10,
            what="3 points, the last with bytes on router->decode-0",
        )
        times = [t for t, _ in series]
        assert times == sorted(times)
        # One point per slow tick (every 10th of 0.1 s), each a walk of the kernel's table
        # when connections keep being accepted on the machine (the harness's, other tests'),
        # which LINK_WALK_GAP_S spaces just under a slow interval; never one per fast tick.
        gap = statistics.median(b - a for a, b in itertools.pairwise(times))
        assert 0.3 <= gap < max(1.0, LINK_WALK_GAP_S) + 0.5
        assert set(series[-1][1]) <= set(wedge.topology.links)
        meter.stop()
    finally:
        probe.stop()
    assert len(meter.series()) >= len(series)
    assert "router->decode-0" in meter.rates().spans


def test_a_lost_sampler_keeps_the_series_fetched_and_is_never_the_meters_error(wedge):
    probe = _metering_probe(wedge)
    meter = LinkMeter(wedge.topology, source=probe.link_series).start()
    wait_for(lambda: len(meter.series()) >= 3, timeout_s=10, what="3 meter points")
    fetched = len(meter.series())
    assert probe.pid is not None
    os.kill(probe.pid, signal.SIGKILL)
    wait_for(lambda: _gone(probe.pid), timeout_s=10, what="the sampler's process to end")
    assert probe.link_series(1.0) is None
    assert len(meter.series()) >= fetched  # the last fetched series stays
    meter.stop()  # quiet
    assert len(meter.series()) >= fetched
    with pytest.raises(ProbeError):  # the probe, not the meter, reports the lost sampler
        probe.stop()


def test_without_a_source_a_thread_here_meters_the_links(wedge):
    with LinkMeter(wedge.topology, interval_s=0.1) as meter:
        assert meter._thread is not None
        wait_for(lambda: len(meter.series()) >= 2, timeout_s=10, what="2 meter points")
