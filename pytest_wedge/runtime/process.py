"""The process runtime: each component a local process in its own process group, logging to a
file, tagged with the session and dying with its parent (what a SIGKILLed session left behind
is swept by the next one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from pytest_wedge.errors import AlreadyRunningError, ComponentControlError, ComponentStartError
from pytest_wedge.runtime.interface import (
    OWNER_ENV,
    SESSION_ENV,
    ComponentState,
    LogFiles,
    wait_stopped,
)
from pytest_wedge.runtime.launcher import Launcher, Proc
from pytest_wedge.runtime.owner_tags import owner_tag
from pytest_wedge.spec.topology import ComponentSpec
from pytest_wedge.waiting import poll

# SIGKILL cannot be caught, yet a process is gone only once the kernel has ended every thread
# and freed its memory, and its parent hears of it only then. A real vLLM engine's API server
# (the group's leader) was a zombie 11 ms after SIGKILL but reported its exit after 0.11-0.34 s
# in three kills and 27.5 s in a fourth (2 cores at load 5, the other engine's NIXL thread
# spinning): the old 5 s wait gave up silently and a Kill's verification saw the leader still
# running. Twice the longest seen; a process left after that is stuck in the kernel (state D),
# which no longer wait would fix.
KILL_GONE_S = 60.0


@dataclass(frozen=True)
class _Child:
    """One started component. Replaced whole on every change, so a reader never sees the
    process of one start with the paused flag of another."""

    spec: ComponentSpec
    proc: Proc
    paused: bool = False

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


class ProcessRuntime(LogFiles):
    """Runtime protocol over local processes. An action holds its component's lock, so a
    watchdog's restart and a fault's pause never interleave; reads take none (one whole
    :class:`_Child` record)."""

    name = "process"

    def __init__(self, artifacts_dir: Path, session_id: str) -> None:
        self.logs_dir = artifacts_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.session_id = session_id
        self.launcher = Launcher(self.logs_dir, {SESSION_ENV: session_id, OWNER_ENV: owner_tag()})
        self._children: dict[str, _Child] = {}
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def _locked(self, name: str) -> Iterator[_Child | None]:
        """Hold ``name``'s lock (re-entrant: restart calls kill and start under it)."""
        with self._locks_guard:
            lock = self._locks.setdefault(name, threading.RLock())
        with lock:
            yield self._children.get(name)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, component: ComponentSpec) -> None:
        """Start ``component``; a running or paused name raises (it would be orphaned)."""
        with self._locked(component.name) as child:
            if self._closed:
                raise ComponentStartError(
                    f"Cannot start {component.name}: its process runtime is closed",
                    facts={"session": self.session_id},
                    fix="start components only while their session is open",
                )
            if child is not None and child.alive:
                raise AlreadyRunningError(
                    f"Cannot start {component.name}: it is already running",
                    facts={
                        "pid": child.proc.pid,
                        "state": self.state(component.name),
                        "running command": " ".join(child.spec.argv),
                    },
                    fix=f"call restart({component.name!r}) to replace it, or stop it first",
                )
            log_path = self.logs_dir / f"{component.name}.log"
            with open(log_path, "ab") as log:
                log.write(f"--- start: {' '.join(component.argv)}\n".encode())
            proc = self.launcher.launch(component, log_path)
            self._children[component.name] = _Child(component, proc)

    def warm_up(self, python: str, listen_ports: Sequence[int] = ()) -> frozenset[int]:
        """See :meth:`Launcher.warm_up`; nothing once the runtime is closed."""
        return frozenset() if self._closed else self.launcher.warm_up(python, listen_ports)

    def release_idle(self) -> None:
        """Close the stub fork servers that run no worker (a topology closed without its
        runtime, as a session does when it evicts one); the next stub start boots a new one."""
        self.launcher.release_idle()

    @staticmethod
    def _signal(child: _Child, sig: signal.Signals) -> bool:
        """Signal the child's process group; False when it has already exited."""
        if not child.alive:
            return False
        try:
            os.killpg(child.proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self, name: str, grace_s: float = 2.0) -> None:
        """Graceful stop (SIGTERM), then SIGKILL after ``grace_s`` (as the kubelet's
        terminationGracePeriodSeconds); smg alone takes ~5 s to drain."""
        with self._locked(name) as child:
            if child is None:
                return
            self.resume(name)
            self._signal(child, signal.SIGTERM)
            try:
                child.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.kill(name)

    def kill(self, name: str) -> None:
        """SIGKILL the component's process group; returns once its process is reaped and no
        other process of its group is left but zombies (they hold no memory or port), or
        raises :class:`ComponentControlError` after :data:`KILL_GONE_S`."""
        with self._locked(name) as child:
            if child is None:
                return
            if not self._signal(child, signal.SIGKILL):  # a stopped (paused) process dies too
                # Its leader is gone, not always its group: vLLM's API server exits when its
                # EngineCore dies, and its Worker was seen still running a minute later.
                _kill_left_in_group(child.proc.pid, self.session_id)
            self._children[name] = replace(child, paused=False)
            _wait_gone(name, child.proc, KILL_GONE_S)

    def pause(self, name: str) -> None:
        """SIGSTOP, returning once the process is stopped; a no-op when it is not running."""
        with self._locked(name) as child:
            if child is not None and self._signal(child, signal.SIGSTOP):
                self._children[name] = replace(child, paused=True)
                # Every process of the group, not only its leader: an engine's EngineCore and
                # Worker stop when the kernel next schedules each, and a Pause's check (and the
                # next request) would otherwise find one still running.
                for pid in {child.proc.pid, *(p.pid for p in _group(child.proc.pid))}:
                    wait_stopped(name, pid)

    def resume(self, name: str) -> None:
        with self._locked(name) as child:
            if child is not None and child.paused:
                self._signal(child, signal.SIGCONT)
                self._children[name] = replace(child, paused=False)

    def restart(self, name: str) -> None:
        """Kill and start again from the same spec: a new process with a new PID."""
        with self._locked(name) as child:
            if child is None:
                raise KeyError(name)
            self.kill(name)
            self.start(child.spec)

    # -- introspection ---------------------------------------------------------------------
    def pid(self, name: str) -> int | None:
        child = self._children.get(name)
        return child.proc.pid if child is not None and child.alive else None

    def exit_code(self, name: str) -> int | None:
        child = self._children.get(name)
        return None if child is None else child.proc.poll()

    def state(self, name: str) -> ComponentState:
        child = self._children.get(name)
        if child is None:
            return "absent"
        if not child.alive:
            return "exited"
        return "paused" if child.paused else "running"

    def logs(self, name: str, tail: int = 40) -> str:
        return self.tail_log_file(name, tail)

    def pids(self) -> list[int]:
        return [c.proc.pid for c in list(self._children.values()) if c.alive]

    def close(self) -> None:
        """SIGKILL everything this runtime started (teardown never waits on a drain); a start
        racing ``close`` is killed here or raises. Every component is signalled before any is
        waited on, so their exits overlap; the first that does not go is raised at the end."""
        self._closed = True
        with self._locks_guard:
            names = list(self._locks)
        killed: list[tuple[str, Proc]] = []
        for name in names:
            with self._locked(name) as child:
                if child is not None:
                    if not self._signal(child, signal.SIGKILL):
                        _kill_left_in_group(child.proc.pid, self.session_id)
                    killed.append((name, child.proc))
                self._children.pop(name, None)
        failures: list[ComponentControlError] = []
        for name, proc in killed:
            try:
                _wait_gone(name, proc, KILL_GONE_S)
            except ComponentControlError as exc:
                failures.append(exc)
        self.launcher.close()
        if failures:
            raise failures[0]


def _wait_gone(name: str, proc: Proc, timeout_s: float) -> None:
    """Return once ``proc`` (its group's leader, SIGKILLed) is reaped and its group holds no
    process but zombies; raise, saying which processes are left, after
    ``timeout_s``."""
    pgid = proc.pid
    reaped = poll(lambda: proc.poll() is not None, timeout_s=timeout_s, interval_s=0.01)
    left = poll(
        lambda: not _group(pgid),
        timeout_s=max(0.0, timeout_s - reaped.elapsed_s),
        interval_s=0.01,
    )
    if reaped.met and left.met:
        return
    raise ComponentControlError(
        f"{name} was still there {timeout_s:.0f} s after SIGKILL",
        facts={
            "pid": pgid,
            "leader": "reaped" if reaped.met else "not reaped (some thread still exiting)",
            "processes of its group": ", ".join(_group_alive(pgid)) or "none",
        },
        fix="a process that outlives SIGKILL is stuck in the kernel (state D: a disk, NFS or "
        "FUSE wait, or a frozen cgroup); read `cat /proc/PID/task/*/stack` as root, and "
        "whether the machine is swapping or out of memory (`dmesg`)",
    )


def _group(pgid: int) -> list[psutil.Process]:
    """The processes of group ``pgid`` that are not zombies."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
    return members


def _group_alive(pgid: int) -> list[str]:
    """The processes of group ``pgid`` that are not zombies, as ``pid name (status)``."""
    alive = []
    for process in _group(pgid):
        with contextlib.suppress(psutil.Error):
            alive.append(f"{process.pid} {process.name()} ({process.status()})")
    return alive


def _kill_left_in_group(pgid: int, session_id: str) -> None:
    """SIGKILL what is left of group ``pgid`` once its leader is gone, each process only if it
    carries this runtime's session mark (a group's id can be taken again once it is empty)."""
    for process in _group(pgid):
        with contextlib.suppress(psutil.Error):
            if process.environ().get(SESSION_ENV) == session_id:
                process.kill()
