"""The probe on a running topology: its samples reach the diagnosis as snapshots, a fault window
opens on a sample taken just before its fault, and a paused or dead component never stops it."""

from __future__ import annotations

import pytest

from pytest_wedge.evidence.probe import Probe
from pytest_wedge.evidence.snapshot import Snapshot, collect
from pytest_wedge.faults import Kill, Pause
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def _wait_sampling(probe: Probe, count: int = 2) -> None:
    wait_for(lambda: len(probe.samples()) >= count, timeout_s=30, what=f"{count} probe samples")


def _newest(probe: Probe) -> Snapshot:
    return probe.latest_slow() or Snapshot(0, [], [], [])


def test_samples_are_snapshots_that_feed_the_diagnosis(wedge):
    probe = wedge.probe
    assert probe is not None
    harness = wedge.harness(agents=4, rounds=5)
    assert harness.wait(60)
    _wait_sampling(probe)
    samples = probe.samples()
    assert [s.taken_at for s in samples] == sorted(s.taken_at for s in samples)
    assert set(samples[-1].stub_states) == {"prefill-0", "decode-0"}
    # A sample whose Toxiproxy read timed out on a loaded machine has no link traffic (it
    # names the fetch in ``unanswered`` instead): wait for one that read the links.
    slow = wait_for(
        lambda: (
            (s := probe.latest_slow(min_age_s=0.2)) is not None
            and s.observed is not None
            and "client->router" in s.observed.traffic
            and s
        ),
        timeout_s=10,
        what="a sample at least 0.2 s old with link traffic",
    )
    assert slow.components["router"] == "running"  # the runtime's view
    assert slow.observed is not None and slow.observed.traffic["client->router"]
    assert slow.router and slow.observed.workers["decode-0"]
    # What diagnose() does with them: the probe's sample is the "before" point.
    snapshot = collect(wedge.topology, wedge.ledger, before=slow, window=slow)
    assert snapshot.observed is not None
    assert snapshot.observed.before_at == slow.taken_at
    assert snapshot.observed.traffic_before == slow.observed.traffic
    assert snapshot.stub_states_before == slow.stub_states


def test_a_paused_component_shows_in_the_samples_and_never_stops_them(wedge):
    probe = wedge.probe
    _wait_sampling(probe)
    fault = wedge.apply(Pause("decode-0"))
    paused = wait_for(
        lambda: (s := _newest(probe)).components.get("decode-0") == "paused" and s,
        timeout_s=10,
        what="a sample showing decode-0 paused",
    )
    assert "decode-0 state" in paused.unanswered  # it did not answer: evidence, not an error
    wedge.revert(fault)
    wait_for(
        lambda: _newest(probe).components.get("decode-0") == "running",
        timeout_s=10,
        what="a sample showing decode-0 running again",
    )
    assert probe.errors == 0 and probe.failure is None


def test_a_dead_component_never_stops_the_samples(wedge):
    probe = wedge.probe
    _wait_sampling(probe)
    wedge.apply(Kill("decode-0"))
    wait_for(
        lambda: "decode-0 metrics" in _newest(probe).unanswered,
        timeout_s=10,
        what="a sample in which decode-0 did not answer",
    )
    count = len(probe.samples())
    _wait_sampling(probe, count + 2)
    assert probe.errors == 0 and probe.failure is None


def test_a_mark_takes_a_sample_at_once(wedge):
    """With the next periodic sample 20 s away, a mark still gets one at once, and the probe
    has it when mark() returns."""
    with Probe(wedge.topology, interval_s=20.0) as probe:
        _wait_sampling(probe, count=1)
        at = probe.mark()
        assert at is not None
        newest = probe.slow_before(at)
        assert newest is not None and newest.taken_at == at
        assert newest.router and newest.observed is not None  # a whole sample: metrics too
        assert len(probe.samples()) == 2
    assert probe.mark() is None  # stopped: nothing to ask, and no wait


def test_a_fault_window_opens_on_a_sample_taken_just_before_its_fault(wedge):
    """The window's counters start at the mark, not at the last periodic sample."""
    _wait_sampling(wedge.probe)
    asked = wedge.probe.samples()[-1].taken_at
    fault = wedge.apply(Pause("decode-0"))
    window = wedge.faults.windows[-1]
    start = wedge.probe.slow_before(window.started)
    wedge.revert(fault)
    assert start is not None and asked < start.taken_at <= window.started
    assert start.components["decode-0"] == "running"  # taken before the pause
