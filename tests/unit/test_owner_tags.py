"""An owner tag names a process by its start on the kernel's boot clock, which no step of the
wall clock moves (a VM restored from a snapshot steps it, and NTP may)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from pytest_wedge.runtime.owner_tags import owner_alive, owner_tag, start_ticks


def test_this_process_is_its_own_live_owner() -> None:
    tag = owner_tag()
    assert tag.startswith(f"{os.getpid()}:t") and owner_alive(tag)


def test_a_tag_survives_a_step_of_the_wall_clock() -> None:
    # A step moves the boot time psutil adds to the start ticks: the same process then has
    # another create_time, but the same start ticks.
    ticks = start_ticks(os.getpid())
    assert ticks is not None
    assert owner_alive(f"{os.getpid()}:t{ticks}")
    stepped = psutil.Process().create_time() + 3600.0
    assert not owner_alive(f"{os.getpid()}:{stepped:.3f}"), "a wall-clock start must match"
    assert owner_alive(f"{os.getpid()}:{psutil.Process().create_time() + 0.4:.3f}")


def test_a_gone_or_reused_pid_is_not_the_owner() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    tag = f"{child.pid}:t{start_ticks(child.pid)}"
    child.wait(timeout=30)
    assert not owner_alive(tag)
    assert not owner_alive(f"{os.getpid()}:t{(start_ticks(os.getpid()) or 0) + 1}")
    assert not owner_alive("not-a-pid:t1") and not owner_alive("123:tx")
