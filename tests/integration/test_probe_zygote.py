"""The probe's samplers are forked by one pre-imported zygote per test process: shared by every
probe, replaced when it dies, gone with the test process, and every failure is a ProbeError."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from pytest_wedge.evidence import launch
from pytest_wedge.evidence.probe import Probe, ProbeError
from pytest_wedge.evidence.target import ProbeTarget
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _sampling(probe: Probe) -> None:
    wait_for(lambda: len(probe.samples()) >= 3, timeout_s=30, what="3 probe samples")


def test_every_probe_is_forked_by_the_same_zygote(wedge):
    assert wedge.probe is not None and wedge.probe.pid is not None  # the zygote is up
    first = Probe(wedge.topology).start()
    second = Probe(wedge.topology).start()
    try:
        # start() returns with the sampler's first sample, a slow one (links too).
        assert first.samples() and first.latest_slow() is not None
        assert second.samples() and second.latest_slow() is not None
        _sampling(first)
        _sampling(second)
        zygote = launch.shared_zygote().proc.pid
        assert first.pid != second.pid
        assert psutil.Process(first.pid).ppid() == psutil.Process(second.pid).ppid() == zygote
    finally:
        first.stop()
        second.stop()
    assert _gone(first.pid) and _gone(second.pid)


def test_a_killed_zygote_is_reported_and_replaced(wedge):
    if wedge.probe is not None:  # its sampler would die with the zygote too
        wedge.probe.stop()
    probe = Probe(wedge.topology).start()
    _sampling(probe)
    zygote = launch.shared_zygote().proc.pid
    os.kill(zygote, signal.SIGKILL)
    # Its samplers die with it (PDEATHSIG): under the test, that is the probe's failure.
    wait_for(lambda: probe.failure is not None, timeout_s=15, what="the probe to see its loss")
    with pytest.raises(ProbeError, match="exited while the test ran") as failure:
        probe.stop()
    assert "exit code: -9" in str(failure.value)
    assert _gone(probe.pid)
    # The next probe gets a new zygote.
    with Probe(wedge.topology) as again:
        _sampling(again)
        assert launch.shared_zygote().proc.pid not in (zygote, None)


def test_a_zygote_that_cannot_start_is_a_probe_error(wedge, monkeypatch):
    monkeypatch.setattr(launch, "_shared", None)
    monkeypatch.setattr(launch, "PROGRAM", "pytest_wedge.evidence.no_such_zygote")
    # A first probe does not wait for the zygote: the test goes on, and stop() raises.
    probe = Probe(wedge.topology).start()
    assert probe.pid is None
    with pytest.raises(ProbeError, match="could not be forked") as failure:
        probe.stop()
    text = str(failure.value)
    assert "No module named" in text and "To fix this:" in text, text
    broken = launch._shared
    assert broken is not None
    broken.close()


def test_a_zygote_that_cannot_even_be_started_is_a_probe_error(wedge, monkeypatch):
    def refuse() -> launch.SamplerZygote:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(launch, "_shared", None)
    monkeypatch.setattr(launch, "SamplerZygote", refuse)
    probe = Probe(wedge.topology).start()
    with pytest.raises(ProbeError, match="its zygote did not start") as failure:
        probe.stop()
    assert "Too many open files" in str(failure.value)


# A test process that starts a probe and is then SIGKILLed: no stop, no atexit, no finalizer.
ORPHAN = """
import json, sys, time
from pytest_wedge.evidence import launch
from pytest_wedge.evidence.probe import Probe
from pytest_wedge.evidence.target import ProbeTarget, TargetTopology
target = ProbeTarget.from_dict(json.loads(sys.argv[1]))
probe = Probe(TargetTopology(target).as_topology()).start()
print(probe.pid, launch.shared_zygote().proc.pid, flush=True)
time.sleep(300)
"""


def test_the_zygote_and_its_sampler_die_with_a_killed_test_process(wedge):
    target = json.dumps(ProbeTarget.of(wedge.topology).to_dict())
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, target], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        sampler, zygote = (int(pid) for pid in parent.stdout.readline().split())
        assert not _gone(sampler) and not _gone(zygote)
    finally:
        parent.kill()
        parent.wait(10)
    wait_for(
        lambda: _gone(sampler) and _gone(zygote),
        timeout_s=15,
        what="the sampler and the zygote to exit",
    )
