"""The router's bring-up by kind: an isolated built-in gets its venv's script; a ``url`` router
is not started (port from its URL, ``router->worker`` proxies where it sends, readiness polled).
"""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

import httpx

from pytest_wedge.errors import ComponentStartError
from pytest_wedge.routers.adapters import adapter
from pytest_wedge.routers.envs import ensure_env
from pytest_wedge.routers.router_spec import BUILT_IN, RouterSpec
from pytest_wedge.spec.topology import LOOPBACK, Executables, PortPlan, TopologySpec
from pytest_wedge.waiting import poll


def with_router_executable(router: RouterSpec, exe: Executables) -> Executables:
    """``exe`` with the router kind's own binary: a pinned package's cached venv, made on
    first use (that can take a minute, outside the readiness deadline)."""
    if router.kind not in BUILT_IN:
        return exe
    kind = adapter(router.kind)
    if not kind.isolated:
        return dataclasses.replace(exe, router=exe.smg)
    env = ensure_env(kind.package, kind.version)
    return dataclasses.replace(exe, router=env.script(kind.script))


def _port(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url  # RouterSpec checked it
    return port


def url_router_plan(spec: TopologySpec, plan: PortPlan) -> PortPlan:
    """For a ``url`` router: its own port, its metrics port, and the prefills' bootstrap ports
    it was started with, in place of the allocated ones."""
    router = spec.router
    if router.managed:
        return plan
    metrics = _port(router.metrics_url) if router.metrics_url else 0
    bootstrap = dict(zip(spec.prefill_names, router.bootstrap_ports, strict=True))
    return PortPlan(
        http={**plan.http, "router": _port(router.url or "")},
        bootstrap=bootstrap,
        router_metrics=metrics,
    )


def url_router_listen(spec: TopologySpec) -> dict[str, str]:
    """Link name -> fixed listen address, for the links a ``url`` router already sends to."""
    router = spec.router
    if router.managed:
        return {}
    listen = {
        f"router->{p}": port
        for p, port in zip(spec.prefill_names, router.prefill_listen, strict=True)
    }
    listen |= {
        f"router->{d}": port
        for d, port in zip(spec.decode_names, router.decode_listen, strict=True)
    }
    return {name: f"{LOOPBACK}:{port}" for name, port in listen.items()}


def wait_answering(http: httpx.Client, urls: dict[str, str], timeout_s: float) -> dict[str, str]:
    """Poll each URL until it answers 200; the last answers of those that never did."""
    pending, last = dict(urls), dict.fromkeys(urls, "no answer yet")

    def ready() -> bool:
        for name, url in list(pending.items()):
            try:
                answer = http.get(url, timeout=1.0)
            except httpx.HTTPError as exc:
                last[name] = f"{type(exc).__name__}: {exc}"
                continue
            last[name] = f"{answer.status_code} {answer.text[:200]}"
            if answer.status_code == 200:
                del pending[name]
        return not pending

    poll(ready, timeout_s=timeout_s, interval_s=0.1)
    return {name: last[name] for name in pending}


def wait_url_router(http: httpx.Client, router: RouterSpec, url: str, timeout_s: float) -> None:
    """Wait until the running router answers its readiness path with 200."""
    path = router.ready_path or adapter(router.dialect).ready_path
    unready = wait_answering(http, {"router": url + path}, timeout_s)
    if unready:
        raise ComponentStartError(
            f"The url router at {url} did not become ready in {timeout_s:.0f} s",
            facts={
                "readiness": url + path,
                "last answer": unready["router"],
                "its workers' link ports": f"prefill {router.prefill_listen}, "
                f"decode {router.decode_listen}",
            },
            fix="check that the router was started with --prefill/--decode at those ports "
            "(the proxies listen there and forward to the workers) and that it is running",
        )


def register_workers(
    http: httpx.Client, router_url: str, workers: dict[str, str], timeout_s: float
) -> None:
    """Register each worker (name -> the URL the router reaches it at) with smg's
    ``POST /workers``, as a NIXL PD worker, once smg answers at all."""
    unready = wait_answering(http, {"router": router_url + "/health"}, timeout_s)
    answers: dict[str, str] = {}
    for name, url in workers.items():
        role = "prefill" if name.startswith("prefill-") else "decode"
        body = {"url": url, "worker_type": role, "kv_connector": "NixlConnector"}
        try:
            answer = http.post(router_url + "/workers", json=body, timeout=5.0)
        except httpx.HTTPError as exc:
            answers[name] = f"{type(exc).__name__}: {exc}"
            continue
        if answer.status_code >= 300:
            answers[name] = f"{answer.status_code} {answer.text[:200]}"
    if unready or answers:
        raise ComponentStartError(
            "smg did not take the vLLM workers' registration",
            facts={**unready, **answers},
            fix="check the router's log: smg must answer POST /workers "
            '{"url", "worker_type", "kv_connector": "NixlConnector"}',
        )
