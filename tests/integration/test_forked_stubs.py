"""Stub workers forked by the fork server are still one process each.

Pause, kill and restart act on one worker alone; the runtime reports exit codes as it does for
a spawned child; a worker carries the session's owner tag (what the leftover sweep reads);
and nothing outlives the runtime, or the fork server.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from pytest_wedge.runtime import wait_ready
from pytest_wedge.runtime.interface import OWNER_ENV, SESSION_ENV
from pytest_wedge.runtime.process import ProcessRuntime
from pytest_wedge.runtime.stub_forks import SERVER_MODULE
from pytest_wedge.spec.topology import ComponentSpec
from pytest_wedge.topology.ports import PortAllocator
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def stub(name: str, port: int) -> ComponentSpec:
    argv = (
        sys.executable,
        "-m",
        "pytest_wedge.stubs",
        "--role",
        "decode",
        "--name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    )
    return ComponentSpec(
        name=name,
        role="decode",
        argv=argv,
        ready_url=f"http://127.0.0.1:{port}/health",
        ports=(port,),
    )


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[ProcessRuntime]:
    rt = ProcessRuntime(tmp_path, f"forked-{uuid.uuid4().hex[:8]}")
    try:
        yield rt
    finally:
        rt.close()


@pytest.fixture
def two_stubs(runtime: ProcessRuntime) -> Iterator[list[ComponentSpec]]:
    ports = PortAllocator()
    try:
        stubs = [stub(f"decode-{i}", port) for i, port in enumerate(ports.take(2))]
        for component in stubs:
            runtime.start(component)
        wait_ready(runtime, stubs, timeout_s=60)
        yield stubs
    finally:
        ports.close()


def forkservers(runtime: ProcessRuntime) -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children():
        try:
            if SERVER_MODULE in child.cmdline() and (
                child.environ().get(SESSION_ENV) == runtime.session_id
            ):
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=0.5, trust_env=False).is_success
    except httpx.HTTPError:
        return False


def test_each_worker_is_its_own_process_group_forked_by_one_server(
    runtime: ProcessRuntime, two_stubs: list[ComponentSpec]
) -> None:
    (server,) = forkservers(runtime)
    pids = [runtime.pid(c.name) for c in two_stubs]
    assert None not in pids and len(set(pids)) == 2
    for pid in pids:
        assert pid is not None
        worker = psutil.Process(pid)
        assert worker.ppid() == server.pid, "forked by the pre-imported server, not spawned"
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid, "its own session and group"
        # The leftover sweep reads the owner tag from /proc/PID/environ.
        assert worker.environ().get(OWNER_ENV) and worker.environ()[SESSION_ENV] == (
            runtime.session_id
        )


def test_pause_kill_and_restart_act_on_one_worker_alone(
    runtime: ProcessRuntime, two_stubs: list[ComponentSpec]
) -> None:
    first, other = two_stubs
    pid, other_pid = runtime.pid(first.name), runtime.pid(other.name)
    assert pid is not None and other_pid is not None

    runtime.pause(first.name)
    assert runtime.state(first.name) == "paused"
    wait_for(
        lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED,
        timeout_s=5,
        what=f"{first.name} ({pid}) to be stopped by the kernel",
    )
    assert not answers(first.ready_url) and answers(other.ready_url)
    runtime.resume(first.name)
    assert runtime.state(first.name) == "running" and answers(first.ready_url)

    runtime.kill(first.name)
    assert runtime.exit_code(first.name) == -signal.SIGKILL, "reported by the fork server"
    assert runtime.state(first.name) == "exited" and runtime.pid(first.name) is None
    assert gone(pid) and answers(other.ready_url) and runtime.pid(other.name) == other_pid

    runtime.restart(first.name)  # through the fork server again
    wait_ready(runtime, [first], timeout_s=60)
    new_pid = runtime.pid(first.name)
    assert new_pid is not None and new_pid != pid
    assert psutil.Process(new_pid).ppid() == forkservers(runtime)[0].pid

    runtime.stop(first.name)  # SIGTERM: the stub drains and exits 0
    assert runtime.exit_code(first.name) == 0
    assert "--- start:" in runtime.logs(first.name) and "ready" in runtime.logs(first.name)


def test_a_worker_that_fails_to_start_reports_its_exit_code_and_log(
    runtime: ProcessRuntime,
) -> None:
    bad = stub("decode-0", 1)
    bad = ComponentSpec(
        name=bad.name,
        role=bad.role,
        argv=(*bad.argv, "--max-running", "0"),
        ready_url=bad.ready_url,
    )
    runtime.start(bad)
    wait_for(
        lambda: runtime.exit_code(bad.name) is not None,
        timeout_s=60,
        what="the bad worker to exit",
        describe=lambda: runtime.logs(bad.name),
    )
    assert runtime.exit_code(bad.name) == 2  # argparse's usage error, as when spawned
    assert "--max-running must be >= 1" in runtime.logs(bad.name)


def test_close_ends_the_workers_and_the_server(
    runtime: ProcessRuntime, two_stubs: list[ComponentSpec]
) -> None:
    pids = [runtime.pid(c.name) for c in two_stubs]
    (server,) = forkservers(runtime)
    runtime.close()
    for pid in [*pids, server.pid]:
        assert pid is not None
        wait_for(lambda pid=pid: gone(pid), timeout_s=10, what=f"{pid} to exit after close()")


def test_workers_die_with_their_fork_server(
    runtime: ProcessRuntime, two_stubs: list[ComponentSpec]
) -> None:
    # What happens to them when pytest is SIGKILLed: the server dies by its PDEATHSIG, and
    # the workers by theirs.
    pids = [runtime.pid(c.name) for c in two_stubs]
    (server,) = forkservers(runtime)
    server.kill()
    for pid in pids:
        assert pid is not None
        wait_for(lambda pid=pid: gone(pid), timeout_s=10, what=f"worker {pid} to die")
    wait_for(
        lambda: all(runtime.state(c.name) == "exited" for c in two_stubs),
        timeout_s=10,
        what="the runtime to see its workers gone",
    )
    runtime.restart("decode-0")  # a new fork server takes over
    wait_ready(runtime, two_stubs[:1], timeout_s=60)
    assert runtime.state("decode-0") == "running"


def test_only_an_idle_fork_server_is_released(
    runtime: ProcessRuntime, two_stubs: list[ComponentSpec]
) -> None:
    (server,) = forkservers(runtime)
    runtime.kill("decode-0")
    runtime.release_idle()  # decode-1 still runs: the server stays
    assert server.is_running() and runtime.state("decode-1") == "running"
    runtime.kill("decode-1")
    runtime.release_idle()
    wait_for(lambda: gone(server.pid), timeout_s=10, what="the idle fork server to exit")
    runtime.start(two_stubs[0])  # a start after the release boots a new one
    wait_ready(runtime, two_stubs[:1], timeout_s=60)
    assert [s.pid for s in forkservers(runtime)] != [server.pid]


def refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED


def test_a_port_bound_before_its_worker_starts_is_served_by_that_worker_alone(
    runtime: ProcessRuntime,
) -> None:
    ports = PortAllocator()
    try:
        first, other = (stub(f"decode-{i}", port) for i, port in enumerate(ports.take(2)))
        assert runtime.warm_up(sys.executable, [first.ports[0]]) == {first.ports[0]}
        assert runtime.warm_up(sys.executable, [other.ports[0]]) == set(), (
            "a running fork server cannot take sockets any more: the port is not bound"
        )
        assert refused(other.ports[0])
        # A client that comes before the worker exists waits in the accept queue (this is
        # what lets the router start with its workers) instead of being refused.
        early = socket.create_connection(("127.0.0.1", first.ports[0]), timeout=60)
        with early:
            runtime.start(first)
            early.sendall(b"GET /health HTTP/1.1\r\nHost: stub\r\nConnection: close\r\n\r\n")
            assert early.recv(64).startswith(b"HTTP/1.1 200")
        runtime.start(other)  # binds its own port, as before
        wait_ready(runtime, [first, other], timeout_s=60)

        # Nobody else keeps a copy: a killed worker's port refuses connections, and the
        # restarted worker binds it again.
        (server,) = forkservers(runtime)
        for holder in (psutil.Process(), server):
            assert first.ports[0] not in {c.laddr.port for c in holder.net_connections("tcp")}
        runtime.kill(first.name)
        assert refused(first.ports[0])
        runtime.restart(first.name)
        wait_ready(runtime, [first], timeout_s=60)
    finally:
        ports.close()
