"""The workers' bring-up by kind: a ``vllm`` worker's engine and model are made on first use;
``url`` workers already run: ports from their URLs, KV proxies where each decode sends KV
(``kv_listen``), readiness polled on their URLs; nothing started or stopped.
"""

from __future__ import annotations

import dataclasses

import httpx

from pytest_wedge.errors import ComponentStartError, ConfigError
from pytest_wedge.metrics_text import samples
from pytest_wedge.routers.vllm_engine import ensure_engine
from pytest_wedge.runtime.interface import Runtime
from pytest_wedge.spec.topology import LOOPBACK, Executables, PortPlan, TopologySpec
from pytest_wedge.topology.router_start import url_router_listen, wait_answering
from pytest_wedge.waiting import poll


def with_engine(spec: TopologySpec, exe: Executables) -> Executables:
    """``exe`` with the vllm kind's engine, made on first use (minutes the first time, outside
    the readiness deadline)."""
    kinds = {spec.prefill_worker.kind, spec.decode_worker.kind}
    if "vllm" not in kinds:
        return exe
    if kinds != {"vllm"} or spec.prefill_worker.model != spec.decode_worker.model:
        raise ConfigError(
            "A vllm worker needs a vllm peer serving the same model",
            facts={
                "prefill": spec.prefill_worker.describe(),
                "decode": spec.decode_worker.describe(),
            },
            fix="give both roles {'kind': 'vllm'} (and the same model=, if any): the KV moves "
            "between two vLLM engines over NIXL",
        )
    return dataclasses.replace(exe, engine=ensure_engine(spec.prefill_worker.model))


def warm_up_engines(
    http: httpx.Client, router_url: str, spec: TopologySpec, runtime: Runtime, timeout_s: float
) -> None:
    """PD requests through the router until each decode has done its NIXL handshake with each
    prefill: the first one, on a cold prefill, may miss vLLM's fixed 5 s handshake timeout (a
    500), so a started topology has it behind it. An engine that exits meanwhile (vLLM shuts
    its API server down when its EngineCore dies) ends the wait at once. Nothing of this is in
    the client ledger."""
    wanted = spec.prefill * spec.decode
    engines = [*spec.prefill_names, *spec.decode_names]
    body = {"model": spec.stub.model, "prompt": "warm up the kv transfer", "max_tokens": 1}
    answers: list[str] = []

    def answered() -> bool:
        if exited := [n for n in engines if runtime.exit_code(n) is not None]:
            raise _warm_up_failed(
                f"{', '.join(exited)} exited while warming up",
                router_url,
                answers,
                runtime,
                engines,
            ) from None
        try:
            got = http.post(router_url + "/v1/completions", json=body, timeout=60.0)
            answers.append(f"{got.status_code} {got.text[:200]}")
        except httpx.HTTPError as exc:
            answers.append(f"{type(exc).__name__}: {exc}")
        return sum(a.startswith("200 ") for a in answers) >= wanted

    if not poll(answered, timeout_s=timeout_s, interval_s=0.5).met:
        raise _warm_up_failed(
            "The vLLM engines did not answer a PD request through the router",
            router_url,
            answers,
            runtime,
            engines,
        )


def _warm_up_failed(
    headline: str, router_url: str, answers: list[str], runtime: Runtime, names: list[str]
) -> ComponentStartError:
    engines = [n for n in names if runtime.log_path(n)]
    tails = "\n".join(f"--- {n}\n{runtime.logs(n, tail=12)}" for n in engines)
    return ComponentStartError(
        headline,
        facts={
            "router": router_url,
            "answers": "; ".join(answers[-3:]) or "none yet",
            "logs": ", ".join(str(runtime.log_path(n)) for n in engines),
        },
        log_tail=tails,
        fix="read the engines' log tails (an EngineCore that died, NIXL handshake or transfer "
        "errors)",
    )


IDLE_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def engines_idle(http: httpx.Client, urls: list[str]) -> bool:
    """True when no engine runs or queues a request (what a test left must be gone)."""
    for url in urls:
        try:
            text = http.get(url + "/metrics", timeout=2.0).text
        except httpx.HTTPError:
            return False
        if any(v for name in IDLE_GAUGES for _, v in samples(text, name)):
            return False
    return True


def url_worker_plan(spec: TopologySpec, plan: PortPlan) -> PortPlan:
    """``plan`` with the url workers' own ports and url prefills' bootstrap ports."""
    http, bootstrap = dict(plan.http), dict(plan.bootstrap)
    for role, names in (("prefill", spec.prefill_names), ("decode", spec.decode_names)):
        worker = spec.prefill_worker if role == "prefill" else spec.decode_worker
        if worker.managed:
            continue
        http |= {name: worker.port(i) for i, name in enumerate(names)}
        if role == "prefill":
            bootstrap = dict(zip(names, worker.bootstrap_ports, strict=True))
    return PortPlan(http=http, bootstrap=bootstrap, router_metrics=plan.router_metrics)


def url_worker_listen(spec: TopologySpec) -> dict[str, str]:
    """Link name -> fixed listen address, for the KV links url decodes already send to."""
    listen: dict[str, str] = {}
    worker = spec.decode_worker
    if worker.managed or not worker.kv_listen:  # a stub decode is told its links' ports
        return listen
    for d, ports in zip(spec.decode_names, worker.kv_listen, strict=True):
        listen |= {
            f"{d}->{p}": f"{LOOPBACK}:{port}"
            for p, port in zip(spec.prefill_names, ports, strict=True)
        }
    return listen


# A url worker already runs, so one that refuses every connection is down or at another port:
# it is given up on after REFUSED_S, not the whole ready timeout. A ready timeout above the
# default says the user starts their workers alongside the run, so then it is waited on.
REFUSED_S = 3.0
DEFAULT_READY_TIMEOUT_S = 30.0  # wedge_ready_timeout's default


def wait_url_workers(
    http: httpx.Client,
    spec: TopologySpec,
    plan: PortPlan,
    timeout_s: float,
    *,
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
) -> None:
    """Wait until every url worker answers its readiness path with 200 (one that refuses every
    connection for ``REFUSED_S`` fails then, unless ``ready_timeout_s`` is above the default)."""
    urls = {
        name: f"http://{LOOPBACK}:{plan.http[name]}{spec.worker(name).ready_path}"
        for name in spec.url_workers
    }
    patient = ready_timeout_s > DEFAULT_READY_TIMEOUT_S
    first_s = timeout_s if patient else min(REFUSED_S, timeout_s)
    unready = wait_answering(http, urls, first_s)
    refusing = [name for name, last in unready.items() if last.startswith("ConnectError")]
    if refusing:
        raise ComponentStartError(
            f"The url worker(s) {', '.join(refusing)} still refused connections after "
            f"{first_s:.0f} s: nothing listens at their URLs",
            facts={name: f"{urls[name]}: {unready[name]}" for name in refusing},
            fix="start each worker before the run, or correct its URL in prefill_worker/"
            "decode_worker (pytest-wedge does not start url workers); for workers that start "
            f"alongside the run, set --wedge-ready-timeout above {DEFAULT_READY_TIMEOUT_S:.0f} "
            "and they are waited on for all of it",
        )
    if unready:
        rest = {name: urls[name] for name in unready}
        unready = wait_answering(http, rest, max(0.0, timeout_s - first_s))
    if unready:
        raise ComponentStartError(
            f"The url worker(s) {', '.join(unready)} did not become ready in {timeout_s:.0f} s",
            facts={name: f"{urls[name]}: {last}" for name, last in unready.items()},
            fix="check that each worker runs and answers its ready_path at the URL you gave "
            "(pytest-wedge does not start url workers)",
        )


def fixed_listen(spec: TopologySpec) -> set[str]:
    """The addresses this spec's proxies must listen on, because something already running
    (a url router or url decode) sends there: two topologies cannot hold them at once."""
    return set((url_router_listen(spec) | url_worker_listen(spec)).values())
