"""Router kinds as data: the spec, the keywords, the adapters' launch lines, the template."""

from __future__ import annotations

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.routers.adapters import SGLANG_ROUTER, SMG, VLLM_ROUTER
from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.routers.template import TemplateValues, render_template, split_template
from pytest_wedge.spec.marker_args import wedge
from pytest_wedge.spec.topology import Executables, PortPlan, TopologySpec, render_components
from pytest_wedge.topology.what_ran import describe_router, unproxied

VALUES = TemplateValues(
    "127.0.0.1",
    9000,
    9001,
    ("http://127.0.0.1:9010", "http://127.0.0.1:9011"),
    ("http://127.0.0.1:9020",),
    (9030, 9031),
    "/py",
)
EXE = Executables(python="/py", smg="/venv/bin/smg", toxiproxy="/bin/toxiproxy-server")


def test_the_template_renders_scalars_indexes_and_lists() -> None:
    template = split_template(
        "{python} -m smg launch --port {port} --prefill {prefill_url[1]} "
        "{bootstrap_port[1]} --decode {decode_urls} --m {metrics_port}"
    )
    assert render_template(template, VALUES) == [
        "/py",
        "-m",
        "smg",
        "launch",
        "--port",
        "9000",
        "--prefill",
        "http://127.0.0.1:9011",
        "9031",
        "--decode",
        "http://127.0.0.1:9020",
        "--m",
        "9001",
    ]
    assert render_template(["{prefill_urls}"], VALUES) == list(VALUES.prefill_urls)


def test_an_unknown_placeholder_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as raised:
        render_template(["--port", "{prot}"], VALUES)
    assert "{prot}" in raised.value.headline and "{port}" in str(raised.value.facts)


def test_a_worker_index_beyond_the_topology_is_an_error() -> None:
    with pytest.raises(ConfigError, match="worker this topology does not have"):
        render_template(["{decode_url[1]}"], VALUES)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "nginx"},
        {"kind": "command"},
        {"kind": "smg", "command": ("x",)},
        {"kind": "url", "url": "http://10.0.0.1:80"},
        {"kind": "url", "url": None},
        {"kind": "smg", "like": "envoy"},
    ],
)
def test_a_bad_router_spec_is_refused(kwargs) -> None:
    with pytest.raises(ConfigError):
        RouterSpec(**kwargs)


def test_the_marker_takes_a_kind_name_or_a_dict() -> None:
    assert wedge(router="sglang-router").spec.router == RouterSpec(kind="sglang-router")
    spec = wedge(router={"kind": "command", "command": "smg launch --port {port}"}).spec
    assert spec.router.command == ("smg", "launch", "--port", "{port}")
    assert spec == wedge(router={"kind": "command", "command": "smg launch --port {port}"}).spec
    with pytest.raises(ConfigError, match="Unknown router setting"):
        wedge(router={"kind": "smg", "flags": []})
    with pytest.raises(ConfigError, match="one listen port per worker"):
        wedge(router={"kind": "url", "url": "http://127.0.0.1:9000"})
    with pytest.raises(ConfigError, match="worker protocol"):
        wedge(worker_protocol="trtllm")


def test_each_adapter_has_its_own_launch_line() -> None:
    pairs = [("http://127.0.0.1:1", 7)]
    smg = SMG.argv("/smg", "127.0.0.1", 5, 6, pairs, ["http://127.0.0.1:2"], ["--x"])
    assert smg[:2] == ["/smg", "launch"] and smg[smg.index("--prefill") + 2] == "7"
    assert "--pd-disaggregation" in smg and smg[-1] == "--x"
    sgl = SGLANG_ROUTER.argv("/sgl", "127.0.0.1", 5, 6, pairs, ["http://127.0.0.1:2"])
    assert sgl[1] == "launch" and "--stream-body-stall-timeout-secs" not in sgl
    vllm = VLLM_ROUTER.argv("/vllm", "127.0.0.1", 5, 6, pairs, ["http://127.0.0.1:2"])
    assert "--vllm-pd-disaggregation" in vllm and vllm[1] == "--host"
    assert vllm[vllm.index("--prefill") + 2] == "--decode"  # no bootstrap port for NIXL
    assert "--worker-startup-check-interval" in vllm
    assert VLLM_ROUTER.waits_for_workers and not VLLM_ROUTER.retries
    assert VLLM_ROUTER.metrics.breaker is None


def _components(spec: TopologySpec):
    ports = PortPlan.sequential(spec, 20000)
    listen = {name: 30000 + i for i, name in enumerate(spec.link_names())}
    return {c.name: c for c in render_components(spec, ports, listen, EXE)}


def test_a_url_router_is_not_started_and_a_command_router_is_its_template() -> None:
    url = TopologySpec(
        router=RouterSpec(
            kind="url",
            url="http://127.0.0.1:9000",
            prefill_listen=(9010,),
            decode_listen=(9020,),
            bootstrap_ports=(9030,),
        )
    )
    assert "router" not in _components(url)
    command = TopologySpec(
        router=RouterSpec(kind="command", command=("my-router", "{port}")), router_args=("--flag",)
    )
    assert _components(command)["router"].argv == ("my-router", "20000", "--flag")
    vllm = TopologySpec(worker_protocol="vllm")
    assert _components(vllm)["decode-0"].argv[-2:] == ("--protocol", "vllm")
    assert "--protocol" not in _components(TopologySpec())["decode-0"].argv


def test_descriptions_name_kind_version_and_what_bypasses_the_links() -> None:
    described = describe_router(
        RouterSpec(
            kind="url",
            url="http://127.0.0.1:9000",
            prefill_listen=(1,),
            decode_listen=(2,),
            bootstrap_ports=(3,),
        )
    )
    assert "not started" in described.started
    assert any("bootstrap port" in line for line in unproxied(RouterSpec()))
    assert unproxied(RouterSpec(kind="sglang-router")) == []
    assert any(
        "Pause" in line
        for line in unproxied(
            RouterSpec(
                kind="url",
                url="http://127.0.0.1:1",
                prefill_listen=(1,),
                decode_listen=(2,),
                bootstrap_ports=(3,),
            )
        )
    )


def test_the_workers_speak_the_routers_protocol_unless_chosen() -> None:
    """vllm-router speaks only vLLM's protocol to its workers, so a topology that leaves the
    protocol alone gets vLLM stubs on it, also when ``--wedge-router`` swaps the router in;
    an explicit choice (either spelling) wins."""
    import dataclasses

    vllm_router = RouterSpec(kind="vllm-router")
    assert TopologySpec().worker_protocol == "sglang"
    assert TopologySpec(router=vllm_router).worker_protocol == "vllm"
    swapped = dataclasses.replace(TopologySpec(), router=vllm_router)
    assert swapped.worker_protocol == "vllm" and swapped.stub.protocol == "vllm"
    assert dataclasses.replace(swapped, router=RouterSpec()).worker_protocol == "sglang"
    pinned = TopologySpec(worker_protocol="sglang")
    assert dataclasses.replace(pinned, router=vllm_router).worker_protocol == "sglang"
    by_stub = wedge(stub={"protocol": "vllm"}).spec
    assert dataclasses.replace(by_stub, router=RouterSpec()).worker_protocol == "vllm"
    stub_vllm = dataclasses.replace(TopologySpec().stub, protocol="vllm")
    assert dataclasses.replace(TopologySpec(), stub=stub_vllm).worker_protocol == "vllm"
    like_vllm = RouterSpec(kind="command", command=("r", "{port}"), like="vllm-router")
    assert TopologySpec(router=like_vllm).stub.protocol == "vllm"
    with pytest.raises(ConfigError, match="given twice"):
        wedge(worker_protocol="sglang", stub={"protocol": "vllm"})


def test_vllm_routers_no_kv_fetch_line_shows_only_with_sglang_protocol_workers() -> None:
    router = RouterSpec(kind="vllm-router")
    assert any("no KV fetch" in line for line in unproxied(router, "sglang"))
    assert not any("no KV fetch" in line for line in unproxied(router, "vllm"))
