"""One adapter per router kind: what differs between smg, sglang-router and vllm-router. Every
fact was measured (router-protocol.md for smg 1.13, routers.md for the others); most are shown
by tests/integration/test_router_kinds.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_wedge.errors import ConfigError


@dataclass(frozen=True)
class RouterMetrics:
    """The router's Prometheus names for one worker's in-flight count, health and breaker."""

    inflight: str
    health: str
    breaker: str | None  # None: the router has no breaker that acts in PD mode


@dataclass(frozen=True)
class RouterAdapter:
    name: str  # also its package and its console script
    version: str  # the pinned version
    metrics: RouterMetrics
    origin: str  # how a request's origin survives to the workers
    stall: str  # how a stalled stream reaches the client
    timeout: str = "a hung worker: 502 after 5 attempts (5 x N s plus back-off)"
    isolated: bool = True  # runs from its own cached venv (routers/envs.py)
    subcommand: tuple[str, ...] = ("launch",)
    pd_flag: str = "--pd-disaggregation"
    bootstrap_in_prefill_arg: bool = True  # "--prefill URL BOOTSTRAP_PORT" (else "--prefill URL")
    startup_args: tuple[str, ...] = ()
    retries: bool = True
    keepalive: bool = False
    waits_for_workers: bool = False  # the port opens only once every worker answers /health
    # Its start-up probes wait on a worker whose port listens but does not answer yet (rather
    # than failing and backing off), so it may start together with its workers.
    starts_with_workers: bool = False
    unproxied: tuple[str, ...] = ()  # traffic that does not cross a Toxiproxy link
    # ... only when the workers speak another protocol than the router's own
    unproxied_other_protocol: tuple[str, ...] = ()
    ready_path: str = "/readiness"
    # Whether its /metrics counts a request cut by --request-timeout-secs; else only its
    # clients see the cut (the stream ends without [DONE], or an error status).
    counts_timeouts: bool = False

    @property
    def package(self) -> str:
        return self.name

    @property
    def script(self) -> str:
        return self.name

    def argv(
        self,
        executable: str,
        host: str,
        port: int,
        metrics_port: int,
        prefills: Sequence[tuple[str, int]],
        decodes: Sequence[str],
        extra: Sequence[str] = (),
    ) -> list[str]:
        """The launch line: ``prefills`` are (link URL, real bootstrap port) pairs."""
        argv = [executable, *self.subcommand, "--host", host, "--port", str(port), self.pd_flag]
        argv += ["--prometheus-host", host, "--prometheus-port", str(metrics_port)]
        for url, bootstrap in prefills:
            argv += ["--prefill", url, *([str(bootstrap)] if self.bootstrap_in_prefill_arg else [])]
        for url in decodes:
            argv += ["--decode", url]
        return [*argv, *self.startup_args, *extra]


SMG = RouterAdapter(
    name="smg",
    version="1.13.0",
    metrics=RouterMetrics("smg_worker_requests_active", "smg_worker_health", "smg_worker_cb_state"),
    origin="body `user` and the `x-request-id-origin` header both reach the workers",
    stall="at --request-timeout-secs: an SSE error frame, then `data: [DONE]` (status 200)",
    isolated=False,
    keepalive=True,
    starts_with_workers=True,
    counts_timeouts=True,
    unproxied=(
        "the registration-time TCP connect from the router to each prefill's real "
        "bootstrap port (smg is given that port so it can hand it to the decodes)",
    ),
)

SGLANG_ROUTER = RouterAdapter(
    name="sglang-router",
    version="0.3.2",
    # smg_worker_requests_active stays 0 while a request hangs on a worker in this version;
    # only the connection gauge rises (routers.md A5).
    metrics=RouterMetrics(
        "smg_http_connections_active", "smg_worker_health", "smg_worker_cb_state"
    ),
    origin="only the `x-request-id-origin` header: chat and /generate bodies lose `user` "
    "and every unknown field",
    stall="at --request-timeout-secs: the chunked stream is cut without its last chunk "
    "(no error frame, no [DONE]); no SSE keep-alive, so a client idle timeout fires",
)

VLLM_ROUTER = RouterAdapter(
    name="vllm-router",
    version="0.1.17",
    metrics=RouterMetrics(
        "vllm_router_pd_active_decode_requests", "vllm_router_worker_health", None
    ),
    origin="only the body `user` on chat and completions (the origin header is dropped; "
    "/generate keeps neither)",
    stall="at --request-timeout-secs: the stream is cut without its last chunk (no error "
    "frame); no keep-alive",
    timeout="a hung worker: 500 at exactly N s (no retries; the breaker never trips)",
    subcommand=(),
    pd_flag="--vllm-pd-disaggregation",
    bootstrap_in_prefill_arg=False,
    # Worker health is polled every 30 s at start by default: 1 s keeps bring-up short.
    # round_robin: the default cache_aware policy sends /render and /tokenize to both workers
    # before every request, which is not the PD traffic under test.
    startup_args=("--worker-startup-check-interval", "1", "--policy", "round_robin"),
    retries=False,
    waits_for_workers=True,
    unproxied_other_protocol=(
        "with SGLang-protocol workers the decode does no KV fetch "
        "(vllm-router sends no bootstrap room), so the decode-j->prefill-i "
        "links carry no traffic",
    ),
)

ADAPTERS = {a.name: a for a in (SMG, SGLANG_ROUTER, VLLM_ROUTER)}


# Series that count each worker's requests in flight (vllm-router's, with its other PD-stage
# gauges, read as smg's: evidence/metric_names.py).
PER_WORKER_IN_FLIGHT = ("smg_worker_requests_active", "vllm_router_pd_active_decode_requests")


def counts_in_flight_per_worker(kind: str) -> bool:
    """Does router ``kind`` keep a per-worker in-flight count up to date (smg's gauge, or
    vllm-router's PD-stage gauges read as it)? A user's own (``command``/``url``) router is
    taken to be smg."""
    found = ADAPTERS.get(kind)
    return found is None or found.metrics.inflight in PER_WORKER_IN_FLIGHT


def counts_timeouts(kind: str) -> bool:
    """Does router ``kind`` count its request-timeout cuts? A user's own router is taken to be
    smg."""
    found = ADAPTERS.get(kind)
    return found is None or found.counts_timeouts


def starts_with_workers(kind: str) -> bool:
    """May a router of ``kind`` start while its workers start? Only a built-in kind whose
    start-up was measured so; a user's own command waits for its workers, as before."""
    found = ADAPTERS.get(kind)
    return found is not None and found.starts_with_workers


def adapter(name: str) -> RouterAdapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ConfigError(
            f"No adapter for router {name!r}",
            facts={"known": ", ".join(ADAPTERS)},
            fix="use one of the built-in router kinds",
        ) from None
