"""The docker runtime: each component a host-networked container running the process runtime's
command line from an image of this host's files. The engine may be remote: nothing is
bind-mounted, and host PIDs are used only when it is local. ``start`` returns at once; every
other call on that component first waits for its start, and raises its failure.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from pytest_wedge.errors import AlreadyRunningError, ComponentControlError, ComponentStartError
from pytest_wedge.runtime.dockerd import NoDockerDaemon, connect, local_engine
from pytest_wedge.runtime.interface import OWNER_ENV, SESSION_ENV, ComponentState, LogFiles
from pytest_wedge.runtime.owner_tags import owner_alive, owner_tag
from pytest_wedge.runtime.programs import check_bare_name, in_image, program_roots
from pytest_wedge.spec.topology import ComponentSpec

LABEL_SESSION = "pytest-wedge.session"
LABEL_OWNER = "pytest-wedge.owner"
LABEL_COMPONENT = "pytest-wedge.component"
# Owner PIDs mean something only in the PID namespace (and boot) that wrote them.
LABEL_PIDNS = "pytest-wedge.pidns"
__all__ = ["DockerRuntime", "NoDockerDaemon", "connect"]
_STATES: dict[str, ComponentState] = {"paused": "paused", "dead": "exited", "removing": "exited"}
_STATES |= {"running": "running", "created": "running", "restarting": "running", "exited": "exited"}


def pid_namespace() -> str:
    with open("/proc/sys/kernel/random/boot_id") as fh:
        boot = fh.read().strip()
    return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"


class DockerRuntime(LogFiles):
    """Runtime protocol over docker-py containers."""

    name = "docker"

    def __init__(self, artifacts_dir: Path, session_id: str, *, client: Any = None) -> None:
        from pytest_wedge.runtime.images import ensure_image

        self.logs_dir = artifacts_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.session_id = session_id
        self._owner = owner_tag()
        self._pidns = pid_namespace()
        self._client = client or connect()
        self._local_pids = local_engine(self._client)
        self._image = ensure_image(self._client)
        self._extras: set[str] = set()
        self._prefix = f"pytest-wedge-{session_id}-{uuid.uuid4().hex[:6]}"
        self._specs: dict[str, ComponentSpec] = {}
        self._containers: dict[str, Any] = {}
        self._pending: dict[str, Future[None]] = {}
        self._followers: dict[str, threading.Thread] = {}
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="wedge-docker")

    @property
    def image(self) -> str:
        return self._image.tag

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, component: ComponentSpec) -> None:
        if self._is_up(component.name):
            raise AlreadyRunningError(
                f"Cannot start {component.name}: it is already running",
                facts={"container": f"{self._prefix}-{component.name}"},
                fix=f"call restart({component.name!r}) to replace it, or stop it first",
            )
        program = component.argv[0]
        check_bare_name(component.name, program, self._image.paths, self.image)
        if os.path.isabs(program) and not in_image(program, self._image.paths):
            from pytest_wedge.runtime.images import ensure_image

            # A binary outside the venv and the checkout (e.g. --wedge-toxiproxy=/opt/...), or a
            # router's isolated venv. Kept: a later image must not drop an earlier one's extras.
            self._extras.update(program_roots(program))
            self._image = ensure_image(self._client, sorted(self._extras))
        with self._lock:
            self._specs[component.name] = component
            self._pending[component.name] = self._pool.submit(self._run, component)

    def _run(self, component: ComponentSpec) -> None:
        import docker.errors

        name = component.name
        self._remove(name)
        with open(self.logs_dir / f"{name}.log", "ab") as log:
            log.write(f"--- start ({self.image}): {' '.join(component.argv)}\n".encode())
        tags = {SESSION_ENV: self.session_id, OWNER_ENV: self._owner, "PYTHONUNBUFFERED": "1"}
        env = {**dict(component.env), **tags, **package_path()}
        labels = {LABEL_SESSION: self.session_id, LABEL_OWNER: self._owner, LABEL_COMPONENT: name}
        try:
            container = self._client.containers.create(
                self.image,
                command=list(component.argv),
                name=f"{self._prefix}-{name}",
                environment=env,
                network_mode="host",
                init=True,  # without it Python as PID 1 ignores SIGTERM and stop() takes 10 s
                labels={**labels, LABEL_PIDNS: self._pidns},
            )
            self._containers[name] = container
            container.start()
        except docker.errors.DockerException as exc:
            raise ComponentStartError(
                f"Could not start {name} in a container",
                facts={"image": self.image, "command": " ".join(component.argv), "error": exc},
                fix="'executable file not found' means the program is not in the image: give "
                "its absolute host path (it is then added), or use --wedge-runtime=process",
            ) from exc
        follower = threading.Thread(
            target=self._follow, args=(name, container), daemon=True, name=f"wedge-logs-{name}"
        )
        self._followers[name] = follower
        follower.start()

    def _follow(self, name: str, container: Any) -> None:
        # Ends by itself when the container exits or is removed.
        with contextlib.suppress(Exception), open(self.logs_dir / f"{name}.log", "ab") as log:
            for chunk in container.logs(stream=True, follow=True):
                log.write(chunk)
                log.flush()

    def _settle(self, name: str) -> Any:
        """The component's container once its start finished; a failed start raises here."""
        pending = self._pending.pop(name, None)
        if pending is not None:
            pending.result()
        return self._containers.get(name)

    def _is_up(self, name: str) -> bool:
        """Starting, running or paused; never raises an earlier failed start (a retry's)."""
        import docker.errors

        pending = self._pending.get(name)
        if pending is not None and not pending.done():
            return True
        container = self._containers.get(name)
        if container is None:
            return False
        try:
            container.reload()
        except docker.errors.NotFound:
            return False
        return container.status in ("running", "paused", "restarting")

    def _remove(self, name: str) -> None:
        container = self._containers.pop(name, None)
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        follower = self._followers.pop(name, None)
        if follower is not None:
            follower.join(timeout=2.0)

    def _reload(self, name: str) -> Any:
        import docker.errors

        container = self._settle(name)
        if container is None:
            return None
        try:
            container.reload()
        except docker.errors.NotFound:
            return None
        return container

    @contextlib.contextmanager
    def _acting(self, name: str, action: str, container: Any) -> Iterator[None]:
        """Gone or already stopped is what the action wanted; any other failure is raised."""
        import docker.errors
        import requests.exceptions

        try:
            yield
        except docker.errors.NotFound:
            return  # removed meanwhile
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            conflict = isinstance(exc, docker.errors.APIError) and exc.status_code == 409
            if conflict and "is not running" in str(exc):
                return  # exited between our look and the call
            raise ComponentControlError(
                f"Docker could not {action} {name}",
                facts={
                    "component": name,
                    "container": getattr(container, "name", "?"),
                    "docker error": f"{type(exc).__name__}: {exc}",
                },
                fix="check the daemon (`docker ps -a`, the dockerd log); until then faults "
                f"that {action} {name} do not take effect",
            ) from exc

    def stop(self, name: str, grace_s: float = 2.0) -> None:
        """Graceful stop (SIGTERM, SIGKILL after ``grace_s``, in whole seconds as Docker counts
        them; smg alone takes ~5 s to drain)."""
        container = self._reload(name)
        if container is None:
            return
        self.resume(name)
        with self._acting(name, "stop", container):
            container.stop(timeout=max(0, math.ceil(grace_s)))

    def kill(self, name: str) -> None:
        container = self._reload(name)
        if container is None or container.status not in ("running", "paused", "created"):
            return
        with self._acting(name, "kill", container):
            container.kill()  # SIGKILL; a paused container dies too
            container.wait(timeout=5)  # a container that outlives SIGKILL raises here

    def pause(self, name: str) -> None:
        container = self._reload(name)
        if container is not None and container.status == "running":
            with self._acting(name, "pause", container):
                container.pause()

    def resume(self, name: str) -> None:
        container = self._reload(name)
        if container is not None and container.status == "paused":
            with self._acting(name, "resume", container):
                container.unpause()

    def restart(self, name: str) -> None:
        """Remove and create again: a restarted component gets a new container and PID."""
        self._settle(name)
        self.kill(name)
        self.start(self._specs[name])

    # -- introspection ---------------------------------------------------------------------
    def pid(self, name: str) -> int | None:
        """The program's host PID (not docker-init's); None when the engine is not local."""
        if not self._local_pids:
            return None
        container = self._reload(name)
        if container is None or container.status not in ("running", "paused"):
            return None
        init_pid = int(container.attrs["State"]["Pid"])
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(init_pid).children()
            if len(children) == 1:
                return children[0].pid
        return init_pid or None

    def exit_code(self, name: str) -> int | None:
        container = self._reload(name)
        if container is None or _STATES.get(container.status) != "exited":
            return None
        return int(container.attrs["State"]["ExitCode"])

    def state(self, name: str) -> ComponentState:
        container = self._reload(name)
        return "absent" if container is None else _STATES.get(container.status, "exited")

    def logs(self, name: str, tail: int = 40) -> str:
        container = self._reload(name)
        if container is not None:
            with contextlib.suppress(Exception):
                text: str = container.logs(tail=tail).decode("utf-8", "replace")
                return text.rstrip("\n")
        return self.tail_log_file(name, tail)

    def pids(self) -> list[int]:
        return [pid for name in list(self._containers) if (pid := self.pid(name)) is not None]

    def close(self) -> None:
        """Remove every container of this runtime; forced, so teardown never waits on a drain."""
        for name in list(self._pending):
            with contextlib.suppress(Exception):
                self._settle(name)
        list(self._pool.map(self._remove, list(self._containers)))
        self._pool.shutdown(wait=True)
        with contextlib.suppress(Exception):
            self._client.close()


def package_path() -> dict[str, str]:
    """``PYTHONPATH`` when this pytest_wedge is not the venv's own (an editable install): the
    image carries the running package at its host path, and the stubs must import that one."""
    package = Path(__file__).resolve().parents[1]
    if package.is_relative_to(Path(sys.prefix)):
        return {}
    return {"PYTHONPATH": str(package.parent)}


def sweep_containers(client: Any = None) -> list[str]:
    """Remove containers of sessions whose owner (in this PID namespace) is gone."""
    own_client = client is None
    client = client or connect()
    here = pid_namespace()
    removed: list[str] = []
    for container in client.containers.list(all=True, filters={"label": LABEL_SESSION}):
        labels = container.labels or {}
        owner = labels.get(LABEL_OWNER)
        if owner is None or labels.get(LABEL_PIDNS) != here or owner_alive(owner):
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.name)
    if own_client:
        client.close()
    return removed
