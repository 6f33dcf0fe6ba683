"""The docker runtime never swallows a failed action: a Kill fault that did nothing says so.

No daemon is needed: the runtime gets a fake docker client whose containers fail the way
docker-py fails (``docker.errors.APIError`` built from a real HTTP response), and the image
step is replaced, so these run wherever docker-py is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

docker_errors = pytest.importorskip("docker.errors")
requests = pytest.importorskip("requests")

from pytest_wedge.errors import AlreadyRunningError, ComponentControlError  # noqa: E402
from pytest_wedge.faults.process_actions import Kill  # noqa: E402
from pytest_wedge.runtime import images  # noqa: E402
from pytest_wedge.runtime.docker import DockerRuntime  # noqa: E402
from pytest_wedge.spec.topology import ComponentSpec, TopologySpec  # noqa: E402


def api_error(status: int, explanation: str) -> Exception:
    response = requests.Response()
    response.status_code = status
    response.reason = {404: "Not Found", 409: "Conflict", 500: "Internal Server Error"}[status]
    response.url = "http+docker://localhost/v1.47/containers/abc/kill"
    error_class = docker_errors.NotFound if status == 404 else docker_errors.APIError
    error: Exception = error_class("docker said no", response=response, explanation=explanation)
    return error


class FakeContainer:
    """A container whose calls succeed or raise what the test says; ``calls`` records them."""

    def __init__(self, status: str = "running", **failures: Exception) -> None:
        self.name = "pytest-wedge-test-decode-0"
        self.status = status
        self.failures = failures
        self.calls: list[str] = []
        self.attrs = {"State": {"Pid": 0, "ExitCode": 137}}

    def _call(self, action: str, after: str | None = None) -> None:
        self.calls.append(action)
        if action in self.failures:
            raise self.failures[action]
        if after is not None:
            self.status = after

    def reload(self) -> None:
        self._call("reload")

    def kill(self) -> None:
        self._call("kill", after="exited")

    def wait(self, timeout: float) -> dict[str, int]:
        self._call("wait")
        return {"StatusCode": 137}

    def stop(self, timeout: float) -> None:
        self._call("stop", after="exited")

    def pause(self) -> None:
        self._call("pause", after="paused")

    def unpause(self) -> None:
        self._call("unpause", after="running")

    def remove(self, force: bool = False) -> None:
        self.calls.append("remove")


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DockerRuntime]:
    image = SimpleNamespace(tag="pytest-wedge-test:latest", paths=frozenset())
    monkeypatch.setattr(images, "ensure_image", lambda client, extra=(): image)
    client = SimpleNamespace(close=lambda: None)
    rt = DockerRuntime(tmp_path, "docker-errors", client=client)
    try:
        yield rt
    finally:
        rt._containers.clear()  # fakes: nothing to remove
        rt.close()


def with_container(runtime: DockerRuntime, container: FakeContainer) -> FakeContainer:
    runtime._containers["decode-0"] = container
    return container


def test_a_docker_error_on_kill_surfaces_naming_the_component_and_the_error(
    runtime: DockerRuntime,
) -> None:
    with_container(runtime, FakeContainer(kill=api_error(500, "cannot kill: permission denied")))
    with pytest.raises(ComponentControlError) as raised:
        runtime.kill("decode-0")
    error = raised.value
    assert error.headline == "Docker could not kill decode-0"
    assert error.facts["component"] == "decode-0"
    assert error.facts["container"] == "pytest-wedge-test-decode-0"
    assert "500 Server Error" in str(error.facts["docker error"])
    assert "permission denied" in str(error.facts["docker error"])
    assert isinstance(error.__cause__, docker_errors.APIError)


def test_a_kill_fault_that_docker_refused_fails_instead_of_doing_nothing(
    runtime: DockerRuntime,
) -> None:
    with_container(runtime, FakeContainer(kill=api_error(500, "daemon is shutting down")))
    topology: Any = SimpleNamespace(spec=TopologySpec(), runtime=runtime)
    with pytest.raises(ComponentControlError, match="daemon is shutting down"):
        Kill("decode-0").apply(topology)


def test_a_container_that_outlives_sigkill_is_an_error(runtime: DockerRuntime) -> None:
    container = with_container(runtime, FakeContainer(wait=requests.exceptions.ReadTimeout("5 s")))
    with pytest.raises(ComponentControlError, match="ReadTimeout"):
        runtime.kill("decode-0")
    assert container.calls[-2:] == ["kill", "wait"]


def test_a_docker_error_on_stop_pause_and_resume_surfaces(runtime: DockerRuntime) -> None:
    with_container(runtime, FakeContainer(stop=api_error(500, "stop failed")))
    with pytest.raises(ComponentControlError, match="Docker could not stop decode-0"):
        runtime.stop("decode-0")

    with_container(runtime, FakeContainer(pause=api_error(500, "cgroup freeze failed")))
    with pytest.raises(ComponentControlError, match="Docker could not pause decode-0"):
        runtime.pause("decode-0")

    with_container(runtime, FakeContainer("paused", unpause=api_error(500, "thaw failed")))
    with pytest.raises(ComponentControlError, match="Docker could not resume decode-0"):
        runtime.resume("decode-0")


@pytest.mark.parametrize(
    "failure",
    [
        api_error(404, "No such container: abc"),
        api_error(409, "Cannot kill container: abc: Container abc is not running"),
    ],
    ids=["not found", "already stopped"],
)
def test_a_container_already_gone_or_stopped_is_what_kill_and_stop_wanted(
    runtime: DockerRuntime, failure: Exception
) -> None:
    container = with_container(runtime, FakeContainer(kill=failure, stop=failure))
    runtime.kill("decode-0")
    runtime.stop("decode-0")
    assert "kill" in container.calls and "stop" in container.calls
    assert "wait" not in container.calls  # nothing left to wait for


def test_other_conflicts_are_not_mistaken_for_already_stopped(runtime: DockerRuntime) -> None:
    with_container(runtime, FakeContainer(kill=api_error(409, "container is marked for removal")))
    with pytest.raises(ComponentControlError, match="409 Client Error"):
        runtime.kill("decode-0")


def test_a_gone_container_is_absent_and_kill_stop_are_no_ops(runtime: DockerRuntime) -> None:
    container = with_container(runtime, FakeContainer(reload=api_error(404, "No such container")))
    runtime.kill("decode-0")
    runtime.stop("decode-0")
    assert runtime.state("decode-0") == "absent"
    assert container.calls == ["reload", "reload", "reload"]


def test_starting_a_running_name_raises_instead_of_replacing_it(runtime: DockerRuntime) -> None:
    container = with_container(runtime, FakeContainer("running"))
    component = ComponentSpec(
        name="decode-0", role="decode", argv=("stub",), ready_url="http://127.0.0.1:1/"
    )
    with pytest.raises(AlreadyRunningError, match="decode-0: it is already running"):
        runtime.start(component)
    assert "remove" not in container.calls
