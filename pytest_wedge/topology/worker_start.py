"""The bring-up of ``url`` workers, already running: ports from their URLs, KV proxies where
each decode sends KV (``kv_listen``), readiness polled on their URLs; nothing started or stopped.
"""

from __future__ import annotations

import httpx

from pytest_wedge.errors import ComponentStartError
from pytest_wedge.spec.topology import LOOPBACK, PortPlan, TopologySpec
from pytest_wedge.topology.router_start import url_router_listen, wait_answering


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


def wait_url_workers(
    http: httpx.Client, spec: TopologySpec, plan: PortPlan, timeout_s: float
) -> None:
    """Wait until every url worker answers its readiness path with 200."""
    urls = {
        name: f"http://{LOOPBACK}:{plan.http[name]}{spec.worker(name).ready_path}"
        for name in spec.url_workers
    }
    unready = wait_answering(http, urls, timeout_s)
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
