"""Workers started from a user's command template (``prefill_worker``/``decode_worker`` of kind
``command``). Here the templates launch our stub with ``--ledgerless``, so the plugin knows only
the public endpoints, as with a foreign engine: the catalog's router-pause and KV-black-hole
scenarios must still be located where they are, by the blind locator, and the report must say
that no worker ledger was there to back it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import httpx
import psutil
import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults import ErrorStatus, Kill, Pause
from pytest_wedge.handle import Wedge
from pytest_wedge.scenarios.catalog import Scenario, catalog
from pytest_wedge.scenarios.runner import run_scenario
from pytest_wedge.spec.workers import WorkerSpec
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(180)
CATALOG = {s.name: s for s in catalog()}
NO_LEDGERS = "no worker ledgers: prefill-0, decode-0 run ledger-less"
# What a user writes for their own build: our stub here, with its ledger and control API off.
# {stub_args} carries the scenario's engine settings (inter-token latency, KV transfer timeout).
PREFILL = WorkerSpec(
    kind="command",
    command=(
        "{python}",
        "-m",
        "pytest_wedge.stubs",
        "--role",
        "{role}",
        "--name",
        "{name}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--bootstrap-port",
        "{bootstrap_port}",
        "--ledgerless",
        "{stub_args}",
    ),
)
DECODE = WorkerSpec(
    kind="command",
    command=(
        "{python}",
        "-m",
        "pytest_wedge.stubs",
        "--role",
        "{role}",
        "--name",
        "{name}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--ledgerless",
        "{stub_args}",
        "--bootstrap-route={host}:{prefill_bootstrap_port[*]}={prefill_bootstrap[*]}",
    ),
)


def by_command(scenario: Scenario, **stub: Any) -> Scenario:
    spec = scenario.spec
    spec = dataclasses.replace(
        spec,
        prefill_worker=PREFILL,
        decode_worker=DECODE,
        stub=dataclasses.replace(spec.stub, **stub),
    )
    return dataclasses.replace(scenario, spec=spec)


def open_on(wedge_factory: Any, scenario: Scenario) -> Wedge:
    spec = scenario.spec
    wedge: Wedge = wedge_factory(
        prefill=spec.prefill,
        decode=spec.decode,
        router_args=spec.router_args,
        stub=spec.stub,
        prefill_worker=PREFILL,
        decode_worker=DECODE,
    )
    assert wedge.topology.spec == spec
    # The plugin holds no stub client for any worker: nothing but public endpoints.
    assert wedge.topology.stubs == {}
    for name in ("prefill-0", "decode-0"):
        base = wedge.topology.worker_url(name)
        assert httpx.get(f"{base}/ledger").status_code == 404
        assert httpx.get(f"{base}/control/state").status_code == 404
        assert httpx.get(f"{base}/health").status_code == 200
        # Spawned as written (never forked by the stub fork server): its PID is the command's.
        process = psutil.Process(wedge.topology.pids()[name])
        assert process.ppid() == os.getpid() and "--ledgerless" in process.cmdline()
    return wedge


def report_lines(wedge: Wedge) -> list[str]:
    return [line for line in wedge.topology.describe() if line.startswith(("prefill", "decode"))]


def test_a_paused_router_is_located_with_command_workers(wedge_factory: Any) -> None:
    scenario = by_command(CATALOG["stray-requester-masks-router-wedge"])
    wedge = open_on(wedge_factory, scenario)
    result = run_scenario(wedge, scenario)  # asserts located_at = router, stray-1 named
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.location == "router"
    assert diagnosis.locator == "blind" and diagnosis.oracle is None
    assert NO_LEDGERS in diagnosis.render(), diagnosis.render()
    for line in report_lines(wedge):
        assert ": command " in line and "the locator had no worker ledger of it" in line, line
    bypass = "not through Toxiproxy: the KV traffic of decode-0 (command workers)"
    assert any(line.startswith(bypass) for line in wedge.topology.describe())


def test_a_kv_black_hole_is_located_with_command_workers(wedge_factory: Any) -> None:
    catalogued = CATALOG["kv-transfer-blackhole"]
    # Its stub watchdog is armed through the control API, which these workers lack: the same
    # engine watchdog is set on the decode's command line ({stub_args}) instead, and the
    # clearing check judges it by the client's requests alone.
    (armed,) = catalogued.watchdogs
    after_s = armed.watchdog.after_s  # type: ignore[attr-defined]
    scenario = dataclasses.replace(by_command(catalogued, transfer_timeout_s=after_s), watchdogs=())
    wedge = open_on(wedge_factory, scenario)
    result = run_scenario(wedge, scenario)  # asserts the location and the clearing budget
    diagnosis = result.diagnosis
    assert diagnosis is not None and diagnosis.location == "decode-0->prefill-0"
    assert diagnosis.locator == "blind" and diagnosis.oracle is None
    assert NO_LEDGERS in diagnosis.render(), diagnosis.render()
    assert result.check is not None  # cleared within the catalog's budget


def test_command_workers_refuse_engine_faults_and_take_component_faults(
    wedge_factory: Any,
) -> None:
    wedge: Wedge = wedge_factory(prefill_worker=PREFILL, decode_worker=DECODE)
    with pytest.raises(ConfigError) as raised:
        wedge.apply(ErrorStatus(target="prefill-0", status=500))
    assert raised.value.headline.startswith("prefill-0 is a command worker: it has no pytest-wedge")
    assert "Pause, Kill, Restart" in (raised.value.fix or "")
    topology = wedge.topology
    pid = topology.pids()["decode-0"]
    paused = wedge.apply(Pause(target="decode-0"))
    assert topology.runtime.state("decode-0") == "paused"
    assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    wedge.revert(paused)
    assert topology.runtime.state("decode-0") == "running"
    killed = wedge.apply(Kill(target="decode-0"))
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    wedge.revert(killed)  # starts it again from its command, and waits until it is ready
    assert topology.pids()["decode-0"] not in (None, pid)
    assert httpx.get(topology.worker_url("decode-0") + "/health").status_code == 200


# A user's own decode: an aiohttp server whose /health and /v1/models (which smg's backend
# detection asks) answer and whose generate endpoints accept a request and never answer; it
# exports no metrics (every other path is 404).
SILENT_DECODE = """
import asyncio, sys
from aiohttp import web

async def health(request):
    return web.Response(text="ok")

async def never(request):
    await asyncio.sleep(3600)

async def models(request):
    model = dict(id="stub-model", object="model", owned_by="sglang")
    return web.json_response(dict(object="list", data=[model]))

app = web.Application()
app.router.add_get("/health", health)
app.router.add_get("/v1/models", models)
app.router.add_post("/generate", never)
app.router.add_post("/v1/chat/completions", never)
web.run_app(app, host=sys.argv[1], port=int(sys.argv[2]), print=None)
"""


def test_a_users_silent_worker_gets_a_verdict_its_report_does_not_rule_out(
    wedge_factory: Any,
) -> None:
    silent = WorkerSpec(
        kind="command", command=("{python}", "-c", SILENT_DECODE, "{host}", "{port}")
    )
    wedge = wedge_factory(prefill_worker=PREFILL, decode_worker=silent, stub={"ledger": False})
    wedge.harness(agents=5, rounds=1, client_timeout_s=30)
    wait_for(
        lambda: len(wedge.ledger.by_origin("harness").overdue(1.0)) >= 3,
        timeout_s=20,
        what="3 overdue harness requests",
    )
    diagnosis = wedge.diagnose(origin="harness", overdue_after_s=1.0)
    text = diagnosis.render()
    ruled_out = {line.split(": ", 1)[0] for line in diagnosis.ruled_out}
    assert diagnosis.location not in ruled_out, text
    assert diagnosis.location in ("decode-0", "router->decode-0"), text
    assert "decode-0: exports no engine gauges" in text, text
    assert "running (sglang gauges)" not in text and "decode-0: 0 preallocating" not in text, text
