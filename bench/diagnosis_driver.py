"""Diagnosis latency: from "a harness request becomes overdue" to "diagnose names the hop".

The clock starts at the moment the first pending harness request crosses ``overdue_after_s``
(its creation time plus the threshold, not when a poll noticed it) and stops when a
``diagnose`` call returns the expected location, so detection lag counts against us.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pytest_wedge.diagnostics import diagnose
from pytest_wedge.faults import Fault, Pause
from pytest_wedge.handle import Wedge
from pytest_wedge.waiting import wait_for

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


def _topology(target: Any) -> Topology:
    if isinstance(target, Wedge):
        return target.topology
    make = getattr(target, "topology", None)
    if callable(make):  # a WedgeSession: its default topology
        topology: Topology = make()
        return topology
    return target  # type: ignore[no-any-return]


def _overdue_at(wedge: Wedge, origin: str, overdue_after_s: float) -> float | None:
    pending = [r.created for r in wedge.ledger.by_origin(origin) if r.state == "pending"]
    return min(pending) + overdue_after_s if pending else None


def one_run(
    topology: Topology,
    *,
    fault: Fault,
    expected: str,
    origin: str = "harness",
    overdue_after_s: float = 1.0,
    timeout_s: float = 20.0,
) -> float:
    topology.reset()
    wedge = Wedge(topology)
    try:
        wedge.stray("decode-0", rate_per_s=5)
        harness = wedge.harness(
            agents=30, rounds=100, client_timeout_s=30, think_time_s=0.05, origin=origin
        )
        wait_for(lambda: harness.progress() >= 30, timeout_s=timeout_s, what="a healthy warm-up")
        wedge.apply(fault)
        first = wait_for(
            lambda: _overdue_at(wedge, origin, overdue_after_s),
            timeout_s=timeout_s,
            what="a pending request after the fault",
            interval_s=0.005,
        )
        due = float(first or 0.0)
        # Poll the ledger, not time: the earliest pending request may finish, moving `due`.
        while time.time() < due:
            time.sleep(0.002)
            due = _overdue_at(wedge, origin, overdue_after_s) or due
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if diagnose(wedge, origin, overdue_after_s).location == expected:
                return time.time() - due
        raise AssertionError(f"diagnose never named {expected} within {timeout_s} s")
    finally:
        wedge.close()
        topology.reset()


def measure_diagnosis_latency(
    wedge_session_or_topology: Any,
    runs: int = 5,
    *,
    fault: Fault | None = None,
    expected: str = "router",
    overdue_after_s: float = 1.0,
) -> list[float]:
    """Seconds from overdue to a correct diagnosis, one per run (default wedge: the router
    paused under the harness while a stray requester keeps decode-0 busy: incident 1)."""
    topology = _topology(wedge_session_or_topology)
    return [
        one_run(
            topology,
            fault=fault or Pause("router"),
            expected=expected,
            overdue_after_s=overdue_after_s,
        )
        for _ in range(runs)
    ]
