"""The Runtime protocol and the one readiness loop every runtime shares."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import httpx
import psutil

from pytest_wedge.errors import ComponentControlError, ComponentStartError
from pytest_wedge.loopback import loopback_client
from pytest_wedge.spec.topology import ComponentSpec
from pytest_wedge.waiting import MONOTONIC, Clock, poll

ComponentState = Literal["running", "paused", "exited", "absent"]
SESSION_ENV = "PYTEST_WEDGE_SESSION"
OWNER_ENV = "PYTEST_WEDGE_OWNER"
# The first pause of a readiness wait (doubled after each look, up to the wait's interval).
FIRST_POLL_S = 0.002


@runtime_checkable
class Runtime(Protocol):
    """Starts and controls components (process, docker). ``start`` returns at once (readiness:
    :func:`wait_ready`); starting a running name raises :class:`AlreadyRunningError`; a failed
    action raises :class:`ComponentControlError`; acting on a gone component is a no-op.
    """

    name: str

    def start(self, component: ComponentSpec) -> None: ...
    def stop(self, name: str, grace_s: float = 2.0) -> None: ...
    def kill(self, name: str) -> None: ...
    def pause(self, name: str) -> None: ...
    def resume(self, name: str) -> None: ...
    def restart(self, name: str) -> None: ...
    def pid(self, name: str) -> int | None: ...
    def exit_code(self, name: str) -> int | None: ...
    def state(self, name: str) -> ComponentState: ...
    def logs(self, name: str, tail: int = 40) -> str: ...
    def log_path(self, name: str) -> str | None: ...
    def running(self, name: str) -> bool: ...
    def close(self) -> None: ...


class LogFiles:
    """What both runtimes share: one log file per component under ``logs_dir``."""

    logs_dir: Path

    def state(self, name: str) -> ComponentState:
        raise NotImplementedError

    def running(self, name: str) -> bool:
        return self.state(name) in ("running", "paused")

    def log_path(self, name: str) -> str | None:
        path = self.logs_dir / f"{name}.log"
        return str(path) if path.exists() else None

    def tail_log_file(self, name: str, tail: int) -> str:
        """The last ``tail`` lines of the component's log file (reads at most 64 KiB)."""
        path = self.logs_dir / f"{name}.log"
        if not path.exists():
            return ""
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            lines = log.read().decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-tail:])


def wait_ready(
    runtime: Runtime,
    components: Sequence[ComponentSpec],
    *,
    timeout_s: float = 20.0,
    poll_s: float = 0.02,
    clock: Clock = MONOTONIC,
) -> float:
    """Poll every ready URL until all answer 2xx under one deadline (a component that exits is
    reported at once); returns the seconds it took."""
    pending = {c.name: c for c in components}
    last_error: dict[str, str] = {}
    with loopback_client(timeout=1.0) as client:

        def all_ready() -> bool:
            for name, component in list(pending.items()):
                code = runtime.exit_code(name)
                if code is not None:
                    raise ComponentStartError(
                        f"{name} exited during start-up with exit code {code}",
                        facts={
                            "command": " ".join(component.argv),
                            "log": runtime.log_path(name) or "(none)",
                        },
                        log_tail=runtime.logs(name, tail=25),
                        fix=f"read the log tail above; run the command by hand to see {name} fail",
                    )
                try:
                    response = client.get(component.ready_url)
                except httpx.HTTPError as exc:
                    last_error[name] = f"{type(exc).__name__}: {exc}"
                    if runtime.state(name) == "absent":  # e.g. a session closed under the wait
                        raise ComponentStartError(
                            f"{name} is gone before it was ready: its runtime no longer runs it",
                            facts={
                                "command": " ".join(component.argv),
                                "last answer": last_error[name],
                            },
                            fix="nothing, if its session or topology was being closed; else "
                            "something stopped it from outside pytest-wedge",
                        ) from None
                    continue
                if response.is_success:
                    del pending[name]
                else:
                    last_error[name] = f"HTTP {response.status_code} {response.text[:200]}"
            return not pending

        # A stub or Toxiproxy answers within tens of milliseconds of its start: looks at
        # 2, 4, 8... ms see it within a few of that, where a fixed 20 ms added 10 on average.
        polled = poll(
            all_ready,
            timeout_s=timeout_s,
            interval_s=poll_s,
            clock=clock,
            first_interval_s=FIRST_POLL_S,
        )
    if polled.met:
        return polled.elapsed_s
    name, component = next(iter(pending.items()))
    raise ComponentStartError(
        f"{', '.join(pending)} not ready after {timeout_s:.1f} s",
        facts={
            "checked": ", ".join(c.ready_url for c in pending.values()),
            "last answer": "; ".join(f"{n}: {e}" for n, e in last_error.items() if n in pending)
            or "none",
            "command": " ".join(component.argv),
        },
        log_tail=runtime.logs(name, tail=25),
        fix="read the log tail; a router stays not-ready until a prefill and a decode "
        "worker register, so check the workers' logs too",
    )


def _status(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"


def wait_stopped(name: str, pid: int, timeout_s: float = 5.0) -> None:
    """Return once ``pid`` is stopped or gone: SIGSTOP acts when the kernel next schedules it,
    and a Pause that returned early would let the next request through."""
    held = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, "gone")
    if not poll(lambda: _status(pid) in held, timeout_s=timeout_s, interval_s=0.005).met:
        raise ComponentControlError(
            f"{name} did not stop within {timeout_s:.0f} s of SIGSTOP",
            facts={"pid": pid, "state": _status(pid)},
            fix="check the component's log and whether something resumed it (SIGCONT)",
        )
