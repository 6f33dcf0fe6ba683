"""The topology as pure data: one router, N prefills, M decodes, and a *link* (a Toxiproxy
proxy) on every hop between them. Components are pointed at their links' listen sides, never at
a peer's real port, so any hop can be faulted; those ports are Toxiproxy's choice, so command
lines are rendered once they are known (``render_components``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from pytest_wedge.errors import ConfigError
from pytest_wedge.routers.adapters import adapter
from pytest_wedge.routers.router_spec import AUTO_PROTOCOL, RouterSpec, resolve_worker_protocol
from pytest_wedge.routers.template import TemplateValues, WorkerValues, render_template
from pytest_wedge.routers.vllm_engine import EngineInstall, engine_argv, engine_env

# Re-exported: ComponentSpec and the flag lived here, and callers import them from here.
from pytest_wedge.spec.component import LEDGERLESS_FLAG as LEDGERLESS_FLAG
from pytest_wedge.spec.component import STUB_MODULE, Role
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
    """The model name the workers serve and the loads ask for."""
    seed: int = 0
    """Seeds the workers' randomness (token text, ``ErrorStatus`` probability)."""
    itl_ms: float = 2.0
    """The time between two tokens of a decode, in milliseconds."""
    prefill_ms_per_token: float = 0.05
    """The prefill's time per prompt token, in milliseconds."""
    max_running: int = 64
    """Requests a worker runs at once; the rest queue (FIFO)."""
    max_queue: int = 1024
    """Requests that may wait for a running slot; one more is answered 503 (queue full)."""
    max_tokens_default: int = 16
    """Tokens a decode sends for a request that gives no ``max_tokens``."""
    inflight_pin_watchdog_s: float = 0.0
    """Prefill engine watchdog: release a request pinned in flight this long (0: off)."""
    transfer_timeout_s: float = 0.0
    """Decode engine watchdog: fail a request that waits this long for its KV (0: off)."""
    bootstrap_timeout_s: float = 300.0
    """Prefill: fail a request whose KV no decode fetched within this many seconds."""
    prealloc_slots: int = 0
    """Decode KV preallocation slots; 0: twice ``max_running``, as SGLang sizes its pool."""
    slot_on_transfer_failure: str = "released"
    """A decode's preallocation slot after its KV transfer failed: ``released`` at once,
    ``released_after_timeout`` (after ``transfer_timeout_s``) or ``leaked`` (never)."""
    prealloc_hold: str = "transfer"
    """How long a decode holds its preallocation slot: until its KV arrived (``transfer``) or
    until the request ends (``request``)."""
    bootstrap_no_progress_s: float = 0.0
    """Prefill: fail the requests no decode came for once none came for any room this long
    (a no-progress bootstrap deadline; 0: off)."""
    kv_slots: int = 0
    """Prefill: requests whose KV it holds at once, from admission until a decode has taken
    it or it expired; the rest wait for blocks (0: no limit)."""
    sigterm_drain_s: float = 0.0
    """On SIGTERM, let the requests in flight finish for up to this many seconds (new ones
    and ``/health`` get 503), as SGLang's HTTP server and vLLM's ``--shutdown-timeout`` do;
    0: stop at once, cutting them (vLLM's default). A runtime's stop waits the Terminate
    fault's ``grace_s`` (or the pod's ``terminationGracePeriodSeconds``) before SIGKILL."""
    keepalive_timeout_s: float = 0.0
    """The engine server's keep-alive timeout: a generation request on a connection idle this
    long finds it closed and reset, as when a router's pool reuses a connection the server's
    keep-alive timer (5 s in SGLang and vLLM) closed (smg pull request #2162; 0: off)."""
    protocol: str = "sglang"
    """The engine the stubs impersonate: ``sglang`` (bootstrap rooms) or ``vllm``
    (``kv_transfer_params``); ``worker_protocol`` sets it for a topology."""
    ledger: bool = True
    """False: no ledger and no control API, only public endpoints (and no engine faults)."""
    extra_args: tuple[str, ...] = ()
    """More flags for ``python -m pytest_wedge.stubs``, appended to its command line."""

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
    # "auto": the router's own protocol (vllm-router gets vLLM stubs); read back, resolved.
    worker_protocol: str = AUTO_PROTOCOL
    # Left to the router: a ``replace(spec, router=...)`` follows it; not part of equality.
    protocol_follows_router: bool = field(default=False, compare=False, repr=False)
    prefill_worker: WorkerSpec = field(default_factory=WorkerSpec)
    decode_worker: WorkerSpec = field(default_factory=WorkerSpec)

    def __post_init__(self) -> None:
        self._resolve_protocol()
        self.router.check_counts(self.prefill, self.decode)
        check_counts(self.prefill_worker, self.decode_worker, self.prefill, self.decode)
        real = {self.prefill_worker.kind, self.decode_worker.kind} & {"vllm"}
        if real and self.router.kind not in ("smg", "vllm-router"):
            raise ConfigError(
                f"vllm workers run behind smg or vllm-router, not {self.router.kind}",
                facts={"router": self.router.describe()},
                fix="pass router='vllm-router' or router='smg'",
            )
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
    def real_engines(self) -> bool:
        """True when a role runs real vLLM engines (the ``vllm`` worker kind)."""
        return "vllm" in (self.prefill_worker.kind, self.decode_worker.kind)

    @property
    def real_engine_decodes(self) -> bool:
        """True when the decodes are real vLLM engines (each needs a side channel port)."""
        return self.decode_worker.kind == "vllm"

    @property
    def registers_workers(self) -> bool:
        """True when the router learns its workers by ``POST /workers`` after it starts: smg
        in front of vLLM engines (with ``kv_connector``, so that decode pulls the KV; workers
        given with ``--prefill``/``--decode`` run in passthrough and recompute the prompt)."""
        return self.real_engine_decodes and self.router.kind == "smg"

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
    """Where the programs live (docker images keep the host's paths, so both runtimes agree)."""

    python: str
    smg: str
    toxiproxy: str
    router: str | None = None  # the router kind's own binary (an isolated venv's), else smg
    engine: EngineInstall | None = None  # the vllm worker kind's, when a role runs it


def render_components(
    spec: TopologySpec, ports: PortPlan, listen: dict[str, int], exe: Executables
) -> list[ComponentSpec]:
    """Command lines for the managed workers and the router, pointed at their links' listen
    ports (``listen``: link name -> the port Toxiproxy gave its proxy)."""
    components = [
        _worker_component(spec, name, ports, listen, exe)
        for name in [*spec.prefill_names, *spec.decode_names]
        if spec.worker(name).managed
    ]
    router = _router_component(spec, ports, listen, exe)
    return components if router is None else [*components, router]


def _worker_component(
    spec: TopologySpec, name: str, ports: PortPlan, listen: dict[str, int], exe: Executables
) -> ComponentSpec:
    worker, port = spec.worker(name), ports.http[name]
    role: Role = "prefill" if name.startswith("prefill-") else "decode"
    bootstrap = ports.bootstrap.get(name) if role == "prefill" else None
    kv_listen: tuple[str, ...] = ()
    extra: tuple[str, ...] = ("--bootstrap-port", str(bootstrap)) if bootstrap else ()
    if role == "decode":
        # smg hands every decode the same bootstrap address for a prefill; each decode maps it
        # onto its own link so one pair's KV transfer can be cut and the others' left alone.
        kv_listen = tuple(f"{LOOPBACK}:{listen[f'{name}->{p}']}" for p in spec.prefill_names)
        for p, kv in zip(spec.prefill_names, kv_listen, strict=True):
            extra += ("--bootstrap-route", f"{LOOPBACK}:{ports.bootstrap[p]}={kv}")
    stub_args = tuple(spec.stub.argv())
    stub: tuple[str, ...] = (exe.python, "-m", STUB_MODULE, "--role", role, "--name", name)
    stub += ("--host", LOOPBACK, "--port", str(port), *extra, *stub_args)
    prefill_bootstraps = tuple(ports.bootstrap[p] for p in spec.prefill_names)
    values = WorkerValues(
        LOOPBACK, port, name, role, bootstrap, prefill_bootstraps, kv_listen, exe.python, stub_args
    )
    argv = worker_argv(worker, stub, values)
    env: tuple[tuple[str, str], ...] = ()
    if worker.kind == "vllm":
        assert exe.engine is not None, "the engine is installed before its command line"
        argv = engine_argv(exe.engine, spec.stub.model, port, role)
        # A prefill's bootstrap port is its NIXL side channel; a decode has one of its own.
        ours = (f"{LOOPBACK}:{b}" for b in prefill_bootstraps)
        routes = dict(zip(ours, kv_listen, strict=True)) if role == "decode" else {}
        env = engine_env(exe.engine, ports.bootstrap[name], routes)
    return ComponentSpec(
        name=name,
        role=role,
        argv=argv,
        ready_url=f"http://{LOOPBACK}:{port}{worker.ready_path}",
        ports=worker_ports(name, ports),
        env=env,
        foreign=worker.foreign,
    )


def worker_ports(name: str, ports: PortPlan) -> tuple[int, ...]:
    """A managed worker's listening ports: its HTTP port, and a prefill's bootstrap port."""
    return (ports.http[name], *([ports.bootstrap[name]] if name in ports.bootstrap else []))


def stub_ports(spec: TopologySpec, ports: PortPlan) -> list[int]:
    """Every port that a stub worker of ``spec`` (not a user's command) listens on."""
    names = [*spec.prefill_names, *spec.decode_names]
    stubs = [n for n in names if spec.worker(n).managed and not spec.worker(n).foreign]
    return [port for name in stubs for port in worker_ports(name, ports)]


def _router_component(
    spec: TopologySpec, ports: PortPlan, listen: dict[str, int], exe: Executables
) -> ComponentSpec | None:
    """The router's command line from its adapter or the user's template; None for ``url``."""
    kind = spec.router
    if not kind.managed:
        return None
    port, metrics = ports.http["router"], ports.router_metrics
    prefills = tuple(f"http://{LOOPBACK}:{listen[f'router->{p}']}" for p in spec.prefill_names)
    decodes = tuple(f"http://{LOOPBACK}:{listen[f'router->{d}']}" for d in spec.decode_names)
    bootstraps = tuple(ports.bootstrap[p] for p in spec.prefill_names)
    if kind.kind == "command":
        values = TemplateValues(LOOPBACK, port, metrics, prefills, decodes, bootstraps, exe.python)
        argv = [*render_template(kind.command, values), *spec.router_args]
    else:
        pairs = list(zip(prefills, bootstraps, strict=True))
        if spec.registers_workers:  # given on the command line, smg would not pull the KV
            pairs, decodes = [], ()
        executable = exe.router or exe.smg
        argv = adapter(kind.kind).argv(
            executable, LOOPBACK, port, metrics, pairs, decodes, spec.router_args
        )
    ready_path = kind.ready_path or adapter(kind.dialect).ready_path
    return ComponentSpec(
        name="router",
        role="router",
        argv=tuple(argv),
        # Readiness, not liveness: 200 only once a healthy prefill and decode are registered.
        ready_url=f"http://{LOOPBACK}:{port}{ready_path}",
        ports=(port, metrics),
    )
