"""The "what ran" lines of every wedge report, from real specs and rendered command lines
(no topology runs here; the report tests run real ones)."""

from __future__ import annotations

from dataclasses import replace

from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.spec.topology import (
    Executables,
    PortPlan,
    StubOptions,
    TopologySpec,
    render_components,
)
from pytest_wedge.topology.what_ran import describe_router, describe_worker

EXE = Executables(python="/venv/bin/python", smg="/venv/bin/smg", toxiproxy="/bin/toxiproxy-server")


def argv_of(spec: TopologySpec, name: str) -> tuple[str, ...]:
    listen = {link: 30000 + i for i, link in enumerate(spec.link_names())}
    (found,) = [
        c
        for c in render_components(spec, PortPlan.sequential(spec, 20000), listen, EXE)
        if c.name == name
    ]
    return found.argv


def test_a_stub_worker_names_its_protocol_and_whether_it_has_a_ledger() -> None:
    spec = TopologySpec(worker_protocol="vllm")
    worker = describe_worker("decode-0", argv_of(spec, "decode-0"), spec, "docker")
    assert worker.kind == "vllm-protocol stub" and worker.version.startswith("pytest-wedge ")
    assert worker.binary == "/venv/bin/python"
    assert (
        worker.started
        == "python -m pytest_wedge.stubs, started by pytest-wedge on the docker runtime"
    )

    blind = replace(spec, stub=StubOptions(protocol="vllm", ledger=False))
    line = describe_worker("decode-0", argv_of(blind, "decode-0"), blind).line()
    assert line.endswith(
        "ledger-less (--ledgerless: no ledger, no control API), so the locator had no worker ledger of it)"
    )


def test_a_worker_from_a_users_command_and_one_not_started_say_so() -> None:
    spec = TopologySpec()
    own = describe_worker("prefill-0", ("/opt/engine/serve", "--port", "9000"), spec)
    assert (own.kind, own.binary, own.version) == (
        "command",
        "/opt/engine/serve",
        "(version not known to pytest-wedge)",
    )
    assert (
        own.started
        == "started by pytest-wedge from the user's command '/opt/engine/serve --port 9000', on the process runtime"
        "; only its public endpoints are known (no ledger, no control API), so the locator had "
        "no worker ledger of it"
    )
    assert describe_worker("prefill-0", (), spec).started == "not started by pytest-wedge"


def test_command_and_url_routers_name_their_template_or_url() -> None:
    template = ("/opt/my-smg", "launch", "--port", "{port}")
    command = RouterSpec(kind="command", command=template)
    spec = TopologySpec(router=command)
    described = describe_router(command, argv_of(spec, "router"))
    assert described.line() == (
        "router: command (smg-like) (version not known to pytest-wedge) (/opt/my-smg; started by "
        "pytest-wedge from the user's command template '/opt/my-smg launch --port {port}', on the process runtime)"
    )
    url = RouterSpec(
        kind="url",
        url="http://127.0.0.1:9000",
        like="vllm-router",
        prefill_listen=(1,),
        decode_listen=(2,),
        bootstrap_ports=(3,),
    )
    assert describe_router(url).line() == (
        "router: url (vllm-router-like) (version not known to pytest-wedge) (http://127.0.0.1:9000; "
        "already running; not started or stopped by pytest-wedge)"
    )
