"""Structural checks of a Chrome trace-event JSON, as Perfetto's importer and chrome://tracing
read it (the "Trace Event Format" document): shared by the unit and the Chromium tests."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from typing import Any

PHASES = {"X", "C", "i", "M"}


def problems(trace: dict[str, Any]) -> list[str]:
    """Everything that would make the trace fail to load or draw wrongly; [] when it is sound."""
    found: list[str] = []
    events = trace.get("traceEvents")
    if not isinstance(events, list) or not events:
        return ["traceEvents is missing or empty"]
    named: set[tuple[int, int | None]] = set()
    slices: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    for n, e in enumerate(events):
        ph = e.get("ph")
        if (
            ph not in PHASES
            or not isinstance(e.get("name"), str)
            or not isinstance(e.get("pid"), int)
        ):
            found.append(f"event {n}: bad ph/name/pid: {e}")
            continue
        if ph == "M":
            if e["name"] == "process_name":
                named.add((e["pid"], None))
            elif e["name"] == "thread_name":
                named.add((e["pid"], e.get("tid")))
            if not isinstance(e.get("args"), dict):
                found.append(f"event {n}: metadata without args")
            continue
        if not isinstance(e.get("ts"), int | float) or e["ts"] < 0:
            found.append(f"event {n}: ts must be a number >= 0: {e}")
            continue
        if ph == "X":
            if (
                not isinstance(e.get("tid"), int)
                or not isinstance(e.get("dur"), int | float)
                or e["dur"] < 0
            ):
                found.append(f"event {n}: X needs an int tid and a dur >= 0: {e}")
                continue
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
        if ph == "C" and not all(
            isinstance(v, int | float) for v in (e.get("args") or {}).values()
        ):
            found.append(f"event {n}: counter args must be numbers: {e}")
        if ph == "i" and e.get("s") not in ("g", "p", "t"):
            found.append(f"event {n}: instant scope must be g, p or t: {e}")
    for (pid, tid), spans in slices.items():
        if (pid, None) not in named or (pid, tid) not in named:
            found.append(f"pid {pid} tid {tid}: slices on an unnamed process or thread")
        spans.sort()
        for (_, a1, a), (b0, b1, b) in pairwise(spans):
            if b0 < a1 and b1 > a1:  # overlapping without nesting: Perfetto drops one
                found.append(f"pid {pid} tid {tid}: {a} and {b} overlap without nesting")
    return found
