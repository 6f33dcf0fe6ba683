"""Each catalog scenario can fail: break one thing and its wedge report says what is wrong.

A scenario that cannot fail proves nothing. For each one, remove its watchdog, move its fault to
another hop, or take away what makes the wedge, and check that it fails naming the wrong or
missing location (or the watchdog that no longer clears it).
"""

from __future__ import annotations

import dataclasses

import pytest

from pytest_wedge.faults import Pause, PinOnAbort, Timeout
from pytest_wedge.scenarios.catalog import ScheduledFault, catalog
from pytest_wedge.scenarios.run import run_scenario

pytestmark = pytest.mark.timeout(90)
CATALOG = {s.name: s for s in catalog()}


def without_watchdogs(s):
    return dataclasses.replace(s, watchdogs=())


def fault_moved(s, fault):
    return dataclasses.replace(s, faults=(ScheduledFault(fault, 0.0, s.faults[0].for_s),))


MUTATIONS = {
    "stray-requester-masks-router-wedge": (
        lambda s: fault_moved(s, Pause("prefill-0")),
        "expected the wedge at router, the diagnosis says prefill-0",
    ),
    "decode-only-restart-wedges-kv-transfer": (
        without_watchdogs, "not cleared within its budget",
    ),
    "prefill-inflight-pin-after-abort": (without_watchdogs, "not cleared within its budget"),
    "abort-race-leaks-inflight": (
        lambda s: dataclasses.replace(s, faults=(ScheduledFault(PinOnAbort()),)),
        "every in-flight counter to return to 0",
    ),
    "decode-serialization-under-load": (
        lambda s: dataclasses.replace(s, faults=()),
        "expected the wedge at decode-0, the diagnosis says none",
    ),
    "client-pool-deadlock": (
        lambda s: dataclasses.replace(s, harness={**s.harness, "leak_streams": False}),
        "expected the wedge at client, the diagnosis says none",
    ),
    "half-open-decode-stream": (
        # The router flag is the watchdog; the watchdog entry only observes it.
        lambda s: dataclasses.replace(
            s, watchdogs=s.watchdogs[1:],
            spec=dataclasses.replace(s.spec, router_args=s.spec.router_args[2:]),
        ),
        "not cleared within its budget",
    ),
    "kv-transfer-blackhole": (
        lambda s: fault_moved(s, Timeout(link="router->decode-0", timeout_ms=0)),
        "expected the wedge at decode-0->prefill-0, the diagnosis says router->decode-0",
    ),
    "watchdog-watching-the-wrong-signal": (
        # Without the stray, decode's aggregate tokens/s falls to 0 and the watchdog acts.
        lambda s: dataclasses.replace(
            s, strays=(), expect=dataclasses.replace(s.expect, red_herring=None)
        ),
        "expected the watchdog NOT to clear the wedge, but it did",
    ),
}


def test_every_catalog_scenario_has_a_mutation():
    assert set(MUTATIONS) == set(CATALOG)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_broken_scenario_fails_and_says_why(name, wedge_factory):
    mutate, expected = MUTATIONS[name]
    scenario = mutate(CATALOG[name])
    wedge = wedge_factory(prefill=scenario.spec.prefill, decode=scenario.spec.decode,
                          router_args=scenario.spec.router_args, stub=scenario.spec.stub)
    with pytest.raises(AssertionError) as failure:
        run_scenario(wedge, scenario)
    assert expected in str(failure.value)
