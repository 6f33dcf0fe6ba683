"""The process runtime under threads: one owner per child, coherent state, a safe fork.

Components here are tiny sleeping Pythons; every process is started by the runtime under
test and killed by it (or, at worst, by its PDEATHSIG when the runtime's spawner ends).
"""

from __future__ import annotations

import ctypes
import os
import random
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pytest_wedge.errors import (
    AlreadyRunningError,
    ComponentControlError,
    ComponentStartError,
    WedgeError,
)
from pytest_wedge.runtime import launcher
from pytest_wedge.runtime import process as process_runtime
from pytest_wedge.runtime.interface import SESSION_ENV
from pytest_wedge.runtime.process import ProcessRuntime
from pytest_wedge.spec.topology import ComponentSpec
from pytest_wedge.waiting import wait_for

SLEEPER = (sys.executable, "-c", "import time; time.sleep(600)")
REPORT_DEATH_SIGNAL = (
    sys.executable,
    "-c",
    "import ctypes; sig = ctypes.c_int(); "
    "ctypes.CDLL('libc.so.6').prctl(2, ctypes.byref(sig)); "  # PR_GET_PDEATHSIG
    "print('pdeathsig', sig.value)",
)


def spec(name: str = "decode-0", argv: tuple[str, ...] = SLEEPER) -> ComponentSpec:
    return ComponentSpec(name=name, role="decode", argv=argv, ready_url="http://127.0.0.1:1/")


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(tmp_path, f"safety-{uuid.uuid4().hex[:8]}")
    try:
        yield rt
    finally:
        rt.close()


def our_children(session_id: str) -> list[psutil.Process]:
    """Live children of this test process started for ``session_id``, owned or not."""
    found = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if child.environ().get(SESSION_ENV) == session_id:
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def agrees_with_kernel(runtime: ProcessRuntime, pid: int) -> None:
    said = runtime.state("decode-0")
    wait_for(
        lambda: (psutil.Process(pid).status() == psutil.STATUS_STOPPED) == (said == "paused"),
        timeout_s=5,
        what=f"the kernel to agree that {pid} is {said}",
        describe=lambda: psutil.Process(pid).status(),
    )


def test_the_child_sets_its_death_signal_without_loading_a_library_after_fork(
    runtime: ProcessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # dlopen between fork and exec can deadlock on a loader lock held by another thread at
    # fork time; the child must only call the prctl the parent resolved.
    def no_dlopen(*args: object, **kwargs: object) -> None:
        raise RuntimeError("ctypes.CDLL called in the child after fork")

    monkeypatch.setattr(ctypes, "CDLL", no_dlopen)
    runtime.start(spec("prefill-0", REPORT_DEATH_SIGNAL))
    wait_for(
        lambda: runtime.exit_code("prefill-0") is not None,
        timeout_s=30,
        what="the child to report and exit",
        describe=lambda: runtime.logs("prefill-0"),
    )
    assert runtime.exit_code("prefill-0") == 0, runtime.logs("prefill-0")
    assert "pdeathsig 9" in runtime.logs("prefill-0")  # SIGKILL survives exec


def test_starting_a_running_name_raises_and_the_first_child_stays_owned(
    runtime: ProcessRuntime,
) -> None:
    runtime.start(spec())
    first = runtime.pid("decode-0")
    assert first is not None

    with pytest.raises(AlreadyRunningError) as raised:
        runtime.start(spec())
    error = raised.value
    assert isinstance(error, WedgeError)
    assert error.headline == "Cannot start decode-0: it is already running"
    assert error.facts["pid"] == first and "restart('decode-0')" in error.fix
    assert runtime.pid("decode-0") == first
    assert [p.pid for p in our_children(runtime.session_id)] == [first]

    runtime.pause("decode-0")  # paused is still running: a second start must not orphan it
    with pytest.raises(AlreadyRunningError):
        runtime.start(spec())
    assert runtime.state("decode-0") == "paused"

    runtime.kill("decode-0")  # an exited name starts again
    runtime.start(spec())
    second = runtime.pid("decode-0")
    assert second is not None and second != first and not psutil.pid_exists(first)
    runtime.close()
    assert our_children(runtime.session_id) == []


def test_a_closed_runtime_refuses_to_start(runtime: ProcessRuntime) -> None:
    runtime.close()
    with pytest.raises(ComponentStartError, match="runtime is closed"):
        runtime.start(spec())
    assert our_children(runtime.session_id) == []


@pytest.mark.timeout(120)
def test_threads_hammering_one_component_leave_one_owned_child_in_a_coherent_state(
    runtime: ProcessRuntime,
) -> None:
    runtime.start(spec())
    failures: list[BaseException] = []
    start_line = threading.Barrier(4)

    def hammer(seed: int) -> None:
        actions = [runtime.pause, runtime.resume, runtime.restart, runtime.pause, runtime.resume]
        rng = random.Random(seed)
        start_line.wait()
        try:
            for _ in range(30):
                rng.choice(actions)("decode-0")
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not any(t.is_alive() for t in threads) and failures == []

    owned = runtime.pid("decode-0")
    assert owned is not None
    assert [p.pid for p in our_children(runtime.session_id)] == [owned], "an orphaned child"
    # What the runtime says is what the kernel says (once a just-sent signal has landed).
    agrees_with_kernel(runtime, owned)
    runtime.resume("decode-0")
    assert runtime.state("decode-0") == "running"
    agrees_with_kernel(runtime, owned)
    runtime.pause("decode-0")
    assert runtime.state("decode-0") == "paused"
    agrees_with_kernel(runtime, owned)

    runtime.close()
    assert runtime.state("decode-0") == "absent"
    assert our_children(runtime.session_id) == []
    assert not psutil.pid_exists(owned)


def test_resolving_prctl_happens_once_in_the_parent() -> None:
    # The child calls this object; resolving it is the parent's job, done at import.
    assert launcher._PRCTL is not None
    assert launcher._PRCTL.__name__ == "prctl"  # type: ignore[attr-defined]


def test_kill_returns_once_the_process_and_its_group_are_gone(runtime: ProcessRuntime) -> None:
    # The leader forks a child into its own group, as a vLLM engine's API server does.
    family = ("/bin/sh", "-c", "sleep 600 & exec sleep 600")
    runtime.start(spec(argv=family))
    pid = runtime.pid("decode-0")
    assert pid is not None
    wait_for(
        lambda: len(process_runtime._group_alive(pid)) == 2,
        timeout_s=10,
        what="the leader and its child to run",
        describe=lambda: ", ".join(process_runtime._group_alive(pid)),
    )
    runtime.kill("decode-0")
    # No wait here: kill itself must return only once the kernel is done with them.
    assert runtime.exit_code("decode-0") == -9 and runtime.state("decode-0") == "exited"
    assert not psutil.pid_exists(pid) and process_runtime._group_alive(pid) == []


def test_kill_ends_what_is_left_of_a_group_whose_leader_already_exited(
    runtime: ProcessRuntime, tmp_path: Path
) -> None:
    """vLLM's API server exits when its EngineCore dies; its Worker was seen running on."""
    go = tmp_path / "exit-now"
    leader = f"sleep 600 & while [ ! -e {go} ]; do sleep 0.01; done; exit 3"
    runtime.start(spec(argv=("/bin/sh", "-c", leader)))
    pid = runtime.pid("decode-0")
    assert pid is not None
    go.touch()
    wait_for(
        lambda: runtime.exit_code("decode-0") == 3 and len(process_runtime._group_alive(pid)) == 1,
        timeout_s=10,
        what="the leader to exit and leave its child behind",
        describe=lambda: ", ".join(process_runtime._group_alive(pid)),
    )
    runtime.kill("decode-0")
    assert process_runtime._group_alive(pid) == []


def test_pause_returns_once_every_process_of_the_group_is_stopped(runtime: ProcessRuntime) -> None:
    """A Pause's check, and the next request, must find an engine's EngineCore and Worker
    stopped too, not only its API server."""
    runtime.start(spec(argv=("/bin/sh", "-c", "sleep 600 & exec sleep 600")))
    pid = runtime.pid("decode-0")
    assert pid is not None
    wait_for(lambda: len(process_runtime._group_alive(pid)) == 2, timeout_s=10, what="both")
    runtime.pause("decode-0")
    # No wait here: pause itself returns only once each of them is stopped.
    statuses = [p.status() for p in process_runtime._group(pid)]
    assert statuses == [psutil.STATUS_STOPPED] * 2
    runtime.resume("decode-0")


class _NeverReaped:
    """A leader whose exit is never reported: this test process's own group stands in."""

    pid = os.getpgrp()

    def poll(self) -> int | None:
        return None

    def wait(self, timeout: float | None = None) -> int:
        raise AssertionError("kill waits on the real condition, not on wait()")


def test_a_process_that_outlives_sigkill_is_named_with_what_is_left_of_it() -> None:
    with pytest.raises(ComponentControlError) as raised:
        process_runtime._wait_gone("decode-0", _NeverReaped(), timeout_s=0.05)
    error = raised.value
    assert error.headline == "decode-0 was still there 0 s after SIGKILL"
    assert error.facts["leader"] == "not reaped (some thread still exiting)"
    assert str(os.getpid()) in str(error.facts["processes of its group"])
    assert "state D" in error.fix
