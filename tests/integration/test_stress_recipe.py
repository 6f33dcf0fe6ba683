"""The stress recipe: catalog scenarios on an oversubscribed machine.

CI machines are often loaded: here every core gets a busy loop, and one more. Requests then
wait in the client before they are sent, for longer than a scenario's ``overdue_after_s``. The
scenario must still locate its wedge where it is, because a request's overdue clock starts
when it is handed to the network, and the run waits for every harness request to be sent.
The busy loops are bounded in time and are killed by PID when the test ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_wedge.scenarios.catalog import catalog
from pytest_wedge.scenarios.runner import run_scenario

pytestmark = pytest.mark.timeout(240)
CATALOG = {s.name: s for s in catalog()}
BUSY_S = 120.0  # a bound, in case the test process dies before it can kill them


@pytest.fixture
def busy_cpus() -> Iterator[list[int]]:
    """One busy loop per core, and one more (at least three, as in the recipe)."""
    count = max(3, (os.cpu_count() or 1) + 1)
    code = f"import time\nend = time.monotonic() + {BUSY_S}\nwhile time.monotonic() < end: pass"
    loops = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
    try:
        yield [loop.pid for loop in loops]
    finally:
        for loop in loops:
            loop.kill()
        for loop in loops:
            loop.wait(10)


def _wedge_for(wedge_factory: Any, name: str) -> Any:
    spec = CATALOG[name].spec
    return wedge_factory(
        prefill=spec.prefill, decode=spec.decode, router_args=spec.router_args, stub=spec.stub
    )


def test_a_kv_blackhole_is_located_on_its_link_under_cpu_pressure(
    busy_cpus: list[int], wedge_factory: Any
) -> None:
    wedge = _wedge_for(wedge_factory, "kv-transfer-blackhole")
    result = run_scenario(wedge, CATALOG["kv-transfer-blackhole"])
    assert result.diagnosis is not None
    assert result.diagnosis.location == "decode-0->prefill-0"
    # It located once all 30 had left the client and most were held, not before.
    assert result.showing is not None and result.showing.wedge_shows
    assert result.showing.issued == 30 and result.showing.not_sent_yet == 0
    harness = wedge.ledger.by_origin("harness")
    assert len(harness) == 30
    assert all(r.sent is not None and r.created <= r.sent for r in harness)


def test_an_exhausted_client_pool_is_the_client_holding_requests_under_cpu_pressure(
    busy_cpus: list[int], wedge_factory: Any
) -> None:
    wedge = _wedge_for(wedge_factory, "client-pool-deadlock")
    result = run_scenario(wedge, CATALOG["client-pool-deadlock"])
    assert result.diagnosis is not None and result.diagnosis.location == "client"
    harness = wedge.ledger.by_origin("harness").records
    sent = [r for r in harness if r.sent is not None]
    never = [r for r in harness if r.sent is None]
    # Four leaked streams hold the pool's four connections; the other six waited for one
    # while all four were in use, which is what the ledger says about each of them.
    assert len(sent) == 4 and len(never) == 6
    assert all(r.pool_limit == 4 and r.pool_in_use == 4 and r.pool_exhausted for r in never)
    assert all(r.state == "aborted" and r.cut_by_stop for r in never)
