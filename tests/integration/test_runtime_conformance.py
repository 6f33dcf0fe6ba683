"""One contract, every runtime: the process and docker runtimes must behave alike.

The component under test is a Toxiproxy server: small, starts in milliseconds, has a ready URL.
The docker half needs a daemon (``eval "$(scripts/docker-daemon.sh up)"``, or ``make docker-up``)
and is skipped, saying so, when DOCKER_HOST is unset or the daemon does not answer.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from pytest_wedge.runtime import Runtime, make_runtime, wait_ready
from pytest_wedge.runtime.binaries import find_toxiproxy
from pytest_wedge.runtime.dockerd import NoDockerDaemon, connect
from pytest_wedge.topology.ports import PortAllocator
from pytest_wedge.topology.toxiproxy import server_component
from pytest_wedge.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def docker_skip_reason() -> str | None:
    """Why the docker half cannot run (no daemon answers), or None. Any other docker-py error
    (a daemon that answers with an error, a bad DOCKER_HOST, a bug) is raised: it fails."""
    if not os.environ.get("DOCKER_HOST"):
        return "DOCKER_HOST is not set: start a daemon with `make docker-up` and export its line"
    try:
        connect(timeout_s=5).close()
    except NoDockerDaemon as exc:
        return str(exc)
    return None


def _docker_client():  # type: ignore[no-untyped-def]
    reason = docker_skip_reason()
    if reason:
        pytest.skip(reason)
    return connect()


@pytest.fixture(params=["process", "docker"])
def runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    if request.param == "docker" and (reason := docker_skip_reason()):
        pytest.skip(reason)
    rt = make_runtime(request.param, str(tmp_path), f"conformance-{uuid.uuid4().hex[:8]}")
    try:
        yield rt
    finally:
        rt.close()


def _answers(url: str, timeout: float) -> bool:
    try:
        return httpx.get(url, timeout=timeout, trust_env=False).is_success
    except httpx.HTTPError:
        return False


def _our_containers(session_id: str) -> list[object]:
    client = _docker_client()
    try:
        found: list[object] = client.containers.list(
            all=True, filters={"label": f"pytest-wedge.session={session_id}"}
        )
        return found
    finally:
        client.close()


@pytest.mark.timeout(180)
def test_runtime_contract(runtime: Runtime, tmp_path: Path) -> None:
    (port,) = PortAllocator().take(1)
    component = server_component(find_toxiproxy(None, ROOT), port)
    name, url = component.name, component.ready_url
    assert runtime.state(name) == "absent" and runtime.exit_code(name) is None

    runtime.start(component)
    assert wait_ready(runtime, [component], timeout_s=60) < 60
    assert runtime.state(name) == "running" and runtime.running(name)
    assert runtime.exit_code(name) is None
    pid = runtime.pid(name)
    assert pid is not None and psutil.pid_exists(pid)
    assert Path(psutil.Process(pid).cmdline()[0]).name == "toxiproxy-server"

    # Paused: the kernel still accepts the connection, but nothing answers.
    runtime.pause(name)
    assert runtime.state(name) == "paused" and runtime.running(name)
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    with pytest.raises(httpx.TimeoutException):
        httpx.get(url, timeout=0.5, trust_env=False)

    runtime.resume(name)
    assert runtime.state(name) == "running"
    assert _answers(url, timeout=5)

    logs = runtime.logs(name, tail=20)
    assert logs.strip(), "a started component has log lines"
    log_path = runtime.log_path(name)
    assert log_path is not None and Path(log_path).is_file()

    runtime.kill(name)
    code = runtime.exit_code(name)
    assert code is not None and code != 0
    assert runtime.state(name) == "exited" and not runtime.running(name)
    assert runtime.pid(name) is None
    assert not _answers(url, timeout=1)

    runtime.restart(name)
    wait_ready(runtime, [component], timeout_s=60)
    assert runtime.state(name) == "running"
    new_pid = runtime.pid(name)
    assert new_pid is not None and new_pid != pid and psutil.pid_exists(new_pid)

    runtime.stop(name)
    assert runtime.state(name) == "exited" and runtime.exit_code(name) is not None
    assert Path(log_path).stat().st_size > 0, "logs outlive the component"

    runtime.restart(name)  # close must clean up a running component too
    wait_ready(runtime, [component], timeout_s=60)
    last_pid = runtime.pid(name)
    session_id = getattr(runtime, "session_id", "")
    runtime.close()
    assert runtime.state(name) == "absent"
    if last_pid is not None:
        wait_for(
            lambda: not psutil.pid_exists(last_pid),
            timeout_s=10,
            interval_s=0.05,
            what=f"{name}'s last process ({last_pid}) to exit after close()",
        )
    if runtime.name == "docker":
        assert _our_containers(session_id) == []


@pytest.mark.timeout(120)
def test_sweep_removes_dead_owners_containers_only() -> None:
    client = _docker_client()
    from pytest_wedge.runtime.docker import (
        LABEL_COMPONENT,
        LABEL_OWNER,
        LABEL_PIDNS,
        LABEL_SESSION,
        pid_namespace,
        sweep_containers,
    )
    from pytest_wedge.runtime.images import ensure_image
    from pytest_wedge.runtime.owner_tags import owner_tag, process_identity

    # An owner that really lived and is now gone (a made-up PID could be a live process).
    gone = psutil.Process(subprocess.Popen([sys.executable, "-c", "pass"]).pid)
    dead_owner = f"{gone.pid}:{process_identity(gone.pid)}"
    gone.wait(timeout=10)
    image = ensure_image(client).tag
    command = [sys.executable, "-c", "import time; time.sleep(300)"]
    session = f"sweep-{uuid.uuid4().hex[:8]}"

    def run(labels: dict[str, str]) -> object:
        return client.containers.run(
            image, command, detach=True, init=True, network_mode="host", labels=labels
        )

    base = {LABEL_SESSION: session, LABEL_COMPONENT: "x", LABEL_PIDNS: pid_namespace()}
    dead = run({**base, LABEL_OWNER: dead_owner})
    alive = run({**base, LABEL_OWNER: owner_tag()})
    stranger = run({})
    try:
        removed = sweep_containers(client)
        assert dead.name in removed  # type: ignore[attr-defined]
        ids = {c.id for c in client.containers.list(all=True)}
        assert dead.id not in ids  # type: ignore[attr-defined]
        assert alive.id in ids and stranger.id in ids  # type: ignore[attr-defined]
    finally:
        for container in (dead, alive, stranger):
            with contextlib.suppress(Exception):
                container.remove(force=True)  # type: ignore[attr-defined]
        client.close()
