"""The topology as pure data: components, links and the port plan. No I/O happens here.

A topology is one router, N prefill workers and M decode workers. Every hop between them is a
*link*: one Toxiproxy proxy. Components are always pointed at the listen side of their links,
never at a peer's real port, so any hop can be faulted.

Link listen ports are chosen by Toxiproxy (port 0, race-free), so component command lines are
rendered in a second step, once those ports are known: ``plan_links`` -> create proxies ->
``render_components``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from pytest_wedge.errors import ConfigError
from pytest_wedge.routers.adapters import adapter
from pytest_wedge.routers.router_spec import AUTO_PROTOCOL, RouterSpec, resolve_worker_protocol
from pytest_wedge.routers.template import TemplateValues, WorkerValues, render_template

# Re-exported: ComponentSpec and the flag lived here, and callers import them from here.
from pytest_wedge.spec.component import LEDGERLESS_FLAG as LEDGERLESS_FLAG
from pytest_wedge.spec.component import ComponentSpec as ComponentSpec
from pytest_wedge.spec.workers import WorkerSpec, check_counts, worker_argv

LOOPBACK = "127.0.0.1"
STUB_PROTOCOLS = ("sglang", "vllm")  # the stubs' --protocol choices (stubs/config.py)
# TopologySpec's fields that are its own bookkeeping, not settings (not marker keywords).
BOOKKEEPING_FIELDS = ("protocol_follows_router",)


@dataclass(frozen=True)
class StubOptions:
    """Engine behaviour of the stub workers (see ``python -m pytest_wedge.stubs --help``)."""

    model: str = "stub-model"
    seed: int = 0
    itl_ms: float = 2.0
    prefill_ms_per_token: float = 0.05
    max_running: int = 64
    max_queue: int = 1024
    max_tokens_default: int = 16
    inflight_pin_watchdog_s: float = 0.0
    transfer_timeout_s: float = 0.0
    bootstrap_timeout_s: float = 300.0
    # Decode admission (stubs/admission.py): preallocation slots (0: twice max_running, as
    # SGLang sizes its pre-allocation pool) and what a failed KV transfer does to its slot.
    prealloc_slots: int = 0
    slot_on_transfer_failure: str = "released"  # or released_after_timeout, leaked
    prealloc_hold: str = "transfer"  # or "request": the slot is held through generation
    bootstrap_no_progress_s: float = 0.0  # a no-progress bootstrap deadline on prefill (0: off)
    # The engine the stubs impersonate: "sglang" (bootstrap rooms) or "vllm" (kv_transfer_params).
    protocol: str = "sglang"
    # False: the stubs run without their ledger and control API, so the plugin knows only
    # their public endpoints (as with a foreign worker); engine faults are then unavailable.
    ledger: bool = True
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.protocol not in STUB_PROTOCOLS:
            raise ConfigError(
                f"Unknown stub protocol {self.protocol!r}",
                facts={"known": ", ".join(STUB_PROTOCOLS)},
                fix='pass stub={"protocol": "sglang"} or stub={"protocol": "vllm"}',
            )

    def argv(self) -> list[str]:
        """Every engine field as ``--field-name VALUE``, in the order they are declared."""
        names = [f.name for f in fields(self) if f.name not in _NOT_FLAGS]
        args = [str(a) for name in names for a in (_flag(name), getattr(self, name))]
        # Only when not the default: the default command lines (and compose) stay as they are.
        if self.protocol != "sglang":
            args += ["--protocol", self.protocol]
        return [*args, *([] if self.ledger else [LEDGERLESS_FLAG]), *self.extra_args]


_NOT_FLAGS = ("protocol", "ledger", "extra_args")  # passed only when not the default


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class TopologySpec:
    """What to run. Immutable, hashable: equal specs share one session-scoped topology."""

    prefill: int = 1
    decode: int = 1
    router_args: tuple[str, ...] = ()
    stub: StubOptions = field(default_factory=StubOptions)
    router: RouterSpec = field(default_factory=RouterSpec)
    # The workers' personality: "vllm" launches the stubs with ``--protocol vllm``, "sglang"
    # with the stubs' default. "auto" (default): the router's own protocol, so vllm-router
    # (also by ``--wedge-router``) gets vLLM-protocol stubs. Read back, it is always resolved.
    worker_protocol: str = AUTO_PROTOCOL
    # Set when the protocol was left to the router: it follows the router through
    # ``dataclasses.replace(spec, router=...)``; a replaced stub protocol ends that. Not part
    # of equality (the resolved protocol is).
    protocol_follows_router: bool = field(default=False, compare=False, repr=False)
    # How each role's workers start: our stub (default) or a user's command (workers.py).
    prefill_worker: WorkerSpec = field(default_factory=WorkerSpec)
    decode_worker: WorkerSpec = field(default_factory=WorkerSpec)

    def __post_init__(self) -> None:
        self._resolve_protocol()
        self.router.check_counts(self.prefill, self.decode)
        check_counts(self.prefill_worker, self.decode_worker, self.prefill, self.decode)
        if self.prefill < 1 or self.decode < 1:
            raise ConfigError(
                "A PD topology needs at least one prefill and one decode worker",
                facts={"prefill": self.prefill, "decode": self.decode},
                fix="pass prefill >= 1 and decode >= 1",
            )

    def _resolve_protocol(self) -> None:
        chosen, follows = resolve_worker_protocol(
            self.worker_protocol, self.stub.protocol, self.router, self.protocol_follows_router
        )
        object.__setattr__(self, "worker_protocol", chosen)
        object.__setattr__(self, "protocol_follows_router", follows)
        object.__setattr__(self, "stub", replace(self.stub, protocol=chosen))

    def worker(self, name: str) -> WorkerSpec:
        """How worker ``name`` (``prefill-i`` or ``decode-j``) starts."""
        return self.prefill_worker if name.startswith("prefill-") else self.decode_worker

    @property
    def foreign_workers(self) -> list[str]:
        """Workers the plugin knows only by their public endpoints (command and url)."""
        return [n for n in [*self.prefill_names, *self.decode_names] if self.worker(n).foreign]

    @property
    def url_workers(self) -> list[str]:
        """Workers already running: not started, paused, restarted or stopped by the plugin."""
        return [n for n in [*self.prefill_names, *self.decode_names] if not self.worker(n).managed]

    @property
    def prefill_names(self) -> list[str]:
        return [f"prefill-{i}" for i in range(self.prefill)]

    @property
    def decode_names(self) -> list[str]:
        return [f"decode-{j}" for j in range(self.decode)]

    @property
    def component_names(self) -> list[str]:
        return ["router", *self.prefill_names, *self.decode_names]

    def links(self, ports: PortPlan) -> list[LinkSpec]:
        """Every hop, in the order a request crosses them, each with its real upstream."""
        links = [LinkSpec("client->router", "client", "router", ports.http["router"])]
        links += [LinkSpec(f"router->{p}", "router", p, ports.http[p]) for p in self.prefill_names]
        links += [LinkSpec(f"router->{d}", "router", d, ports.http[d]) for d in self.decode_names]
        links += [
            LinkSpec(f"{d}->{p}", d, p, ports.bootstrap[p])
            for d in self.decode_names
            for p in self.prefill_names
        ]
        return links

    def link_names(self) -> list[str]:
        dummy = PortPlan.sequential(self, 1)
        return [link.name for link in self.links(dummy)]


@dataclass(frozen=True)
class LinkSpec:
    """One hop behind one Toxiproxy proxy. ``upstream_port`` is the target's real port."""

    name: str
    source: str
    target: str
    upstream_port: int

    @property
    def upstream(self) -> str:
        return f"{LOOPBACK}:{self.upstream_port}"

    @property
    def proxy_name(self) -> str:
        # Toxiproxy names travel in URL paths, where '>' needs escaping; keep them plain.
        return self.name.replace("->", "__to__")


@dataclass(frozen=True)
class PortPlan:
    """Ports chosen in advance (below 32768, outside the kernel's ephemeral range)."""

    http: dict[str, int]
    bootstrap: dict[str, int]
    router_metrics: int

    @classmethod
    def sequential(cls, spec: TopologySpec, base: int) -> PortPlan:
        """A deterministic plan from ``base`` up; for tests and for rendering names."""
        ports = iter(range(base, base + 100))
        http = {name: next(ports) for name in spec.component_names}
        bootstrap = {p: next(ports) for p in spec.prefill_names}
        return cls(http=http, bootstrap=bootstrap, router_metrics=next(ports))

    def all_ports(self) -> list[int]:
        return [*self.http.values(), *self.bootstrap.values(), self.router_metrics]


@dataclass(frozen=True)
class Executables:
    """Where the programs live. Docker images keep the host's absolute paths, so one set of
    command lines serves both runtimes."""

    python: str
    smg: str
    toxiproxy: str
    router: str | None = None  # the router kind's own binary (an isolated venv's), else smg


def render_components(
    spec: TopologySpec,
    ports: PortPlan,
    listen: dict[str, int],
    exe: Executables,
) -> list[ComponentSpec]:
    """Command lines for the router and the stubs, pointed at their links' listen ports.

    ``listen`` maps link names to the port Toxiproxy gave each proxy.
    """
    components: list[ComponentSpec] = []
    for p in spec.prefill_names if spec.prefill_worker.managed else []:
        components.append(
            ComponentSpec(
                name=p,
                role="prefill",
                argv=worker_argv(
                    spec.prefill_worker,
                    _stub_command(spec, exe, p, ports, "--bootstrap-port", str(ports.bootstrap[p])),
                    _worker_values(spec, p, ports, ports.bootstrap[p], (), exe),
                ),
                ready_url=f"http://{LOOPBACK}:{ports.http[p]}{spec.prefill_worker.ready_path}",
                ports=worker_ports(p, ports),
                foreign=spec.prefill_worker.foreign,
            )
        )
    for d in spec.decode_names if spec.decode_worker.managed else []:
        # smg hands every decode the same bootstrap address for a prefill; each decode maps it
        # onto its own link so one pair's KV transfer can be cut and the others' left alone.
        routes: list[str] = []
        kv_listen = tuple(f"{LOOPBACK}:{listen[f'{d}->{p}']}" for p in spec.prefill_names)
        for p in spec.prefill_names:
            routes += [
                "--bootstrap-route",
                f"{LOOPBACK}:{ports.bootstrap[p]}={LOOPBACK}:{listen[f'{d}->{p}']}",
            ]
        components.append(
            ComponentSpec(
                name=d,
                role="decode",
                argv=worker_argv(
                    spec.decode_worker,
                    _stub_command(spec, exe, d, ports, *routes),
                    _worker_values(spec, d, ports, None, kv_listen, exe),
                ),
                ready_url=f"http://{LOOPBACK}:{ports.http[d]}{spec.decode_worker.ready_path}",
                ports=worker_ports(d, ports),
                foreign=spec.decode_worker.foreign,
            )
        )
    router = _router_component(spec, ports, listen, exe)
    if router is not None:
        components.append(router)
    return components


def _stub_command(
    spec: TopologySpec, exe: Executables, name: str, ports: PortPlan, *extra: str
) -> tuple[str, ...]:
    role = name.split("-")[0]
    head = (exe.python, "-m", "pytest_wedge.stubs", "--role", role, "--name", name)
    return (*head, "--host", LOOPBACK, "--port", str(ports.http[name]), *extra, *spec.stub.argv())


def worker_ports(name: str, ports: PortPlan) -> tuple[int, ...]:
    """A managed worker's listening ports: its HTTP port, and a prefill's bootstrap port."""
    return (ports.http[name], *([ports.bootstrap[name]] if name in ports.bootstrap else []))


def stub_ports(spec: TopologySpec, ports: PortPlan) -> list[int]:
    """Every port that a stub worker of ``spec`` (not a user's command) listens on."""
    stubs = [
        n
        for n in [*spec.prefill_names, *spec.decode_names]
        if spec.worker(n).managed and not spec.worker(n).foreign
    ]
    return [port for name in stubs for port in worker_ports(name, ports)]


def _worker_values(
    spec: TopologySpec,
    name: str,
    ports: PortPlan,
    bootstrap: int | None,
    kv_listen: tuple[str, ...],
    exe: Executables,
) -> WorkerValues:
    """A command worker's placeholder values: its ports and its links' listen sides."""
    return WorkerValues(
        LOOPBACK,
        ports.http[name],
        name,
        name.split("-")[0],
        bootstrap,
        tuple(ports.bootstrap[p] for p in spec.prefill_names),
        kv_listen,
        exe.python,
        tuple(spec.stub.argv()),
    )


def _router_component(
    spec: TopologySpec, ports: PortPlan, listen: dict[str, int], exe: Executables
) -> ComponentSpec | None:
    """The router's command line from its adapter or the user's template; None for ``url``."""
    kind = spec.router
    if not kind.managed:
        return None
    host, port = LOOPBACK, ports.http["router"]
    prefill_urls = [f"http://{LOOPBACK}:{listen[f'router->{p}']}" for p in spec.prefill_names]
    decode_urls = [f"http://{LOOPBACK}:{listen[f'router->{d}']}" for d in spec.decode_names]
    bootstraps = [ports.bootstrap[p] for p in spec.prefill_names]
    if kind.kind == "command":
        values = TemplateValues(
            host,
            port,
            ports.router_metrics,
            tuple(prefill_urls),
            tuple(decode_urls),
            tuple(bootstraps),
            exe.python,
        )
        argv = [*render_template(kind.command, values), *spec.router_args]
    else:
        argv = adapter(kind.kind).argv(
            exe.router or exe.smg,
            host,
            port,
            ports.router_metrics,
            list(zip(prefill_urls, bootstraps, strict=True)),
            decode_urls,
            spec.router_args,
        )
    ready_path = kind.ready_path or adapter(kind.dialect).ready_path
    return ComponentSpec(
        name="router",
        role="router",
        argv=tuple(argv),
        # Readiness, not liveness: 200 only once a healthy prefill and decode are registered.
        ready_url=f"http://{LOOPBACK}:{port}{ready_path}",
        ports=(port, ports.router_metrics),
    )
