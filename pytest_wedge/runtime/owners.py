"""Whose a process is: the owner tag each child of a runtime carries in its environment, and
the sweep of tagged processes whose owning pytest is gone (the next session's safety net behind
PR_SET_PDEATHSIG)."""

from __future__ import annotations

import contextlib

import psutil

from pytest_wedge.runtime.base import OWNER_ENV


def owner_tag() -> str:
    """``pid:create_time`` of this process: a PID alone can be reused after a SIGKILL."""
    me = psutil.Process()
    return f"{me.pid}:{me.create_time():.3f}"


def owner_alive(tag: str) -> bool:
    pid_text, _, created = tag.partition(":")
    try:
        owner = psutil.Process(int(pid_text))
        return f"{owner.create_time():.3f}" == created
    except (ValueError, psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def sweep_leftovers() -> list[int]:
    """Kill processes tagged by a pytest-wedge session whose owning pytest is gone.

    Only processes carrying our session tag are touched, and only when their owner is dead,
    so a concurrent session's children are safe.
    """
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
