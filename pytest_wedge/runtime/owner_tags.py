"""Whose a process is: the owner tag each child of a runtime carries in its environment, and
the sweep of tagged processes whose owning pytest is gone (the next session's safety net behind
PR_SET_PDEATHSIG)."""

from __future__ import annotations

import contextlib
import os

import psutil

from pytest_wedge.runtime.interface import OWNER_ENV

# A start given as a wall-clock time (psutil's create_time, where /proc has no start ticks)
# matches within this much: it is the boot time plus the start ticks, and the boot time moves
# with every step of the wall clock.
WALL_CLOCK_SLACK_S = 1.0


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22; None without
    /proc): a wall-clock create time moves when the clock is stepped, and live owners would
    then read as dead."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def process_identity(pid: int) -> str:
    """``pid``'s start, as a tag compares it: ``t<ticks since boot>``, else its create time.
    ``psutil.NoSuchProcess`` when it is gone."""
    ticks = start_ticks(pid)
    return f"t{ticks}" if ticks is not None else f"{psutil.Process(pid).create_time():.3f}"


def same_process(pid: int, identity: str) -> bool:
    """Whether ``pid`` is still the process that had ``identity`` (a PID can be reused)."""
    try:
        if identity.startswith("t"):
            return start_ticks(pid) == int(identity[1:])
        return abs(psutil.Process(pid).create_time() - float(identity)) < WALL_CLOCK_SLACK_S
    except (ValueError, psutil.Error):
        return False


def owner_tag() -> str:
    """``pid:start`` of this process (see :func:`process_identity`)."""
    return f"{os.getpid()}:{process_identity(os.getpid())}"


def owner_alive(tag: str) -> bool:
    pid_text, _, identity = tag.partition(":")
    try:
        return same_process(int(pid_text), identity)
    except ValueError:
        return False


def sweep_leftovers() -> list[int]:
    """Kill the processes tagged by a pytest-wedge session whose owning pytest is gone."""
    swept: list[int] = []
    for proc in psutil.process_iter(["pid"]):
        try:
            tag = proc.environ().get(OWNER_ENV)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
        if tag is None or owner_alive(tag):
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
            swept.append(proc.pid)
    return swept
