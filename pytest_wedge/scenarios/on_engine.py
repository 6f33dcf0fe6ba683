"""A catalog scenario on real vLLM workers (the ``vllm`` kind): whether it can run there, and
the scenario as it runs there, its load scaled to what a CPU engine sustains."""

from __future__ import annotations

import dataclasses

from pytest_wedge.faults.engine import EngineFault
from pytest_wedge.scenarios.catalog import Scenario
from pytest_wedge.scenarios.per_router import for_router
from pytest_wedge.spec.topology import StubOptions
from pytest_wedge.spec.workers import WorkerSpec
from pytest_wedge.watchdogs.kubernetes import Kubelet
from pytest_wedge.watchdogs.watchdog import CallableWatchdog, StubWatchdog

VLLM = WorkerSpec(kind="vllm")
# On two loaded cores the tiny model's decode made 10-50 tokens/s in all (about one step a
# second with 30-70 requests running). The stub's loads (30 agents, strays of 10 requests/s of
# 64 tokens) would keep requests queued long after a fault ends; these keep the engines
# visibly busy, which is all a red herring needs.
AGENTS = 4
STRAY_RATE_PER_S = 0.5
STRAY_TOKENS = 4
# The client's deadline: vLLM 0.32's decode was seen keeping a request deferred after its KV
# had arrived (docs/testing-on-a-real-engine.md); such requests end as timeouts, not unfinished.
CLIENT_DEADLINE_S = 20.0
# Past rounds an agent's request carries: 16 keep it near 900 tokens, within the tiny model's
# 2048 (an agent with all its rounds passed it after about 40, and every request was then
# answered 400, thousands of failures a second that read as a wedge).
HISTORY_ROUNDS = 16
# A healthy 2-token request took up to about 2 s on two loaded cores (16 tokens 2-8 s): the
# stubs' 1 s would call healthy requests overdue, and locate whatever held them at that moment.
OVERDUE_S = 5.0
# Paths SGLang's engines serve and vLLM's do not: a probe of one fails on its 404 whatever the
# engine's state, so it tests nothing there.
SGLANG_ONLY_PATHS = ("/health_generate",)


def stub_only_parts(scenario: Scenario) -> list[str]:
    """What of ``scenario`` only our stubs can do (empty: it runs on a real engine)."""
    parts = [
        f"{type(s.fault).__name__} on {s.fault.target} is a stub engine fault"
        for s in scenario.faults
        if isinstance(s.fault, EngineFault)
    ]
    parts += [
        f"{a.watchdog.describe()} is a stub's own deadline"
        for a in scenario.watchdogs
        if isinstance(a.watchdog, StubWatchdog)
    ]
    parts += [
        f"the {p.kind} probe of {a.watchdog.check.target} asks {p.path}, which vLLM does not "
        "serve (SGLang's)"
        for a in scenario.watchdogs
        if isinstance(a.watchdog, CallableWatchdog) and isinstance(a.watchdog.check, Kubelet)
        for p in a.watchdog.check.probes
        if p.handler == "httpGet" and p.path in SGLANG_ONLY_PATHS
    ]
    return parts


def on_vllm(scenario: Scenario, router: str, *, max_tokens: int = 2) -> Scenario:
    """``scenario`` behind ``router`` (its per-router overrides applied) on real vLLM engines.
    The stub options go, but the model name and the protocol (which follows the router): they
    shape the stubs' behaviour, which the engine has its own of, and one bring-up then serves
    every scenario of the same router and shape.
    ``max_tokens`` caps each request (2 keeps a round of 4 agents within a second or two; a
    scenario about long streams needs more)."""
    on_router: Scenario = for_router(scenario, router)
    strays = tuple(
        {**stray, "rate_per_s": STRAY_RATE_PER_S, "max_tokens": STRAY_TOKENS}
        for stray in on_router.strays
    )
    agents = int(on_router.harness.get("agents", AGENTS))
    harness = {
        **on_router.harness,
        # A bounded pool, not the engine, bounds what is sent: its scenario is more agents than
        # connections (4 agents on a pool of 4 never wait for one).
        "agents": agents if on_router.harness.get("max_connections") else min(agents, AGENTS),
        "max_tokens": min(int(on_router.harness.get("max_tokens", max_tokens)), max_tokens),
        "client_timeout_s": CLIENT_DEADLINE_S,
        "history_rounds": HISTORY_ROUNDS,
    }
    rounds = int(harness.get("rounds", 1))
    # The finish budget holds every round meeting the client's deadline.
    expect = dataclasses.replace(
        on_router.expect,
        finish_within_s=rounds * CLIENT_DEADLINE_S + 10.0,
        overdue_after_s=max(on_router.expect.overdue_after_s, OVERDUE_S),
    )
    # A fault held for a time must outlast the later call of a request overdue by as much,
    # or it ends before its wedge shows (the seed's 5 s router pause would end as its
    # requests became overdue, leaving the diagnosis only the engines' slowness to see).
    later = expect.overdue_after_s - on_router.expect.overdue_after_s
    faults = tuple(
        dataclasses.replace(f, for_s=f.for_s + later) if f.for_s is not None else f
        for f in on_router.faults
    )
    spec = dataclasses.replace(
        on_router.spec,
        stub=StubOptions(model=on_router.spec.stub.model, protocol=on_router.spec.stub.protocol),
        prefill_worker=VLLM,
        decode_worker=VLLM,
    )
    return dataclasses.replace(
        on_router, spec=spec, strays=strays, harness=harness, expect=expect, faults=faults
    )
