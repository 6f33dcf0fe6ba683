"""Noisy neighbours for a benchmark: the stub catalog looping under ``-n N`` beside it, and
busy-loop processes, as a loaded CI runner has them. ``catalog_load`` starts them, waits until
the catalog's xdist workers run, and ends them (the catalog's process group by Ctrl-C, the
busy loops by PID) when its block ends. Both are bounded: the catalog in rounds, the busy
loops in seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

from pytest_wedge.waiting import wait_for

LOAD_START_TIMEOUT_S = 120.0
BUSY_LIMIT_S = 4 * 3600
# The last argument of an xdist worker (execnet's popen gateway).
XDIST_WORKER_BOOTSTRAP = "import sys;exec(eval(sys.stdin.readline()))"


def catalog_command(workers: int, rounds: int) -> str:
    # The loop ends on Ctrl-C too, once the pytest it waits on has cleaned up.
    return (
        "trap 'exit 130' INT; "
        f"for round in $(seq {rounds}); do "
        f"{sys.executable} -m pytest --wedge-scenarios -n {workers} -q -p no:cacheprovider; done"
    )


def _xdist_workers(load: subprocess.Popen[bytes]) -> int:
    try:
        tree = psutil.Process(load.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    return sum(1 for p in tree if _cmdline(p)[-1:] == [XDIST_WORKER_BOOTSTRAP])


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _busy_loop() -> subprocess.Popen[bytes]:
    spin = f"import time\nend = time.time() + {BUSY_LIMIT_S}\nwhile time.time() < end: pass"
    return subprocess.Popen([sys.executable, "-c", spin])


@contextmanager
def catalog_load(log: Path, *, workers: int = 2, rounds: int = 4, busy: int = 0) -> Iterator[None]:
    """The stub catalog under ``-n workers`` (at most ``rounds`` times) and ``busy`` busy
    loops beside the block, from when all the catalog's xdist workers run to its end."""
    spinning = [_busy_loop() for _ in range(busy)]
    with open(log, "ab") as out:
        load = subprocess.Popen(
            ["bash", "-c", catalog_command(workers, rounds)],
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        wait_for(
            lambda: _xdist_workers(load) >= workers or load.poll() is not None,
            timeout_s=LOAD_START_TIMEOUT_S,
            interval_s=0.5,
            what=f"the catalog's {workers} xdist workers",
        )
        if load.poll() is not None:
            raise RuntimeError(f"the catalog load ended at once (exit {load.returncode}): {log}")
        yield
    finally:
        for process in spinning:
            process.kill()
            process.wait()
        # Ctrl-C, which the plugin answers by ending what its sessions started (their own
        # process groups, which a signal to this group does not reach).
        with suppress(ProcessLookupError):
            os.killpg(load.pid, signal.SIGINT)
        try:
            load.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(load.pid, signal.SIGKILL)
            load.wait()
