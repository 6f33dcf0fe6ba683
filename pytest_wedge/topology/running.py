"""A running topology: a Toxiproxy proxy for every link, the workers and the router (usable
without pytest, through ``WedgeSession().topology(spec)``)."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import httpx

from pytest_wedge.errors import ComponentStartError, ConfigError, MissingBinaryError
from pytest_wedge.loopback import loopback_client
from pytest_wedge.metrics_text import samples
from pytest_wedge.routers.adapters import starts_with_workers
from pytest_wedge.routers.vllm_engine import ENGINE_READY_S
from pytest_wedge.runtime.binaries import smg_path
from pytest_wedge.runtime.interface import Runtime, wait_ready
from pytest_wedge.spec.topology import (
    LOOPBACK,
    ComponentSpec,
    Executables,
    LinkSpec,
    PortPlan,
    TopologySpec,
    render_components,
    stub_ports,
)
from pytest_wedge.spec.workers import check_runtime
from pytest_wedge.stubs.control_client import StubClient, StubUnavailable
from pytest_wedge.topology.ports import PortAllocator, check_free
from pytest_wedge.topology.router_start import (
    register_workers,
    url_router_listen,
    url_router_plan,
    wait_url_router,
    with_router_executable,
)
from pytest_wedge.topology.toxiproxy import ToxiproxyClient
from pytest_wedge.topology.what_ran import describe_lines, router_metric_names
from pytest_wedge.topology.worker_start import (
    engines_idle,
    url_worker_listen,
    url_worker_plan,
    wait_url_workers,
    warm_up_engines,
    with_engine,
)
from pytest_wedge.waiting import poll

SHORT_TMP = 40  # the longest temp folder a vLLM engine's IPC socket paths still fit under
ENGINE_IDLE_S = 30.0  # how long a reset waits for vLLM engines to finish a test's requests


def find_executables(toxiproxy_binary: str) -> Executables:
    """The venv's python and smg: the stubs run with the interpreter that runs pytest."""
    smg = smg_path()
    if smg is None:
        raise MissingBinaryError(
            "The smg router was not found",
            facts={"looked for": f"smg on PATH and next to {sys.executable}"},
            fix="run `make install`, or `pip install 'smg>=1.13,<1.14'` into this environment",
        )
    return Executables(python=sys.executable, smg=smg, toxiproxy=toxiproxy_binary)


@dataclass(frozen=True)
class RunningLink:
    spec: LinkSpec
    listen_port: int
    proxy: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def listen(self) -> str:
        return f"{LOOPBACK}:{self.listen_port}"


class Topology:
    """Router + prefill + decode, every hop behind Toxiproxy. A context manager."""

    def __init__(
        self,
        spec: TopologySpec,
        runtime: Runtime,
        toxiproxy: ToxiproxyClient,
        exe: Executables,
        ports: PortAllocator,
        ready_timeout_s: float = 30.0,
        proxy_prefix: str = "",
    ) -> None:
        self.spec, self.runtime, self.toxiproxy, self.exe = spec, runtime, toxiproxy, exe
        self._allocator = ports
        # Two vLLM engines on two loaded cores took up to 214 s to answer /health.
        real = spec.real_engines
        self.ready_timeout_s = max(ready_timeout_s, ENGINE_READY_S) if real else ready_timeout_s
        self.proxy_prefix = proxy_prefix
        self.plan: PortPlan | None = None
        self.links: dict[str, RunningLink] = {}
        self.components: dict[str, ComponentSpec] = {}
        self.stubs: dict[str, StubClient] = {}
        self._engine_tmp: str | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="wedge-topo")
        # One pooled client for admin calls (no proxy variables, the shared SSL context).
        self.http = loopback_client(timeout=2.0)

    # -- bring-up ---------------------------------------------------------------------------
    def start(self) -> Topology:
        """From nothing to ready. A failed start rolls back whatever did start."""
        spec = self.spec
        check_runtime([spec.prefill_worker, spec.decode_worker], self.runtime.name)
        # A prefill's bootstrap port; a vLLM decode's NIXL side channel too.
        side = [*spec.prefill_names, *(spec.decode_names if spec.real_engine_decodes else [])]
        it = iter(self._allocator.take(len(spec.component_names) + len(side) + 1))
        http = {n: next(it) for n in spec.component_names}
        bootstrap = {name: next(it) for name in side}
        allocated = PortPlan(http=http, bootstrap=bootstrap, router_metrics=next(it))
        self.plan = url_worker_plan(spec, url_router_plan(spec, allocated))
        # Ports of what runs already (url router, url workers) are taken, by design.
        theirs = {*spec.url_workers, *([] if spec.router.managed else ["router"])}
        warm_up = getattr(self.runtime, "warm_up", None)
        warming = None
        try:
            check_free(
                {f"{n} http": p for n, p in self.plan.http.items() if n not in theirs}
                | {f"{n} bootstrap": p for n, p in self.plan.bootstrap.items() if n not in theirs}
                | ({"router metrics": self.plan.router_metrics} if spec.router.managed else {})
            )
            # The stub fork server's imports (a quarter second) overlap the proxies' creation,
            # and the stubs' ports listen from now on (see the router's start below).
            if callable(warm_up):
                warming = self._pool.submit(warm_up, self.exe.python, stub_ports(spec, self.plan))
            self.exe = with_engine(spec, with_router_executable(spec.router, self.exe))
            # One POST /populate for every link: 81 proxies of 8P+8D one by one took 3.4x as long.
            links = {self.proxy_prefix + link.proxy_name: link for link in spec.links(self.plan)}
            fixed = url_router_listen(spec) | url_worker_listen(spec)
            wanted = [{"name": proxy, "upstream": link.upstream} for proxy, link in links.items()]
            for entry, link in zip(wanted, links.values(), strict=True):
                if link.name in fixed:
                    entry["listen"] = fixed[link.name]
            ports = self.toxiproxy.populate(wanted)
            for proxy, link in links.items():
                self.links[link.name] = RunningLink(link, ports[proxy], proxy)
            listen = {name: link.listen_port for name, link in self.links.items()}
            for component in render_components(spec, self.plan, listen, self.exe):
                if spec.worker(component.name).kind == "vllm" and component.role != "router":
                    component = self._with_private_tmp(component)
                self.components[component.name] = component
                if component.is_stub:
                    url = f"http://{LOOPBACK}:{self.plan.http[component.name]}"
                    self.stubs[component.name] = StubClient(component.name, url)
            workers = [c for c in self.components.values() if c.role != "router"]
            listening = warming.result() if warming is not None else frozenset()
            router = self.components.get("router")
            # smg probes its workers once at start and then backs off for seconds. Refused,
            # it must wait for them to answer; when every worker's port already listens, its
            # probes wait in the accept queues instead, so it starts with its workers.
            early = (
                router is not None
                and starts_with_workers(spec.router.kind)
                and not spec.url_workers
                and all(set(c.ports) <= listening for c in workers)
            )
            # Independent, so in parallel; every start ends before a failure is raised, so the
            # rollback below never races a start still queued.
            starts = [
                self._pool.submit(self.runtime.start, c)
                for c in [*workers, *([router] if early and router else [])]
            ]
            wait(starts)
            for started in starts:
                started.result()
            deadline = time.monotonic() + self.ready_timeout_s
            wait_ready(self.runtime, workers, timeout_s=self.ready_timeout_s)
            wait_url_workers(
                self.http,
                spec,
                self.plan,
                max(1.0, deadline - time.monotonic()),
                ready_timeout_s=self.ready_timeout_s,
            )
            remaining = max(1.0, deadline - time.monotonic())
            if router is not None:
                if not early:
                    self.runtime.start(router)
                self._register_workers(remaining)
                wait_ready(self.runtime, [router], timeout_s=remaining)
            else:
                wait_url_router(self.http, spec.router, self.router_url, remaining)
            if spec.real_engines:
                warm_up_engines(self.http, self.router_url, spec, self.runtime, remaining)
        except BaseException:
            if warming is not None:  # a fork server still starting would keep the stubs' ports
                wait([warming])
            self.close()
            raise
        return self

    def _with_private_tmp(self, component: ComponentSpec) -> ComponentSpec:
        """A vLLM engine's temp folder of its own, removed at close: the engine leaves its
        IPC sockets there when it is killed."""
        if self._engine_tmp is None:
            # vLLM binds IPC sockets there, and a socket's path has at most 107 bytes.
            base = tempfile.gettempdir()
            base = base if len(base) <= SHORT_TMP else "/tmp"
            self._engine_tmp = tempfile.mkdtemp(prefix="wedge-vllm-", dir=base)
        folder = os.path.join(self._engine_tmp, component.name)
        os.makedirs(folder, exist_ok=True)
        env = (("TMPDIR", folder), ("VLLM_RPC_BASE_PATH", folder))
        return dataclasses.replace(component, env=(*component.env, *env))

    def _register_workers(self, timeout_s: float) -> None:
        """smg in front of vLLM engines learns them from POST /workers, through their links."""
        if self.spec.registers_workers:
            names = [*self.spec.prefill_names, *self.spec.decode_names]
            urls = {n: f"http://{self.links[f'router->{n}'].listen}" for n in names}
            register_workers(self.http, self.router_url, urls, timeout_s)

    def __enter__(self) -> Topology:
        return self.start() if self.plan is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses ---------------------------------------------------------------------------
    def _require_plan(self) -> PortPlan:
        if self.plan is None:
            raise ComponentStartError("The topology is not started", fix="call start() first")
        return self.plan

    @property
    def url(self) -> str:
        """Where clients send requests: the listen side of ``client->router``."""
        return f"http://{self.links['client->router'].listen}"

    @property
    def router_url(self) -> str:
        """The router's own port, bypassing the client link (for admin calls)."""
        return f"http://{LOOPBACK}:{self._require_plan().http['router']}"

    @property
    def router_metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self._require_plan().router_metrics}/metrics"

    def worker_url(self, name: str) -> str:
        """A worker's real port: what a stray requester outside the router talks to."""
        return f"http://{LOOPBACK}:{self._require_plan().http[name]}"

    def router_metrics(self, timeout_s: float = 2.0) -> str:
        """The router's Prometheus text (raises httpx.HTTPError when it does not answer)."""
        return self.http.get(self.router_metrics_url, timeout=timeout_s).text

    def describe(self) -> list[str]:
        """Each component's kind, binary, version and start, then the unproxied traffic."""
        return describe_lines(self)

    def pd_pair(self, decode: str) -> list[str]:
        """The components a co-restart of ``decode``'s PD pair restarts."""
        return [*self.spec.prefill_names, decode]

    # -- between tests ------------------------------------------------------------------------
    def reset(self) -> None:
        """Remove every fault, resume what is paused, restart what is dead, reset the stubs."""
        for name in self.components:
            if self.runtime.state(name) == "paused":
                self.runtime.resume(name)
        broken = [n for n in self.components if self.runtime.state(n) != "running"]
        self.toxiproxy.reset()
        if "router" not in broken and self.spec.router.managed and not self._router_is_clean():
            broken.append("router")
        if self.spec.real_engines and not broken:
            engines = [self.worker_url(n) for n in self.components if n != "router"]
            # A request of the previous test still in an engine would count in this one.
            idle = poll(
                lambda: engines_idle(self.http, engines), timeout_s=ENGINE_IDLE_S, interval_s=0.2
            )
            if not idle.met:
                broken = [n for n in self.components if n != "router"]
        if broken:
            self.restart(*broken)
        list(self._pool.map(lambda stub: stub.reset(), self.stubs.values()))

    def _router_is_clean(self) -> bool:
        """False when open breakers or a worker listed unhealthy would leak into the next test:
        smg keeps a breaker open for a minute, and a resumed worker stays out of rotation until
        enough health checks pass (a minute apart by default). A router restart is cheaper than
        waiting either out."""
        try:
            ready = self.http.get(self.router_url + "/readiness")
            metrics = self.router_metrics()
            listed = self.http.get(self.router_url + "/workers")
        except httpx.HTTPError:
            return False
        breaker = router_metric_names(self.spec.router).breaker
        breakers_open = breaker is not None and any(v != 0 for _, v in samples(metrics, breaker))
        return ready.status_code == 200 and not breakers_open and not _lists_unhealthy(listed)

    def restart(self, *names: str, timeout_s: float | None = None) -> float:
        """Kill all of ``names``, then bring back prefills, decodes and router, each group ready
        before the next (else a decode may pair with a gone prefill and wait for KV for ever)."""
        ranks = {"prefill": 0, "decode": 1, "router": 2}

        def rank(name: str) -> int:
            return ranks.get(self.components[name].role, 1)

        order = sorted(set(names), key=rank)
        for name in order:
            self.runtime.kill(name)
        started = time.monotonic()
        deadline = started + (timeout_s or self.ready_timeout_s)
        for _, group in itertools.groupby(order, key=rank):
            batch = list(group)
            for name in batch:
                self.runtime.restart(name)  # the kill in it finds nothing left to kill
            if "router" in batch:
                self._register_workers(max(1.0, deadline - time.monotonic()))
            wait_ready(
                self.runtime,
                [self.components[n] for n in batch],
                timeout_s=max(1.0, deadline - time.monotonic()),
            )
        if self.spec.real_engines:
            left = max(1.0, deadline - time.monotonic())
            warm_up_engines(self.http, self.router_url, self.spec, self.runtime, left)
        return time.monotonic() - started

    def stub(self, name: str) -> StubClient:
        try:
            return self.stubs[name]
        except KeyError:
            if name in self.spec.foreign_workers:
                raise ConfigError(
                    f"{name} is a {self.spec.worker(name).kind} worker: it has no pytest-wedge "
                    "control API",
                    facts={"worker": name, "started from": self.spec.worker(name).describe()},
                    fix="engine faults and stub watchdogs need a stub worker: use a network "
                    "fault (Timeout, Down, ...) or a component fault (Pause, Kill, Restart) on "
                    "it, or run that role as a stub",
                ) from None
            raise StubUnavailable(
                f"{name} is not a pytest-wedge stub",
                facts={"stubs": ", ".join(self.stubs)},
                fix="engine faults need a stub worker",
            ) from None

    def pids(self) -> dict[str, int | None]:
        return {name: self.runtime.pid(name) for name in self.components}

    # -- teardown -----------------------------------------------------------------------------
    def close(self) -> None:
        for name in reversed(list(self.components)):
            with contextlib.suppress(Exception):
                self.runtime.kill(name)
        # The process runtime's stub fork server outlives its workers until released.
        release_idle = getattr(self.runtime, "release_idle", None)
        if callable(release_idle):
            release_idle()
        for link in self.links.values():
            with contextlib.suppress(Exception):
                self.toxiproxy.delete_proxy(link.proxy)
        for stub in self.stubs.values():
            stub.close()
        if self._engine_tmp is not None:
            shutil.rmtree(self._engine_tmp, ignore_errors=True)
        if self.plan is not None:
            self._allocator.release(self.plan.all_ports())
        self.links.clear()
        self._pool.shutdown(wait=False)
        self.http.close()


def _lists_unhealthy(listed: httpx.Response) -> bool:
    """Whether the router's ``/workers`` (smg, sglang-router and vllm-router alike) lists a
    worker with ``is_healthy`` false; a router without that list has told nothing."""
    try:
        body = listed.json()
    except ValueError:
        return False
    workers = body.get("workers", []) if isinstance(body, dict) else []
    return any(isinstance(w, dict) and w.get("is_healthy") is False for w in workers)
