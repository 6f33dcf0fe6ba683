"""The ``vllm`` worker kind as data: which specs it takes, and each engine's command line and
environment, rendered without an engine (tests/integration/test_real_vllm.py runs real ones)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from pytest_wedge.errors import ComponentStartError, ConfigError
from pytest_wedge.evidence.read_public import observed_jobs
from pytest_wedge.routers.router_spec import RouterSpec
from pytest_wedge.routers.vllm_engine import EngineInstall, engine_dtype
from pytest_wedge.spec.topology import Executables, PortPlan, TopologySpec, render_components
from pytest_wedge.spec.workers import WorkerSpec
from pytest_wedge.topology.what_ran import not_proxied
from pytest_wedge.topology.worker_start import warm_up_engines, with_engine

ENGINE = WorkerSpec(kind="vllm")
INSTALL = EngineInstall(python="/env/bin/python", plugin_dir="/env/wedge-plugin", model="/m")
EXE = Executables(python="/venv/bin/python", smg="/venv/bin/smg", toxiproxy="/bin/tp")


def real(router: str = "vllm-router", prefill: int = 1, decode: int = 1) -> TopologySpec:
    return TopologySpec(
        prefill=prefill,
        decode=decode,
        router=RouterSpec(kind=router),
        prefill_worker=ENGINE,
        decode_worker=ENGINE,
    )


def rendered(spec: TopologySpec) -> dict[str, tuple[tuple[str, ...], dict[str, str]]]:
    """Each component's argv and environment; decodes get side-channel ports of their own."""
    names = [*spec.prefill_names, *spec.decode_names]
    http = {n: 20000 + i for i, n in enumerate(spec.component_names)}
    plan = PortPlan(
        http=http, bootstrap={n: 21000 + i for i, n in enumerate(names)}, router_metrics=1
    )
    listen = {link: 30000 + i for i, link in enumerate(spec.link_names())}
    exe = Executables(python=EXE.python, smg=EXE.smg, toxiproxy=EXE.toxiproxy, engine=INSTALL)
    return {c.name: (c.argv, dict(c.env)) for c in render_components(spec, plan, listen, exe)}


def test_each_engine_has_its_side_channel_and_each_decode_reaches_prefills_through_its_links() -> (
    None
):
    spec = real(prefill=2, decode=1)
    components = rendered(spec)
    listen = {link: 30000 + i for i, link in enumerate(spec.link_names())}
    argv, env = components["decode-0"]
    assert argv[:3] == ("/env/bin/python", "-m", "vllm.entrypoints.openai.api_server")
    assert "kv_consumer" in argv[argv.index("--kv-transfer-config") + 1]
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "21002"
    assert env["WEDGE_NIXL_ROUTE"] == (
        f"127.0.0.1:21000=127.0.0.1:{listen['decode-0->prefill-0']},"
        f"127.0.0.1:21001=127.0.0.1:{listen['decode-0->prefill-1']}"
    )
    assert env["UCX_NET_DEVICES"] == "lo" and env["PYTHONPATH"] == "/env/wedge-plugin"
    argv, env = components["prefill-1"]
    assert "kv_producer" in argv[argv.index("--kv-transfer-config") + 1]
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "21001" and env["WEDGE_NIXL_ROUTE"] == ""
    assert argv[argv.index("--model") + 1] == "/m"


def test_nixl_progress_thread_is_off_unless_pytest_environment_turns_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("WEDGE_NIXL_PROGRESS_THREAD", raising=False)
    monkeypatch.delenv("WEDGE_NIXL_PROGRESS_DELAY_US", raising=False)
    env = rendered(real())["decode-0"][1]
    assert env["WEDGE_NIXL_PROGRESS_THREAD"] == "0" and env["WEDGE_NIXL_PROGRESS_DELAY_US"] == "0"
    monkeypatch.setenv("WEDGE_NIXL_PROGRESS_THREAD", "1")
    monkeypatch.setenv("WEDGE_NIXL_PROGRESS_DELAY_US", "2000")
    env = rendered(real())["prefill-0"][1]
    assert (
        env["WEDGE_NIXL_PROGRESS_THREAD"] == "1" and env["WEDGE_NIXL_PROGRESS_DELAY_US"] == "2000"
    )


def test_the_model_runs_inside_the_engine_core() -> None:
    argv, env = rendered(real())["decode-0"]
    assert argv[argv.index("--distributed-executor-backend") + 1] == "uni"
    # Else vLLM's CPU platform makes the uni executor the multiprocess one.
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_smg_learns_real_engines_by_registration_and_vllm_router_by_its_flags() -> None:
    smg = rendered(real("smg"))["router"][0]
    assert "--prefill" not in smg and "--decode" not in smg and real("smg").registers_workers
    vllm_router = rendered(real())["router"][0]
    assert "--prefill" in vllm_router and not real().registers_workers


def test_the_report_says_the_kv_itself_is_not_proxied() -> None:
    lines = not_proxied(real())
    assert any(line.startswith("the KV itself: UCX's own TCP connections") for line in lines)
    assert not any("SGLang-protocol" in line for line in lines)


def test_what_the_kind_refuses_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match="model= is only for kind='vllm'"):
        WorkerSpec(kind="stub", model="/m")
    with pytest.raises(ConfigError, match="vllm workers run behind smg or vllm-router"):
        real("sglang-router")
    mixed = TopologySpec(router=RouterSpec(kind="vllm-router"), prefill_worker=ENGINE)
    with pytest.raises(ConfigError, match="a vllm peer serving the same model"):
        with_engine(mixed, EXE)
    assert with_engine(TopologySpec(), EXE) is EXE  # stubs: nothing is installed


@pytest.mark.parametrize("engines", ["vllm", "stub"])
def test_a_real_engine_gets_a_probes_second_to_answer_and_stubs_keep_the_short_read(
    engines: str,
) -> None:
    """A loaded real engine answered /health and /metrics in over 0.2 s: a slow read there
    must not look like a hung engine. The router's reads stay short either way."""
    spec = real() if engines == "vllm" else TopologySpec(prefill=1, decode=1)
    links = {
        link.name: SimpleNamespace(listen=f"127.0.0.1:{30000 + i}", spec=link)
        for i, link in enumerate(spec.links(PortPlan.sequential(spec, 1)))
    }
    topology = SimpleNamespace(
        spec=spec,
        router_url="http://127.0.0.1:1",
        router_metrics_url="http://127.0.0.1:2/metrics",
        worker_url=lambda name: f"http://127.0.0.1:3/{name}",
        plan=PortPlan(http={}, bootstrap={"prefill-0": 4, "decode-0": 5}, router_metrics=2),
        links=links,
    )
    _, timeouts = observed_jobs(topology, 0.2)  # type: ignore[arg-type]
    worker_s = 1.0 if engines == "vllm" else 0.2
    assert timeouts["decode-0 metrics"] == timeouts["prefill-0 health"] == worker_s
    assert timeouts["via router->decode-0 health"] == worker_s
    assert timeouts["router health"] == timeouts["via client->router health"] == 0.2
    # NIXL's side channel is a ZMQ socket: a /health asked there, directly or through its
    # link, would never answer, and that silence would read as a broken transfer link.
    side_channel = ["prefill-0 bootstrap health", "via decode-0->prefill-0 health"]
    assert all((key in timeouts) == (engines == "stub") for key in side_channel)


def test_the_warm_up_ends_at_once_with_the_logs_when_an_engine_exits() -> None:
    """vLLM shuts its API server down when its EngineCore dies: the warm-up must say so at
    once, with the engines' log tails, not ask a router with no prefill for ten minutes."""

    class Exited:
        def exit_code(self, name: str) -> int | None:
            return 1 if name == "prefill-0" else None

        def log_path(self, name: str) -> str:
            return f"/logs/{name}.log"

        def logs(self, name: str, tail: int = 40) -> str:
            return f"{name}: EngineCore encountered a fatal error."

    never = httpx.Client(transport=httpx.MockTransport(lambda r: pytest.fail("asked anyway")))
    with pytest.raises(ComponentStartError) as raised:
        warm_up_engines(never, "http://127.0.0.1:1", real(), Exited(), 600.0)  # type: ignore[arg-type]
    said = str(raised.value)
    assert "prefill-0 exited while warming up" in said
    assert "prefill-0: EngineCore encountered a fatal error." in said


def test_engines_avoid_bf16_on_a_cpu_with_amx_tiles(tmp_path: Path) -> None:
    amx, epyc = tmp_path / "amx", tmp_path / "epyc"
    amx.write_text("flags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n")
    epyc.write_text("flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16\n")
    assert engine_dtype(amx) == "float16"
    assert engine_dtype(epyc) == "bfloat16"
    assert engine_dtype(tmp_path / "absent") == "bfloat16"
