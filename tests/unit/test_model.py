"""Topology model, config resolution, marker parsing and fault payloads: no processes."""

from __future__ import annotations

import pytest

from pytest_wedge.errors import ConfigError, WedgeError
from pytest_wedge.faults import (
    Bandwidth,
    Down,
    ErrorStatus,
    Latency,
    LimitData,
    ResetPeer,
    Slicer,
    SlowClose,
    StallAfterTokens,
    Timeout,
)
from pytest_wedge.plugin.settings import resolve
from pytest_wedge.spec.marker_args import parse_keywords as parse_marker
from pytest_wedge.spec.topology import Executables, PortPlan, TopologySpec, render_components
from pytest_wedge.topology.ports import PortAllocator, worker_slice

EXE = Executables(python="/venv/bin/python", smg="/venv/bin/smg", toxiproxy="/bin/tp")


def test_links_cover_every_hop_including_each_transfer_pair():
    spec = TopologySpec(prefill=2, decode=2)
    assert spec.link_names() == [
        "client->router",
        "router->prefill-0",
        "router->prefill-1",
        "router->decode-0",
        "router->decode-1",
        "decode-0->prefill-0",
        "decode-0->prefill-1",
        "decode-1->prefill-0",
        "decode-1->prefill-1",
    ]


def test_components_point_at_link_listen_ports_never_at_peers():
    spec = TopologySpec(prefill=1, decode=2, router_args=("--request-timeout-secs", "2"))
    plan = PortPlan.sequential(spec, 21000)
    listen = {name: 40000 + i for i, name in enumerate(spec.link_names())}
    comps = {c.name: c for c in render_components(spec, plan, listen, EXE)}
    router = " ".join(comps["router"].argv)
    assert (
        f"--prefill http://127.0.0.1:{listen['router->prefill-0']} {plan.bootstrap['prefill-0']}"
        in router
    )
    assert f"--decode http://127.0.0.1:{listen['router->decode-1']}" in router
    assert "--host 127.0.0.1" in router and "--prometheus-host 127.0.0.1" in router
    assert router.endswith("--request-timeout-secs 2")
    route = f"127.0.0.1:{plan.bootstrap['prefill-0']}=127.0.0.1:{listen['decode-1->prefill-0']}"
    assert route in comps["decode-1"].argv
    assert all(p < 32768 for p in plan.all_ports())


def test_a_topology_needs_both_roles():
    with pytest.raises(ConfigError, match="at least one prefill and one decode"):
        TopologySpec(prefill=0)


def test_port_slices_are_disjoint_per_xdist_worker_and_below_ephemeral_range():
    slices = [worker_slice(w) for w in ("", "gw0", "gw1", "gw10")]
    for a in slices:
        assert a.stop <= 32768
        for b in slices:
            assert a is b or not set(a) & set(b)
    ports = PortAllocator(worker_slice("gw3")).take(5)
    assert len(set(ports)) == 5


def test_precedence_is_marker_cli_env_ini_default():
    ini = {"wedge_runtime": "docker"}.get
    assert resolve("wedge_runtime", ini=ini, environ={}).source == "ini file"
    env = {"PYTEST_WEDGE_RUNTIME": "process"}
    assert resolve("wedge_runtime", ini=ini, environ=env).source.startswith("environment")
    assert resolve("wedge_runtime", cli="docker", ini=ini, environ=env).source == "command line"
    assert resolve("wedge_runtime", marker="process", cli="docker", environ={}).value == "process"
    assert resolve("wedge_runtime", environ={}).value == "process"


def test_bad_value_error_says_where_it_came_from():
    with pytest.raises(ConfigError) as info:
        resolve("wedge_runtime", environ={"PYTEST_WEDGE_RUNTIME": "k8s"})
    text = str(info.value)
    assert "Bad value for wedge_runtime: 'k8s'" in text
    assert "from: environment (PYTEST_WEDGE_RUNTIME)" in text
    assert "To fix this:" in text


def test_marker_builds_a_hashable_spec():
    parsed = parse_marker((), {"decode": 2, "router_args": ["--x", "1"], "stub": {"itl_ms": 1}})
    assert parsed.spec == TopologySpec(decode=2, router_args=("--x", "1"), stub=parsed.spec.stub)
    assert parsed.spec.stub.itl_ms == 1
    hash(parsed.spec)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1,), {}, "keyword arguments only"),
        ((), {"router_args": "--x 1"}, "router_args must be a list of strings"),
        ((), {"stub": {"itl": 1}}, "Unknown stub option(s): itl"),
        ((), {"decode": "2"}, "decode must be an integer"),
    ],
)
def test_bad_marker_arguments_explain_themselves(args, kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_marker(args, kwargs)


@pytest.mark.parametrize(
    ("fault", "payload"),
    [
        (
            Latency("router->decode-0", latency_ms=300, jitter_ms=10),
            {
                "type": "latency",
                "stream": "downstream",
                "attributes": {"latency": 300, "jitter": 10},
            },
        ),
        (
            Bandwidth("client->router", rate_kb_per_s=5, stream="upstream"),
            {"type": "bandwidth", "stream": "upstream", "attributes": {"rate": 5}},
        ),
        (
            SlowClose("client->router", delay_ms=100),
            {"type": "slow_close", "attributes": {"delay": 100}},
        ),
        (Timeout("decode-0->prefill-0"), {"type": "timeout", "attributes": {"timeout": 0}}),
        (
            ResetPeer("client->router", timeout_ms=5),
            {"type": "reset_peer", "attributes": {"timeout": 5}},
        ),
        (
            Slicer("client->router", average_size_bytes=8, delay_us=50),
            {"type": "slicer", "attributes": {"average_size": 8, "size_variation": 0, "delay": 50}},
        ),
        (
            LimitData("client->router", bytes=100),
            {"type": "limit_data", "attributes": {"bytes": 100}},
        ),
    ],
)
def test_network_faults_are_toxiproxy_toxics(fault, payload):
    body = fault.payload()
    for key, value in payload.items():
        assert body[key] == value
    assert body["toxicity"] == 1.0
    assert body["name"] == f"wedge_{payload['type']}_{body['stream']}_{fault.instance_id}"


def test_bandwidth_zero_is_refused_because_toxiproxy_reads_it_as_unlimited():
    with pytest.raises(ConfigError, match="does not cut a link"):
        Bandwidth("client->router", rate_kb_per_s=0)


def test_toxicity_and_stream_are_validated():
    with pytest.raises(ConfigError, match="Bad toxicity"):
        Latency("client->router", latency_ms=1, toxicity=1.5)
    with pytest.raises(ConfigError, match="Bad Latency field stream"):
        Latency("client->router", latency_ms=1, stream="sideways")  # type: ignore[arg-type]


def test_engine_fault_payloads():
    stall = StallAfterTokens("decode-0", tokens=3)
    assert stall.payload() == {"name": stall.fault_name, "kind": "stall_after_tokens", "tokens": 3}
    assert stall.fault_name == f"wedge-stall_after_tokens-{stall.instance_id}"
    body = ErrorStatus("prefill-0", status=503, origin="harness").payload()
    assert body["status"] == 503 and body["origin"] == "harness"
    assert Down("client->router").target == "client->router"


def test_wedge_error_renders_headline_facts_log_and_fix():
    error = WedgeError("router exited", facts={"exit code": 2}, log_tail="boom\n", fix="read it")
    assert (
        str(error) == "router exited\n  exit code: 2\n  log tail:\n    | boom\nTo fix this: read it"
    )


class _RecordingRuntime:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.states: dict[str, str] = {}

    def __getattr__(self, action):  # pause, resume, kill ...
        return lambda name: self.calls.append((action, name))

    def state(self, name: str) -> str:
        return self.states.get(name, "running")


class _FakeTopology:
    def __init__(self) -> None:
        self.spec = TopologySpec(prefill=2, decode=1)
        self.runtime = _RecordingRuntime()
        self.restarted: list[tuple[str, ...]] = []

    def restart(self, *names: str) -> None:
        self.restarted.append(names)

    def pd_pair(self, decode: str) -> list[str]:
        return [*self.spec.prefill_names, decode]


def test_component_faults_drive_the_runtime():
    from pytest_wedge.faults import CoRestart, DecodeOnlyRestart, Kill, Pause

    topo = _FakeTopology()
    pause = Pause("router")
    pause.apply(topo)  # type: ignore[arg-type]
    pause.revert(topo)  # type: ignore[arg-type]
    pause.revert(topo)  # type: ignore[arg-type]  # idempotent
    assert topo.runtime.calls == [("pause", "router"), ("resume", "router"), ("resume", "router")]
    DecodeOnlyRestart("decode-0").apply(topo)  # type: ignore[arg-type]
    CoRestart("decode-0").apply(topo)  # type: ignore[arg-type]
    assert topo.restarted == [("decode-0",), ("prefill-0", "prefill-1", "decode-0")]
    topo.runtime.states["decode-0"] = "exited"
    Kill("decode-0").revert(topo)  # type: ignore[arg-type]
    assert topo.restarted[-1] == ("decode-0",)


def test_unknown_component_or_link_names_the_known_ones():
    from pytest_wedge.faults import Latency, Pause

    topo = _FakeTopology()
    with pytest.raises(ConfigError, match="Unknown component 'decoder-0'") as info:
        Pause("decoder-0").apply(topo)  # type: ignore[arg-type]
    assert "router, prefill-0, prefill-1, decode-0" in str(info.value)
    with pytest.raises(ConfigError, match="Unknown link 'router->decode-9'"):
        Latency("router->decode-9", latency_ms=1).apply(topo)  # type: ignore[arg-type]


def test_restart_is_a_one_shot_with_nothing_to_revert():
    from pytest_wedge.faults import Restart

    topo = _FakeTopology()
    Restart("prefill-1").apply(topo)  # type: ignore[arg-type]
    Restart("prefill-1").revert(topo)  # type: ignore[arg-type]
    assert topo.restarted == [("prefill-1",)]


@pytest.mark.parametrize(
    ("fault", "payload"),
    [
        ("StallBeforeFirstToken", {"kind": "stall_before_first_token"}),
        ("PinOnAbort", {"kind": "pin_on_abort"}),
        ("Serialize", {"kind": "serialize"}),
        ("SlowTokens", {"kind": "slow_tokens", "itl_ms": 200.0}),
        ("Crash", {"kind": "crash", "exit_code": 1}),
        ("RefuseBootstrap", {"kind": "refuse_bootstrap"}),
        ("ErrorStatus", {"kind": "error_status", "status": 500}),
        ("StallAfterTokens", {"kind": "stall_after_tokens", "tokens": 3}),
    ],
)
def test_every_engine_fault_has_a_stub_payload(fault, payload):
    import pytest_wedge.faults as faults

    cls = getattr(faults, fault)
    component = "prefill-0" if "prefill" in cls.roles and "decode" not in cls.roles else "decode-0"
    fault = cls(component, origin="harness")
    body = fault.payload()
    assert body["name"] == fault.fault_name == f"wedge-{payload['kind']}-{fault.instance_id}"
    assert body["origin"] == "harness"
    for key, value in payload.items():
        assert body[key] == value


def test_an_engine_fault_on_the_wrong_role_says_which_roles_it_fits():
    from pytest_wedge.faults import PinOnAbort

    with pytest.raises(ConfigError, match="PinOnAbort does not apply to decode-0") as info:
        PinOnAbort("decode-0").apply(_FakeTopology())  # type: ignore[arg-type]
    assert "target a prefill worker" in str(info.value)
