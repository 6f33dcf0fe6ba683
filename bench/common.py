"""Shared helpers: medians, printing, and process-tree memory."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

import psutil

RUNS = 5


def median_of(fn: Callable[[], float], runs: int = RUNS) -> tuple[float, list[float]]:
    values = [fn() for _ in range(runs)]
    return statistics.median(values), values


def report(name: str, value: float, runs: list[float] | None = None, unit: str = "") -> None:
    spread = f"  # runs: {', '.join(f'{v:.3f}' for v in runs)}" if runs else ""
    print(f"{name}: {value:.3f}{unit}{spread}", flush=True)


def tree_rss_mb(pids: Iterable[int]) -> float:
    """Resident memory of processes and all their children, in MB."""
    seen: set[int] = set()
    total = 0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in procs:
            if proc.pid in seen:
                continue
            seen.add(proc.pid)
            try:
                total += proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
    return total / 1e6
