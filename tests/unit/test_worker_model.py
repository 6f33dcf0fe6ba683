"""Worker kinds as data: ``WorkerSpec``, the keywords, the template, the rendered command lines."""

from __future__ import annotations

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.spec.marker_args import wedge
from pytest_wedge.spec.topology import Executables, PortPlan, TopologySpec, render_components
from pytest_wedge.spec.workers import WorkerSpec, check_runtime
from pytest_wedge.topology.what_ran import describe_worker, not_proxied

EXE = Executables(python="/py", smg="/venv/bin/smg", toxiproxy="/bin/toxiproxy-server")
PREFILL = (
    "{python} -m pytest_wedge.stubs --role {role} --name {name} --host {host} "
    "--port {port} --bootstrap-port {bootstrap_port} --ledgerless {stub_args}"
)
DECODE = (
    "{python} -m pytest_wedge.stubs --role {role} --name {name} --host {host} "
    "--port {port} --ledgerless "
    "--bootstrap-route={host}:{prefill_bootstrap_port[*]}={prefill_bootstrap[*]}"
)


def _components(spec: TopologySpec):
    ports = PortPlan.sequential(spec, 20000)
    listen = {name: 30000 + i for i, name in enumerate(spec.link_names())}
    return {c.name: c for c in render_components(spec, ports, listen, EXE)}


def _command_spec(**kwargs) -> TopologySpec:
    return wedge(
        prefill_worker={"kind": "command", "command": PREFILL},
        decode_worker={"kind": "command", "command": DECODE},
        **kwargs,
    ).spec


def test_command_workers_render_their_ports_peers_and_the_stub_options() -> None:
    spec = _command_spec(prefill=2, decode=1, stub={"itl_ms": 7.0})
    comps = _components(spec)
    # Sequential plan: router 20000, prefill-0/1 20001/2, decode-0 20003, bootstraps 20004/5.
    prefill = comps["prefill-1"]
    assert prefill.argv[:6] == ("/py", "-m", "pytest_wedge.stubs", "--role", "prefill", "--name")
    assert prefill.argv[prefill.argv.index("--port") + 1] == "20002"
    assert prefill.argv[prefill.argv.index("--bootstrap-port") + 1] == "20005"
    assert prefill.argv[prefill.argv.index("--itl-ms") + 1] == "7.0"  # {stub_args} expanded
    listen = dict(zip(spec.link_names(), range(30000, 30100), strict=False))
    decode = comps["decode-0"]
    # One route per prefill, each onto this decode's own link to it.
    assert [a for a in decode.argv if a.startswith("--bootstrap-route=")] == [
        f"--bootstrap-route=127.0.0.1:20004=127.0.0.1:{listen['decode-0->prefill-0']}",
        f"--bootstrap-route=127.0.0.1:20005=127.0.0.1:{listen['decode-0->prefill-1']}",
    ]
    # Known only by public endpoints: no stub client, never forked, ready on /health.
    assert all(c.foreign and not c.is_stub for n, c in comps.items() if n != "router")
    assert decode.ready_url == "http://127.0.0.1:20003/health"
    assert spec.foreign_workers == ["prefill-0", "prefill-1", "decode-0"]


def test_one_role_can_be_a_command_and_the_other_a_stub() -> None:
    spec = wedge(
        decode_worker={
            "kind": "command",
            "command": ["my-engine", "{port}"],
            "ready_path": "/ready",
        }
    ).spec
    comps = _components(spec)
    assert comps["decode-0"].argv == ("my-engine", "20002")
    assert comps["decode-0"].ready_url.endswith("/ready")
    assert comps["prefill-0"].is_stub and not comps["prefill-0"].foreign
    assert spec.foreign_workers == ["decode-0"]


def test_an_unknown_worker_placeholder_is_refused_before_anything_starts() -> None:
    with pytest.raises(ConfigError) as raised:
        WorkerSpec(kind="command", command=("engine", "--port", "{prot}"))
    assert "{prot}" in raised.value.headline and "worker command template" in raised.value.headline
    assert "{prefill_bootstrap[i]}" not in str(raised.value.facts)  # lists the names, not forms
    assert "{prefill_bootstrap}" in str(raised.value.facts) and raised.value.fix


@pytest.mark.parametrize(
    "role, template, message",
    [
        ("decode", "engine --bootstrap-port {bootstrap_port}", "{bootstrap_port}"),
        ("prefill", "engine --kv {prefill_bootstrap[0]}", "worker this topology does not have"),
    ],
)
def test_a_placeholder_the_role_does_not_have_is_refused(
    role: str, template: str, message: str
) -> None:
    spec = wedge(**{f"{role}_worker": {"kind": "command", "command": template}}).spec
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("{", r"\{")):
        _components(spec)


@pytest.mark.parametrize(
    "value, message",
    [
        ({"kind": "engine"}, "Unknown worker kind"),
        ({"kind": "command"}, "needs its command template"),
        ({"command": ["x"]}, "only for kind='command'"),
        ({"kind": "command", "command": ["x"], "ready": "/h"}, "Unknown prefill_worker setting"),
        ("my-engine", "prefill_worker must be a dict"),
    ],
)
def test_bad_worker_settings_say_what_to_write(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        wedge(prefill_worker=value)  # type: ignore[arg-type]


def test_docker_refuses_a_command_worker_and_says_why() -> None:
    worker = WorkerSpec(kind="command", command=("engine", "{port}"))
    check_runtime([WorkerSpec(), worker], "process")
    check_runtime([WorkerSpec()], "docker")
    with pytest.raises(ConfigError) as raised:
        check_runtime([WorkerSpec(), worker], "docker")
    assert raised.value.headline == "A command worker cannot run on the docker runtime"
    assert raised.value.facts["command"] == "engine {port}" and "process" in raised.value.fix


def test_a_command_worker_that_launches_our_stub_is_described_as_a_command() -> None:
    spec = _command_spec()
    comp = _components(spec)["decode-0"]
    described = describe_worker("decode-0", comp.argv, spec, "process", comp.foreign)
    assert described.kind == "command"
    assert "no ledger, no control API" in described.started
    assert "the locator had no worker ledger" in described.started


def test_a_command_decodes_kv_path_is_listed_as_not_proxied_unless_its_template_says_so() -> None:
    assert not any("command workers" in line for line in not_proxied(TopologySpec()))
    lines = not_proxied(_command_spec(decode=2))
    (workers,) = [line for line in lines if "command workers" in line]
    assert workers.startswith("the KV traffic of decode-0, decode-1 (command workers)")
    assert "{prefill_bootstrap[i]}" in workers


URL_PREFILL = {"kind": "url", "urls": ["http://127.0.0.1:9100"], "bootstrap_ports": [9101]}
URL_DECODE = {"kind": "url", "urls": ["http://127.0.0.1:9200"], "kv_listen": [[9201]]}


def test_url_workers_are_not_started_and_their_ports_and_kv_listen_are_taken() -> None:
    from pytest_wedge.topology.worker_start import fixed_listen, url_worker_listen, url_worker_plan

    spec = wedge(prefill_worker=URL_PREFILL, decode_worker=URL_DECODE).spec
    assert set(_components(spec)) == {"router"}  # only the router is started
    assert spec.url_workers == spec.foreign_workers == ["prefill-0", "decode-0"]
    plan = url_worker_plan(spec, PortPlan.sequential(spec, 20000))
    assert (plan.http["prefill-0"], plan.http["decode-0"]) == (9100, 9200)
    assert plan.bootstrap == {"prefill-0": 9101} and plan.http["router"] == 20000
    assert url_worker_listen(spec) == {"decode-0->prefill-0": "127.0.0.1:9201"}
    assert fixed_listen(spec) == {"127.0.0.1:9201"}
    # A url prefill with a stub decode: the decode is started, routed onto its own link.
    mixed = wedge(prefill_worker=URL_PREFILL).spec
    listen = {name: 30000 + i for i, name in enumerate(mixed.link_names())}
    plan = url_worker_plan(mixed, PortPlan.sequential(mixed, 20000))
    (decode,) = render_components(mixed, plan, listen, EXE)[:1]
    assert decode.name == "decode-0" and "127.0.0.1:9101=127.0.0.1:30003" in decode.argv
    assert url_worker_listen(mixed) == {}


@pytest.mark.parametrize(
    "value, message",
    [
        ({"kind": "url"}, "needs urls="),
        ({"kind": "url", "urls": ["http://10.0.0.1:80"], "bootstrap_ports": [1]}, "needs urls="),
        ({"kind": "url", "urls": ["http://127.0.0.1:1"]}, "one URL per worker"),
        (
            {
                "kind": "url",
                "urls": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
                "bootstrap_ports": [3, 4],
            },
            "one URL per worker",
        ),
        ({"kind": "stub", "urls": ["http://127.0.0.1:1"]}, "only for kind='url'"),
    ],
)
def test_bad_url_workers_say_what_to_write(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        wedge(prefill_worker=value)  # type: ignore[arg-type]


def test_url_workers_are_described_and_their_unproxied_traffic_listed() -> None:
    spec = wedge(prefill_worker=URL_PREFILL, decode_worker=URL_DECODE).spec
    described = describe_worker("decode-0", (), spec, "process", True)
    assert (described.kind, described.binary) == ("url", "(already running)")
    assert described.started.startswith("not started or stopped by pytest-wedge; only its public")
    lines = not_proxied(spec)
    assert any(line.startswith("the KV traffic of decode-0 (url workers)") for line in lines)
    assert any(
        line.startswith("the processes of prefill-0, decode-0 (url workers)") for line in lines
    )
