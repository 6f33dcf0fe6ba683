"""The diagnosis table: each wedge, under the harness and a stray requester, is located.

The stray requester talks straight to decode-0 (incident 1): decode always shows tokens/s
from it, so a diagnosis reading aggregate throughput would call every row healthy.

Every row is located twice: by ``diagnose`` (the blind locator, scored by the oracle walk over
the ground truth, which must agree), and by the blind locator alone on a snapshot collected
without any ground truth: no stub ledger, no toxic configuration, no runtime view, no fault list.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pytest_wedge.diagnostics import Diagnosis, collect, diagnose, locate_blind
from pytest_wedge.faults import Down, Fault, Pause, StallAfterTokens, StallBeforeFirstToken, Timeout
from pytest_wedge.handle import Wedge
from pytest_wedge.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
OVERDUE_S = 1.0
ROWS: dict[str, tuple[Callable[[], Fault] | None, dict[str, object]]] = {
    "router": (lambda: Pause("router"), {}),
    "client->router": (lambda: Down(target="client->router"), {}),
    "prefill-0": (lambda: StallBeforeFirstToken(target="prefill-0"), {}),
    "decode-0->prefill-0": (lambda: Timeout(target="decode-0->prefill-0", timeout_ms=0), {}),
    # Only the harness stalls, so the stray keeps decode-0 busy: the harder case.
    "decode-0": (lambda: StallAfterTokens(target="decode-0", tokens=3, origin="harness"), {}),
    "client": (None, {"max_connections": 4, "leak_streams": True}),
}


def wedged_now(wedge: Wedge) -> bool:
    now = time.time()
    return any(
        r.overdue(OVERDUE_S, now)
        or r.held_by_client(OVERDUE_S, now)
        or r.state in ("error", "timeout", "unknown")
        for r in wedge.ledger.by_origin("harness")
    )


def start_load(wedge: Wedge, **harness: object) -> None:
    stray = wedge.stray("decode-0", rate_per_s=5)
    wait_for(lambda: stray.progress() >= 1, timeout_s=10, what="a first stray request")
    options: dict[str, object] = {
        "agents": 30,
        "rounds": 20,
        "client_timeout_s": 20,
        "think_time_s": 0.05,
    }
    wedge.harness(**(options | harness))


def start_row(wedge: Wedge, expected: str) -> None:
    make_fault, harness = ROWS[expected]
    start_load(wedge, **harness)
    if make_fault is not None:
        wedge.apply(make_fault())
    wait_for(lambda: wedged_now(wedge), timeout_s=15, what="an overdue or failed harness request")


def assert_stray_is_a_red_herring(diagnosis: Diagnosis) -> None:
    assert any("stray-1" in h and "decode-0" in h for h in diagnosis.red_herrings), (
        diagnosis.render()
    )


def assert_located(diagnosis: Diagnosis, expected: str) -> None:
    assert diagnosis.location == expected, diagnosis.render()
    assert diagnosis.confidence in ("certain", "likely"), diagnosis.render()
    assert diagnosis.decided_by, diagnosis.render()
    assert diagnosis.stuck.get(expected, {}).get("harness", 0) >= 1, diagnosis.render()
    assert_stray_is_a_red_herring(diagnosis)


@pytest.mark.parametrize("expected", list(ROWS))
def test_diagnosis_names_the_wedged_hop(wedge: Wedge, expected: str) -> None:
    start_row(wedge, expected)
    diagnosis = diagnose(wedge, origin="harness", overdue_after_s=OVERDUE_S)
    assert diagnosis.locator == "blind"
    assert_located(diagnosis, expected)
    assert not diagnosis.disagrees(), f"the oracle disagrees:\n{diagnosis.render()}"


@pytest.mark.parametrize("expected", list(ROWS))
def test_the_blind_locator_needs_no_ground_truth(wedge: Wedge, expected: str) -> None:
    start_row(wedge, expected)
    snapshot = collect(wedge.topology, wedge.ledger, truth=False)
    assert snapshot.ledgers == {} and snapshot.stub_states == {} and snapshot.components == {}
    assert all(not link.get("toxics") and "enabled" not in link for link in snapshot.links.values())
    assert snapshot.observed is not None
    assert_located(locate_blind(snapshot.observed, "harness", OVERDUE_S), expected)


def test_nothing_wrong_is_none_while_the_stray_runs(wedge: Wedge) -> None:
    # think_time keeps the two cores of CI from stretching healthy requests past 1 s.
    start_load(wedge, think_time_s=0.2)
    wait_for(
        lambda: wedge.ledger.by_origin("harness").states()["ok"] >= 30,
        timeout_s=15,
        what="30 healthy harness requests",
    )
    for _ in range(3):
        diagnosis = diagnose(wedge, origin="harness", overdue_after_s=OVERDUE_S)
        assert diagnosis.location == "none", diagnosis.render()
        assert diagnosis.healthy and not diagnosis.stuck.get("client", {}).get("harness")
    assert_stray_is_a_red_herring(diagnosis)
