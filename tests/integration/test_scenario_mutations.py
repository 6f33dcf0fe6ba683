"""Each catalog scenario can fail: break one thing and its wedge report says what is wrong.

A scenario that cannot fail proves nothing. For each one, remove its watchdog, move its fault to
another hop, or take away what makes the wedge, and check that it fails naming the wrong or
missing location (or the watchdog that no longer clears it).
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_wedge.faults import ErrorStatus, Kill, Pause, PinOnAbort, Timeout
from pytest_wedge.load.client_ledger import LostRequestsError
from pytest_wedge.scenarios.catalog import ScheduledFault, catalog
from pytest_wedge.scenarios.runner import ScenarioFailed, run_scenario
from pytest_wedge.waiting import WaitTimeout
from pytest_wedge.watchdogs import NoProgressWatchdog

pytestmark = pytest.mark.timeout(90)
CATALOG = {s.name: s for s in catalog()}


def without_watchdogs(s):
    return dataclasses.replace(s, watchdogs=())


def fault_moved(s, fault):
    return dataclasses.replace(s, faults=(ScheduledFault(fault, 0.0, s.faults[0].for_s),))


def without_faults(s):
    return dataclasses.replace(s, faults=())


def router_args(s, *args):
    return dataclasses.replace(s, spec=dataclasses.replace(s.spec, router_args=args))


def bootstrap_deadline(s, setting, **expect):
    """The scenario's one stub watchdog on another setting (from arrival / without progress)."""
    armed = s.watchdogs[0]
    dog = dataclasses.replace(armed.watchdog, setting=setting)
    return dataclasses.replace(
        s,
        watchdogs=(dataclasses.replace(armed, watchdog=dog),),
        expect=dataclasses.replace(s.expect, **expect),
    )


# name -> (mutation, what the run raises, its headline after "Scenario <name>: ").
MUTATIONS = {
    "stray-requester-masks-router-wedge": (
        lambda s: fault_moved(s, Pause("prefill-0")),
        ScenarioFailed,
        "expected the wedge at router, the diagnosis says prefill-0",
    ),
    "decode-only-restart-wedges-kv-transfer": (
        without_watchdogs,
        ScenarioFailed,
        "the wedge was not cleared within its budget",
    ),
    "prefill-inflight-pin-after-abort": (
        without_watchdogs,
        ScenarioFailed,
        "the wedge was not cleared within its budget",
    ),
    "abort-race-leaks-inflight": (
        # The settle check is a plain wait: its timeout names what it waited for.
        lambda s: dataclasses.replace(s, faults=(ScheduledFault(PinOnAbort()),)),
        WaitTimeout,
        "every in-flight counter to return to 0",
    ),
    "decode-serialization-under-load": (
        lambda s: dataclasses.replace(s, faults=()),
        ScenarioFailed,
        "expected the wedge at decode-0, the diagnosis says none",
    ),
    "client-pool-deadlock": (
        lambda s: dataclasses.replace(s, harness={**s.harness, "leak_streams": False}),
        ScenarioFailed,
        "expected the wedge at client, the diagnosis says none",
    ),
    "half-open-decode-stream": (
        # The router flag is the watchdog; the watchdog entry only observes it.
        lambda s: dataclasses.replace(
            s,
            watchdogs=s.watchdogs[1:],
            spec=dataclasses.replace(s.spec, router_args=s.spec.router_args[2:]),
        ),
        ScenarioFailed,
        "the wedge was not cleared within its budget",
    ),
    "kv-transfer-blackhole": (
        lambda s: fault_moved(s, Timeout("router->decode-0", timeout_ms=0)),
        ScenarioFailed,
        "expected the wedge at decode-0->prefill-0, the diagnosis says router->decode-0",
    ),
    "watchdog-watching-the-wrong-signal": (
        # Without the stray, decode's aggregate tokens/s falls to 0 and the watchdog acts.
        lambda s: dataclasses.replace(
            s, strays=(), expect=dataclasses.replace(s.expect, red_herring=None)
        ),
        ScenarioFailed,
        "expected the watchdog NOT to clear the wedge, but it did",
    ),
    "request-timeout-cuts-healthy-long-streams": (
        # Streams shorter than the cap: the false positive this scenario shows disappears.
        lambda s: dataclasses.replace(s, harness={**s.harness, "max_tokens": 8}),
        ScenarioFailed,
        "expected a false positive on healthy work; the watchdogs left it alone",
    ),
    "no-progress-watchdog-spares-healthy-streams": (
        # An idle limit below the inter-token gap: now healthy streams look stalled.
        lambda s: dataclasses.replace(
            s,
            watchdogs=(
                dataclasses.replace(
                    s.watchdogs[0], watchdog=NoProgressWatchdog(idle_s=0.03, interval_s=0.01)
                ),
            ),
        ),
        ScenarioFailed,
        "the watchdogs did not leave healthy work alone",
    ),
    # The field incidents (comment blocks cite their sources).
    "replayed-prefill-error-executes-twice": (
        # The same 500, sent at arrival: no decode ran the first attempt, so the replay is safe.
        lambda s: fault_moved(s, ErrorStatus("prefill-0", origin="harness", first_n=4)),
        ScenarioFailed,
        "expected a harness request executed more than once (executed_once = false); every "
        "request id was executed by at most one attempt",
    ),
    "bootstrap-deadline-fails-queued-rooms": (
        # The fix of smg pull request #2463: the deadline measured without progress.
        lambda s: bootstrap_deadline(s, "bootstrap_no_progress_s"),
        ScenarioFailed,
        "expected a false positive on healthy work; the watchdogs left it alone",
    ),
    "bootstrap-no-progress-deadline-spares-drain": (
        # Back to the deadline from arrival: the drain's tail is failed while queued.
        lambda s: bootstrap_deadline(s, "bootstrap_timeout_s", quiet_within_s=4.0),
        ScenarioFailed,
        "the watchdogs did not leave healthy work alone",
    ),
    "unbootstrapped-requests-inflate-ttft": (
        # Low concurrency: the decode's KV memory keeps up, nothing waits unbootstrapped.
        lambda s: dataclasses.replace(s, harness={**s.harness, "agents": 4}),
        ScenarioFailed,
        "expected the wedge at decode-0, the diagnosis says none",
    ),
    "decode-never-leaves-bootstrapping": (
        without_faults,
        ScenarioFailed,
        "expected the wedge at decode-0, the diagnosis says none",
    ),
    "health-200-while-kv-transfer-hangs": (
        without_faults,
        ScenarioFailed,
        "expected the wedge at decode-0->prefill-0, the diagnosis says none",
    ),
    "bootstrap-blackhole-freezes-decode-loop": (
        # The fix of sglang pull request #34865: the call off the scheduler loop. Only the
        # black-holed prefill's requests hang now, on their KV transfer.
        lambda s: dataclasses.replace(s, faults=s.faults[1:]),
        ScenarioFailed,
        "expected the wedge at decode-0, the diagnosis says decode-0->prefill-1",
    ),
    "transferring-request-never-times-out": (
        # The fix of sglang pull request #31800: the timeout armed in Transferring too. It
        # fires; the transfer still never ends, so nothing recovers within the budget.
        lambda s: dataclasses.replace(s, faults=s.faults[:1]),
        ScenarioFailed,
        "expected decode-0 transfer-timeout watchdog 0.5s not to fire",
    ),
    "decode-rejection-strands-prefill-kv": (
        # Without the KV expiry, the stranded blocks stay (480 s by vLLM's default).
        without_watchdogs,
        ScenarioFailed,
        "the wedge was not cleared within its budget",
    ),
    # Watchdogs as a detector plus an action, and the kubelet's probes.
    "no-progress-restart-clears-a-stalled-decode": (
        without_watchdogs,
        ScenarioFailed,
        "the wedge was not cleared within its budget",
    ),
    "liveness-on-health-never-fires-while-decode-is-wedged": (
        without_faults,
        ScenarioFailed,
        "expected the wedge at decode-0, the diagnosis says none",
    ),
    # A whole-worker Pause: /health stops answering too, and the liveness probe fires.
    "engine-core-stopped-health-200": (
        lambda s: fault_moved(s, Pause("decode-0")),
        ScenarioFailed,
        "expected kubelet probes of decode-0: liveness GET /health every 1 s (timeout 1 s, 2 "
        "failures) -> restart decode-0 (readiness: out of the router's rotation) not to fire",
    ),
    # The routers' default health check (every 60 s, 3 failures) does not notice in time.
    "router-health-check-removes-a-paused-decode-not-its-requests": (
        lambda s: dataclasses.replace(s, spec=dataclasses.replace(s.spec, router_args=())),
        ScenarioFailed,
        "expected router health check of decode-0 -> the router takes decode-0 out of "
        "rotation to fire",
    ),
    # SIGKILL at the same moment resets the streams a SIGTERM let drain.
    "sigterm-drains-in-flight-streams-where-kill-cuts-them": (
        lambda s: dataclasses.replace(s, faults=(ScheduledFault(Kill("decode-0"), 1.0),)),
        ScenarioFailed,
        "expected the wedge at none, the diagnosis says decode-0",
    ),
    "liveness-on-health-generate-kills-a-healthy-decode": (
        without_watchdogs,
        ScenarioFailed,
        "expected a false positive on healthy work; the watchdogs left it alone",
    ),
    # Router-side field incidents.
    "stale-pooled-keepalive-connection": (
        # The pool keeps idle connections forever (smg's 0, the 50 s pool before the fix).
        lambda s: router_args(s, "--upstream-pool-idle-timeout-secs", "0", "--disable-retries"),
        ScenarioFailed,
        (
            "expected the wedge at none, the diagnosis says router->decode-0",
            "expected the wedge at none, the diagnosis says router->prefill-0",
        ),
    ),
    "client-errors-open-the-circuit-breaker": (
        # The same requests answered 500: server errors the breakers count.
        lambda s: dataclasses.replace(
            s,
            faults=tuple(
                dataclasses.replace(f, fault=dataclasses.replace(f.fault, status=500))
                for f in s.faults
            ),
        ),
        ScenarioFailed,
        # The breakers open on the stray's 500s: the harness's 503s are the router's, unless
        # the snapshot comes first, while the router still counts failures against prefill-0.
        (
            "expected the wedge at none, the diagnosis says router",
            "expected the wedge at none, the diagnosis says prefill-0",
        ),
    ),
    "decode-transport-error-orphans-prefill": (
        # The decode link swallows instead of resetting: requests wait on both legs.
        lambda s: fault_moved(s, Timeout("router->decode-0", stream="upstream", timeout_ms=0)),
        LostRequestsError,
        "4 harness requests have no final state",
    ),
    "kv-load-deadline-charged-prefill-queue-time": (
        # A KV-load deadline longer than the whole healthy run (quiet_within_s = 15): no
        # healthy request reaches it however slow the machine (8 s did, on two loaded cores).
        lambda s: dataclasses.replace(
            s,
            watchdogs=(
                dataclasses.replace(
                    s.watchdogs[0],
                    watchdog=dataclasses.replace(s.watchdogs[0].watchdog, after_s=60.0),
                ),
            ),
        ),
        ScenarioFailed,
        "expected a false positive on healthy work; the watchdogs left it alone",
    ),
}


def test_every_catalog_scenario_has_a_mutation():
    assert set(MUTATIONS) == set(CATALOG)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_broken_scenario_fails_and_says_why(name, wedge_factory):
    mutate, error, expected = MUTATIONS[name]
    scenario = mutate(CATALOG[name])
    wedge = wedge_factory(
        prefill=scenario.spec.prefill,
        decode=scenario.spec.decode,
        router_args=scenario.spec.router_args,
        stub=scenario.spec.stub,
    )
    with pytest.raises(error) as failure:
        run_scenario(wedge, scenario)
    if error is ScenarioFailed:
        # A tuple: any of these (a failure that may show at either of two hops).
        accepted = {
            f"Scenario {name}: {e}"
            for e in (expected if isinstance(expected, tuple) else (expected,))
        }
        assert failure.value.headline in accepted, str(failure.value)
    else:
        assert expected in getattr(failure.value, "headline", str(failure.value)), str(
            failure.value
        )
