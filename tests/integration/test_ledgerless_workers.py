"""Workers without ledger and control API (``stub={"ledger": False}``, the stubs' ``--ledgerless``):
the plugin knows only their public endpoints, as with a foreign engine. The catalog's
router-pause and KV-black-hole scenarios must still be located where they are, by the blind
locator, and the report must say that no worker ledger was there to back it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest

from pytest_wedge.faults import ErrorStatus
from pytest_wedge.handle import Wedge
from pytest_wedge.scenarios.catalog import Scenario, catalog
from pytest_wedge.scenarios.runner import run_scenario
from pytest_wedge.stubs.control_client import StubUnavailable

pytestmark = pytest.mark.timeout(180)
CATALOG = {s.name: s for s in catalog()}
NO_LEDGERS = "no worker ledgers: prefill-0, decode-0 run ledger-less"


def ledgerless(scenario: Scenario, **stub: Any) -> Scenario:
    options = dataclasses.replace(scenario.spec.stub, ledger=False, **stub)
    return dataclasses.replace(scenario, spec=dataclasses.replace(scenario.spec, stub=options))


def open_on(wedge_factory: Any, scenario: Scenario) -> Wedge:
    spec = scenario.spec
    wedge: Wedge = wedge_factory(
        prefill=spec.prefill, decode=spec.decode, router_args=spec.router_args, stub=spec.stub
    )
    # The plugin holds no stub client for any worker: nothing but public endpoints.
    assert wedge.topology.stubs == {}
    plan = wedge.topology.plan
    assert plan is not None
    for name in ("prefill-0", "decode-0"):
        base = f"http://127.0.0.1:{plan.http[name]}"
        assert httpx.get(f"{base}/ledger").status_code == 404
        assert httpx.get(f"{base}/control/state").status_code == 404
        assert httpx.get(f"{base}/health").status_code == 200
    return wedge


def test_a_paused_router_is_located_with_ledgerless_workers(wedge_factory: Any) -> None:
    scenario = ledgerless(CATALOG["stray-requester-masks-router-wedge"])
    wedge = open_on(wedge_factory, scenario)
    result = run_scenario(wedge, scenario)  # asserts located_at = router, stray-1 named
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.location == "router"
    assert diagnosis.locator == "blind" and diagnosis.oracle is None
    assert NO_LEDGERS in diagnosis.render(), diagnosis.render()


def test_a_kv_black_hole_is_located_with_ledgerless_workers(wedge_factory: Any) -> None:
    catalogued = CATALOG["kv-transfer-blackhole"]
    # Its stub watchdog is armed through the control API, which these workers lack: the same
    # engine watchdog is set on the decode's command line instead, and the clearing check
    # judges it by the client's requests alone.
    (armed,) = catalogued.watchdogs
    after_s = armed.watchdog.after_s  # type: ignore[attr-defined]
    scenario = dataclasses.replace(ledgerless(catalogued, transfer_timeout_s=after_s), watchdogs=())
    wedge = open_on(wedge_factory, scenario)
    result = run_scenario(wedge, scenario)  # asserts the location and the clearing budget
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.location == "decode-0->prefill-0"
    assert diagnosis.locator == "blind" and diagnosis.oracle is None
    assert NO_LEDGERS in diagnosis.render(), diagnosis.render()
    assert result.check is not None  # cleared within the catalog's budget


def test_engine_faults_on_ledgerless_workers_fail_clearly(wedge_factory: Any) -> None:
    wedge: Wedge = wedge_factory(stub={"ledger": False})
    with pytest.raises(StubUnavailable) as raised:
        wedge.apply(ErrorStatus(target="prefill-0", status=500))
    text = str(raised.value)
    assert "ErrorStatus needs prefill-0's control API" in text
    assert "runs ledger-less" in text and "drop ledger=False" in text
