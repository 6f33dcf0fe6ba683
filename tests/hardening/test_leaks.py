"""Nothing of ours outlives a session, however it ends.

Five endings of an inner pytest: a pass, a failure, a hang ended by pytest-timeout, SIGINT
mid-test, and SIGKILL mid-test followed by a new session that must sweep what the killed one
left. After each, no process, container, Toxiproxy proxy or temp entry of ours remains (see
leakcheck.py). The docker variants need a daemon (`make test` starts one) and skip otherwise.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from typing import Any

import pytest
from leakcheck import LeakProbe, marked_processes

from pytest_wedge.runtime.interface import OWNER_ENV, SESSION_ENV
from pytest_wedge.waiting import wait_for

INNER = """
import pytest
from pytest_wedge.faults import Pause


def test_pass(wedge):
    record(wedge)
    assert wedge.harness(agents=2, rounds=1).wait(10)


def test_fail(wedge):
    wedge.apply(Pause("router"))
    record(wedge)
    assert False, "deliberate"


# func_only: the 3 s are the hang's, not the bring-up's (seconds on a loaded machine), so the
# timeout always ends the test after it recorded its topology.
@pytest.mark.timeout(3, func_only=True)
def test_hang(wedge):
    wedge.apply(Pause("router"))
    harness = wedge.harness(agents=2, rounds=1, client_timeout_s=None)
    record(wedge)
    harness.wait()  # never returns: the router is paused; pytest-timeout ends the test


@pytest.mark.timeout(120)
def test_hang_until_signalled(wedge):
    wedge.apply(Pause("router"))
    harness = wedge.harness(agents=2, rounds=1, client_timeout_s=None)
    record(wedge)
    harness.wait()  # until the outer test signals this pytest
"""
RUNTIMES = ["process", "docker"]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


@pytest.fixture
def probe(leaks: LeakProbe) -> LeakProbe:
    leaks.write_tests(INNER)
    return leaks


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    """Each runtime; docker only where a daemon answers (`make test` starts one)."""
    if request.param == "docker":
        request.getfixturevalue("docker_daemon")
    return str(request.param)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("test", "code", "says"),
    [
        ("test_pass", pytest.ExitCode.OK, "1 passed"),
        ("test_fail", pytest.ExitCode.TESTS_FAILED, "1 failed"),
        ("test_hang", pytest.ExitCode.TESTS_FAILED, "Timeout"),
    ],
    ids=["pass", "failure", "pytest-timeout"],
)
def test_a_session_that_ends_by_itself_leaves_nothing(
    probe: LeakProbe, test: str, code: int, says: str
) -> None:
    rc, output = probe.run(f"test_inner.py::{test}")
    assert rc == code and says in output, output
    assert probe.records, "the inner test never recorded its topology"
    probe.assert_clean()


@pytest.mark.timeout(150)
def test_sigint_mid_test_tears_everything_down(probe: LeakProbe, runtime: str) -> None:
    proc = probe.popen("test_inner.py::test_hang_until_signalled", f"--wedge-runtime={runtime}")
    probe.wait_recorded(proc)
    proc.send_signal(signal.SIGINT)  # the pytest process only, not its process group
    assert proc.wait(timeout=60) == pytest.ExitCode.INTERRUPTED, probe.output()
    assert "KeyboardInterrupt" in probe.output()
    probe.assert_clean()


@pytest.mark.timeout(180)
def test_sigkill_mid_test_is_swept_by_the_next_session(
    probe: LeakProbe, runtime: str, request: pytest.FixtureRequest
) -> None:
    proc = probe.popen("test_inner.py::test_hang_until_signalled", f"--wedge-runtime={runtime}")
    probe.wait_recorded(proc)
    dead_owner = probe.owners[-1]
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    # Local children die with pytest (PR_SET_PDEATHSIG); containers cannot, and stay.
    wait_for(
        lambda: not marked_processes(probe.mark),
        timeout_s=10,
        what="the killed session's processes to die with it",
        describe=lambda: repr(marked_processes(probe.mark)),
    )
    # What PDEATHSIG cannot reach (a component's own child, say): a process tagged by the dead
    # session, and on docker a container labelled with it, beside the ones it really left.
    planted = subprocess.Popen(
        SLEEPER,
        env=probe.env(**{OWNER_ENV: dead_owner, SESSION_ENV: "killed"}),
        start_new_session=True,
    )
    container = None
    try:
        if runtime == "docker":
            container = _plant_container(request.getfixturevalue("docker_daemon"), dead_owner)

        rc, output = probe.run("test_inner.py::test_pass", f"--wedge-runtime={runtime}")
        assert rc == pytest.ExitCode.OK, output
        assert planted.wait(timeout=10) == -signal.SIGKILL, "the next session did not sweep it"
        probe.assert_clean()
    finally:
        if planted.poll() is None:
            planted.kill()
            planted.wait()
        if container is not None and _exists(container):
            container.remove(force=True)


def _plant_container(client: Any, owner: str) -> Any:
    from pytest_wedge.runtime.docker import (
        LABEL_COMPONENT,
        LABEL_OWNER,
        LABEL_PIDNS,
        LABEL_SESSION,
        pid_namespace,
    )
    from pytest_wedge.runtime.images import ensure_image

    labels = {
        LABEL_SESSION: "killed",
        LABEL_OWNER: owner,
        LABEL_COMPONENT: "planted",
        LABEL_PIDNS: pid_namespace(),
    }
    return client.containers.run(
        ensure_image(client).tag,
        SLEEPER,
        name=f"pytest-wedge-planted-{uuid.uuid4().hex[:8]}",
        labels=labels,
        network_mode="host",
        init=True,
        detach=True,
    )


def _exists(container: Any) -> bool:
    import docker.errors

    try:
        container.reload()
    except docker.errors.NotFound:
        return False
    return True
