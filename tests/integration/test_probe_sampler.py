"""The probe's sampler runs in its own process: its samples reach the diagnosis as snapshots,
and the process never outlives the probe, whichever way the probe or the test process ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from pytest_wedge.evidence.frames import read_frame, sample_of
from pytest_wedge.evidence.probe import Probe, ProbeError
from pytest_wedge.evidence.sampler import config_line
from pytest_wedge.evidence.snapshot import Snapshot, collect
from pytest_wedge.evidence.target import ProbeTarget
from pytest_wedge.faults import Pause
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int) -> None:
    wait_for(lambda: _gone(pid), timeout_s=15, what=f"the sampler (pid {pid}) to exit")


def _wait_sampling(probe: Probe, count: int = 3) -> None:
    """The sampler's own samples (the first one is taken in this process)."""
    wait_for(
        lambda: len(probe.samples()) >= count and probe.latest_slow() is not None,
        timeout_s=30,
        what=f"{count} probe samples",
    )


def test_samples_are_snapshots_that_feed_the_diagnosis(wedge):
    probe = wedge.probe
    assert probe is not None and probe.pid is not None and probe.pid != os.getpid()
    harness = wedge.harness(agents=4, rounds=5)
    assert harness.wait(60)
    _wait_sampling(probe, count=5)
    samples = probe.samples()
    assert all(isinstance(s, Snapshot) for s in samples)
    assert [s.taken_at for s in samples] == sorted(s.taken_at for s in samples)
    assert set(samples[-1].stub_states) == {"prefill-0", "decode-0"}
    # A tick whose Toxiproxy read timed out on a loaded machine has no link traffic (it names
    # the fetch in ``unanswered`` instead): wait for one that read the links.
    slow = wait_for(
        lambda: (
            (s := probe.latest_slow(min_age_s=0.2)) is not None
            and s.observed is not None
            and "client->router" in s.observed.traffic
            and s
        ),
        timeout_s=10,
        what="a slow sample at least 0.2 s old with link traffic",
    )
    assert slow.components["router"] == "running"  # the runtime's view, added by the probe
    assert slow.observed is not None and slow.observed.traffic["client->router"]
    assert slow.router and slow.observed.workers["decode-0"]
    # What diagnose() does with them: the probe's sample is the "before" point.
    snapshot = collect(wedge.topology, wedge.ledger, before=slow, window=slow)
    assert snapshot.observed is not None
    assert snapshot.observed.before_at == slow.taken_at
    assert snapshot.observed.traffic_before == slow.observed.traffic
    assert snapshot.stub_states_before == slow.stub_states


def test_a_pause_shows_in_the_samples(wedge):
    probe = wedge.probe
    _wait_sampling(probe)
    fault = wedge.apply(Pause("decode-0"))
    wait_for(
        lambda: (
            (probe.latest_slow() or Snapshot(0, [], [], [])).components.get("decode-0") == "paused"
        ),
        timeout_s=10,
        what="a sample showing decode-0 paused",
    )
    wedge.revert(fault)
    wait_for(
        lambda: probe.latest_slow().components.get("decode-0") == "running",
        timeout_s=10,
        what="a sample showing decode-0 running again",
    )


def test_stop_ends_the_sampler(wedge):
    probe = Probe(wedge.topology, interval_s=0.1).start()
    pid = probe.pid
    _wait_sampling(probe)
    probe.stop()
    assert _gone(pid)
    assert probe.failure is None


def test_an_error_in_the_block_ends_the_sampler_and_stays_the_error(wedge):
    with pytest.raises(KeyError, match="the block's own"), Probe(wedge.topology) as probe:
        pid = probe.pid
        raise KeyError("the block's own")
    assert _gone(pid)


def test_a_hung_sampler_is_killed_at_stop(wedge):
    probe = Probe(wedge.topology).start()
    pid = probe.pid
    _wait_sampling(probe)
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    probe.stop(timeout_s=0.5)  # our own kill is not a failure: nothing raised
    assert _gone(pid) and time.monotonic() - started < 5


def test_a_sampler_killed_under_the_test_is_reported(wedge):
    probe = Probe(wedge.topology).start()
    _wait_sampling(probe)
    os.kill(probe.pid, signal.SIGKILL)
    wait_for(lambda: probe.failure is not None, timeout_s=10, what="the probe to see its loss")
    kept = len(probe.samples())
    with pytest.raises(ProbeError) as failure:
        probe.stop()
    text = str(failure.value)
    assert "The probe's sampler exited while the test ran" in text, text
    assert "exit code: -9" in text and "To fix this:" in text, text
    assert len(probe.samples()) == kept >= 3  # what came before the loss stays evidence
    probe.stop()  # raised once; a second stop is quiet


# A test process that starts a probe and is then SIGKILLed: no stop, no atexit, no finalizer.
ORPHAN = """
import json, sys, time
from pytest_wedge.evidence.probe import Probe
from pytest_wedge.evidence.target import ProbeTarget, TargetTopology
target = ProbeTarget.from_dict(json.loads(sys.argv[1]))
probe = Probe(TargetTopology(target).as_topology()).start()
print(probe.pid, flush=True)
time.sleep(300)
"""


def test_the_sampler_dies_with_a_killed_test_process(wedge):
    target = json.dumps(ProbeTarget.of(wedge.topology).to_dict())
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, target], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        wait_for(
            lambda: psutil.Process(pid).status() != psutil.STATUS_ZOMBIE,
            timeout_s=5,
            what="the sampler to run",
        )
    finally:
        parent.kill()
        parent.wait(10)
    _wait_gone(pid)


def test_a_bad_configuration_line_is_refused_with_the_reason():
    done = subprocess.run(
        [sys.executable, "-m", "pytest_wedge.evidence.sampler"],
        input=b"not json\n",
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert b"the first line on stdin is not a probe configuration" in done.stderr


def test_fast_frames_wait_for_a_slow_one_and_go_out_at_the_end_of_input(wedge):
    """Only the first tick is slow here: every later frame waits in the sampler until its
    input ends, and none of them is lost then."""
    target = ProbeTarget.of(wedge.topology)
    sampler = subprocess.Popen(
        [sys.executable, "-m", "pytest_wedge.evidence.sampler"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert sampler.stdin is not None and sampler.stdout is not None
    try:
        sampler.stdin.write(config_line(target, 0.05, 0.2, 1000))
        sampler.stdin.flush()
        first = read_frame(sampler.stdout)
        assert first is not None and first[:2] == ("sample", True)
        time.sleep(0.5)  # time for about ten fast ticks at 0.05 s
        sampler.stdin.close()
        rest = []
        while (frame := read_frame(sampler.stdout)) is not None:
            rest.append(frame)
    finally:
        sampler.kill()
        sampler.wait(10)
    assert len(rest) >= 2 and all(frame[:2] == ("sample", False) for frame in rest)
    times = [first[2], *(frame[2] for frame in rest)]
    assert times == sorted(times)
    # Each frame's moment is its snapshot's, which the probe unpickles only when read.
    assert [sample_of(frame).taken_at for frame in (first, *rest)] == times


def test_a_mark_takes_a_slow_sample_at_once(wedge):
    """With the next periodic slow sample 20 s away, a mark still gets one at once, and the
    probe has it when mark() returns."""
    with Probe(wedge.topology, interval_s=0.1, slow_every=200) as probe:
        _wait_sampling(probe, count=1)  # fast samples come out with the next slow one only
        asked = time.time()
        at = probe.mark()
        assert at is not None and at >= asked
        slow = probe.slow_before(time.time())
        assert slow is not None and slow.taken_at == at
        assert slow.router and slow.observed is not None  # a whole slow sample: metrics too
        assert len(probe.slow_samples()) == 2  # the first one, then the mark's
    assert probe.mark() is None  # stopped: nothing to ask, and no wait


def test_a_fault_window_opens_on_a_sample_taken_just_before_its_fault(wedge):
    """The window's counters start at the mark, not at the last periodic slow sample."""
    _wait_sampling(wedge.probe)
    asked = time.time()
    fault = wedge.apply(Pause("decode-0"))
    window = wedge.faults.windows[-1]
    start = wedge.probe.slow_before(window.started)
    wedge.revert(fault)
    assert start is not None and asked <= start.taken_at <= window.started
    assert start.components["decode-0"] == "running"  # taken before the pause
