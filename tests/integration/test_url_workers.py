"""Workers that are already running (``prefill_worker``/``decode_worker`` of kind ``url``): the
test starts them itself (our stub, ledger-less, so only public endpoints are known) and the
plugin only puts the links around them. The catalog's router-pause and KV-black-hole scenarios
must still be located where they are, and component and engine faults are refused.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults import ErrorStatus, Pause
from pytest_wedge.handle import Wedge
from pytest_wedge.scenarios.catalog import Scenario, catalog
from pytest_wedge.scenarios.runner import run_scenario
from pytest_wedge.spec.topology import StubOptions
from pytest_wedge.spec.workers import worker_spec
from pytest_wedge.topology.ports import PortAllocator
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(180)
CATALOG = {s.name: s for s in catalog()}
NO_LEDGERS = "no worker ledgers: prefill-0, decode-0 run ledger-less"
# The catalog's KV black hole is cleared by the decode's transfer timeout: set on the command
# line of the decode the test starts, since these workers have no control API to arm it.
(_ARMED,) = CATALOG["kv-transfer-blackhole"].watchdogs
TRANSFER_TIMEOUT_S = _ARMED.watchdog.after_s  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class Running:
    prefill: dict[str, Any]
    decode: dict[str, Any]


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One prefill and one decode the test starts, as a user starts their own engines."""
    allocator = PortAllocator()
    prefill, bootstrap, decode, kv_listen = allocator.take(4)
    options = StubOptions(transfer_timeout_s=TRANSFER_TIMEOUT_S, ledger=False).argv()
    stub = [sys.executable, "-m", "pytest_wedge.stubs", "--host", "127.0.0.1", *options]
    argvs = {
        "prefill-0": [
            *stub,
            "--role",
            "prefill",
            "--name",
            "prefill-0",
            "--port",
            str(prefill),
            "--bootstrap-port",
            str(bootstrap),
        ],
        # The router announces the prefill's real bootstrap port; this decode sends that KV to
        # kv_listen, where the plugin's decode-0->prefill-0 proxy will listen.
        "decode-0": [
            *stub,
            "--role",
            "decode",
            "--name",
            "decode-0",
            "--port",
            str(decode),
            "--bootstrap-route",
            f"127.0.0.1:{bootstrap}=127.0.0.1:{kv_listen}",
        ],
    }
    logs: Path = tmp_path_factory.mktemp("url-workers")
    procs = []
    try:
        for name, argv in argvs.items():
            with open(logs / f"{name}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        for port in (prefill, decode):
            wait_for(
                lambda port=port: _healthy(port),
                timeout_s=30,  # type: ignore[misc]
                what=f"the test's own worker on {port} to answer /health",
            )
        yield Running(
            prefill={
                "kind": "url",
                "urls": [f"http://127.0.0.1:{prefill}"],
                "bootstrap_ports": [bootstrap],
            },
            decode={
                "kind": "url",
                "urls": [f"http://127.0.0.1:{decode}"],
                "kv_listen": [[kv_listen]],
            },
        )
        assert all(proc.poll() is None for proc in procs)  # the plugin left them alone
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        allocator.close()


def on_url_workers(name: str, workers: Running, wedge_factory: Any) -> tuple[Wedge, Scenario]:
    catalogued = CATALOG[name]
    spec = dataclasses.replace(
        catalogued.spec,
        prefill_worker=worker_spec(workers.prefill, "prefill"),
        decode_worker=worker_spec(workers.decode, "decode"),
    )
    # The catalog's stub watchdog needs the control API: the decode's own timeout replaces it.
    scenario = dataclasses.replace(catalogued, spec=spec, watchdogs=())
    wedge: Wedge = wedge_factory(
        prefill=spec.prefill,
        decode=spec.decode,
        router_args=spec.router_args,
        stub=spec.stub,
        prefill_worker=workers.prefill,
        decode_worker=workers.decode,
    )
    topology = wedge.topology
    assert topology.spec == spec
    # Not ours: nothing started, paused or restarted by the plugin, no control API...
    assert set(topology.components) == {"router"} and topology.stubs == {}
    # ...but the router's traffic to them and the decode's KV cross the links.
    assert topology.links["router->prefill-0"].spec.upstream == workers.prefill["urls"][0][7:]
    assert topology.links["decode-0->prefill-0"].listen_port == workers.decode["kv_listen"][0][0]
    return wedge, scenario


def test_a_paused_router_is_located_with_url_workers(workers: Running, wedge_factory: Any) -> None:
    wedge, scenario = on_url_workers("stray-requester-masks-router-wedge", workers, wedge_factory)
    result = run_scenario(wedge, scenario)  # asserts located_at = router, stray-1 named
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.location == "router"
    assert diagnosis.locator == "blind" and diagnosis.oracle is None
    assert NO_LEDGERS in diagnosis.render(), diagnosis.render()
    lines = wedge.topology.describe()
    for name in ("prefill-0", "decode-0"):
        (line,) = [line for line in lines if line.startswith(f"{name}: ")]
        assert line.startswith(f"{name}: url ") and "not started or stopped" in line, line
    assert any(
        line.startswith("not through Toxiproxy: the processes of prefill-0, decode-0 (url workers)")
        for line in lines
    ), lines


def test_a_kv_black_hole_is_located_with_url_workers(workers: Running, wedge_factory: Any) -> None:
    wedge, scenario = on_url_workers("kv-transfer-blackhole", workers, wedge_factory)
    result = run_scenario(wedge, scenario)  # asserts the location and the clearing budget
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.location == "decode-0->prefill-0"
    assert diagnosis.locator == "blind" and diagnosis.oracle is None
    assert NO_LEDGERS in diagnosis.render(), diagnosis.render()
    assert result.check is not None  # cleared within the catalog's budget


def test_url_workers_refuse_component_and_engine_faults(
    workers: Running, wedge_factory: Any
) -> None:
    wedge, _ = on_url_workers("stray-requester-masks-router-wedge", workers, wedge_factory)
    with pytest.raises(ConfigError) as raised:
        wedge.apply(Pause(target="decode-0"))
    assert raised.value.headline.startswith("decode-0 is a url worker: pytest-wedge did not start")
    assert raised.value.facts["running at"] == workers.decode["urls"][0]
    with pytest.raises(ConfigError, match="prefill-0 is a url worker: it has no pytest-wedge"):
        wedge.apply(ErrorStatus(target="prefill-0", status=500))
    healthy = wedge.harness(agents=2, rounds=1, max_tokens=4, client_timeout_s=20)
    assert healthy.wait(30) and wedge.ledger.by_origin("harness").states()["ok"] == 2


def test_a_url_worker_that_refuses_every_connection_fails_within_5_s(
    wedge_factory: Any, wedge_session: Any
) -> None:
    """Nothing listens at the URLs: the start fails after the refused budget (3 s), not the
    whole ready timeout (30 s), and says what refused and how to fix it."""
    allocator = PortAllocator()
    try:
        prefill, bootstrap, decode, kv_listen = allocator.take(4)  # none of them listens
        started = time.monotonic()
        with pytest.raises(pytest.fail.Exception) as failed:
            wedge_factory(
                prefill_worker={
                    "kind": "url",
                    "urls": [f"http://127.0.0.1:{prefill}"],
                    "bootstrap_ports": [bootstrap],
                },
                decode_worker={
                    "kind": "url",
                    "urls": [f"http://127.0.0.1:{decode}"],
                    "kv_listen": [[kv_listen]],
                },
            )
        elapsed_s = time.monotonic() - started
    finally:
        allocator.close()
    text = str(failed.value)
    print(f"url workers refusing every connection: failed after {elapsed_s:.2f} s")
    assert elapsed_s < 5, text
    headline = "The url worker(s) prefill-0, decode-0 still refused connections after 3 s"
    assert headline in text, text
    assert f"decode-0: http://127.0.0.1:{decode}/health: ConnectError" in text, text
    assert "To fix this: start each worker before the run" in text, text
    assert "--wedge-ready-timeout above 30" in text, text
