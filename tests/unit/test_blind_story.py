"""One story per wedge, and certainty earned: the blind locator tells the same story while a
wedge's requests are pending and after they failed; its verdict never names a hop its own report
rules out; a black hole on the front link is located there; ``certain`` waits until the requests
have waited longer than a request needs to reach its hop at this load; and evidence never prints
a gauge the worker does not export."""

from __future__ import annotations

from fnmatch import fnmatch
from typing import Any

import pytest
from test_blind_rules import ADDRESS, NOW, in_flight, located, observed, pending, record

from pytest_wedge.diagnostics import Diagnosis
from pytest_wedge.evidence.observed import Observed


def answered(n: int, head_s: float) -> list[dict[str, Any]]:
    """Requests through the router answered lately, each after ``head_s`` to its head."""
    return [
        record(
            300 + i,
            age=3.0,
            state="ok",
            first_byte=NOW - 3.0 + head_s,
            first_token=NOW - 3.0 + head_s,
            last_byte=NOW - 2.9 + head_s,
            finished=NOW - 2.9 + head_s,
            tokens=16,
        )
        for i in range(n)
    ]


def prefill_holds(client: list[dict[str, Any]], **extra: Any) -> Observed:
    """prefill-0 holds 30 prefilling in both samples; decode-0 waits for their KV."""
    return observed(
        client,
        router=in_flight(prefill_0=30, decode_0=30),
        workers={
            "prefill-0": {"num_running_reqs": 30.0},
            "decode-0": {"num_decode_transfer_queue_reqs": 30.0},
        },
        **extra,
    )


def consistent(diagnosis: Diagnosis) -> Diagnosis:
    named = [r for r in diagnosis.ruled_out if fnmatch(diagnosis.location, r.split(": ", 1)[0])]
    assert not named, diagnosis.render()
    return diagnosis


# -- certainty earned --------------------------------------------------------------------------


def test_certain_once_they_waited_longer_than_a_request_needs_at_this_load() -> None:
    located(prefill_holds([*pending(age=2.0), *answered(10, head_s=0.1)]), "prefill-0", "certain")


def test_under_heavy_load_the_same_evidence_is_only_likely() -> None:
    # Healthy requests needed 1.5 s to their head: 2 s pending proves nothing yet.
    obs = prefill_holds([*pending(age=2.0), *answered(10, head_s=1.5)])
    diagnosis = located(obs, "prefill-0", "likely")
    assert any(line.startswith("not certain yet") for line in diagnosis.decided_by)


def test_without_any_answer_to_measure_on_the_overdue_clock_stands_in() -> None:
    # Nothing answered to measure on: three quarters of the overdue clock is the reach, and
    # requests pending 0.4 s are certain only once that is under 0.2 s.
    from pytest_wedge.diagnostics import locate_blind

    obs = prefill_holds(pending(age=0.4))
    assert locate_blind(obs, "harness", 0.25).confidence == "certain"
    assert locate_blind(obs, "harness", 0.3).confidence == "likely"


# -- one story: pending and failed -------------------------------------------------------------


def transport_to_prefill() -> str:
    return (
        'HTTP 502: {"error":{"code":"PD disaggregation request failed","message":"Transport '
        "error: error sending request for url (" + ADDRESS["router->prefill-0"] + '/v1/chat)"}}'
    )


@pytest.mark.parametrize("state", ["pending", "router gave up", "decode gave up"])
def test_a_stalled_prefill_is_the_prefill_pending_and_failed(state: str) -> None:
    if state == "pending":
        located(prefill_holds(pending()), "prefill-0")
        return
    if state == "router gave up":  # smg's request timeout: a transport error naming the link
        failed = pending(
            state="error", status=502, finished=NOW - 0.1, error=transport_to_prefill()
        )
        obs = prefill_holds(failed)
    else:  # the decode's KV fetch timed out waiting, and the router relayed its error
        body = 'HTTP 500: {"error":{"code":"decode_internal_error","message":"x"}}'
        failed = pending(state="error", status=500, finished=NOW - 0.1, error=body)
        obs = prefill_holds(
            failed,
            workers_before={"decode-0": {"num_bootstrap_failed_reqs": 0.0}},
        )
        obs.workers["decode-0"]["num_bootstrap_failed_reqs"] = 30.0
        obs.workers_window = {w: dict(v) for w, v in obs.workers_before.items()}
    consistent(located(obs, "prefill-0"))


def test_a_transport_error_to_a_prefill_that_holds_nothing_is_still_the_link() -> None:
    failed = pending(state="error", status=502, finished=NOW - 0.1, error=transport_to_prefill())
    located(observed(failed), "router->prefill-0", "certain")


# -- the front link ----------------------------------------------------------------------------

BLACK_HOLE = {"via client->router": "did not answer within 0.20 s (ReadTimeout)"}


@pytest.mark.parametrize("counts", [True, False], ids=["smg", "no in-flight count"])
def test_a_black_hole_on_the_front_link_is_located_there(counts: bool) -> None:
    obs = observed(pending(), health=BLACK_HOLE, router_in_flight_known=counts)
    obs.health_s["router"] = 0.4  # a loaded router answers slowly, but answers
    consistent(located(obs, "client->router"))


# -- never a ruled-out hop, never an absent gauge ----------------------------------------------


def gaugeless_decode() -> Observed:
    """A user's own decode: /health answers, /generate never does, and /metrics is absent."""
    obs = observed(pending(), router=in_flight(prefill_0=0, decode_0=30))
    del obs.workers["decode-0"], obs.workers_before["decode-0"]
    obs.unanswered["decode-0 metrics"] = "answered 404"
    return obs


def test_a_worker_without_gauges_is_named_and_no_gauge_is_printed_for_it() -> None:
    diagnosis = consistent(located(gaugeless_decode(), "decode-0", "likely"))
    lines = [*diagnosis.evidence, *diagnosis.decided_by]
    assert "decode-0: exports no engine gauges; router in flight 30, 1 sent to it directly" in lines
    assert not [line for line in lines if line.startswith("decode-0:") and "running" in line]


def test_a_worker_whose_metrics_time_out_says_so() -> None:
    obs = gaugeless_decode()
    obs.unanswered["decode-0 metrics"] = "did not answer within 0.20 s (ReadTimeout)"
    diagnosis = located(obs, "decode-0")
    assert any("its /metrics did not answer within 0.20 s" in line for line in diagnosis.evidence)


@pytest.mark.parametrize(
    "obs",
    [
        prefill_holds(pending()),
        gaugeless_decode(),
        observed(pending(), router=in_flight(decode_0=30)),
        observed(pending(), router={"admission_inflight": 30.0}),
        observed(
            pending(),
            router=in_flight(prefill_0=30, decode_0=30),
            workers={
                "prefill-0": {"num_prefill_inflight_queue_reqs": 30.0},
                "decode-0": {"num_decode_transfer_queue_reqs": 30.0},
            },
        ),
    ],
    ids=["prefill", "gaugeless decode", "router->decode", "router", "transfer"],
)
def test_the_verdict_never_names_a_hop_it_rules_out(obs: Observed) -> None:
    from pytest_wedge.diagnostics import locate_blind

    consistent(locate_blind(obs, "harness", 1.0))


# -- counters that cover the episode -----------------------------------------------------------


def test_open_breakers_seen_over_a_window_that_began_late_are_not_certain() -> None:
    # No probe sample from before the episode: the router's counters were read twice, 0.15 s
    # apart, long after the first refusal. "Nothing failed in the window" then proves nothing.
    from test_blind_rules import refused

    obs = observed(refused(), router={"cb_state": {"prefill-0": 1.0, "decode-0": 1.0}})
    located(obs, "router", "certain")
    obs.traffic_before_at = NOW - 0.15
    diagnosis = located(obs, "router", "likely")
    assert any("compared from a sample taken" in line for line in diagnosis.decided_by)


def test_a_stray_answered_at_once_by_a_prefill_is_a_red_herring() -> None:
    # A prefill answers a direct request at once with a token or none: no rate, none in flight.
    answered_now = [
        record(
            700 + i,
            origin="stray-1",
            target="prefill-0",
            age=0.6,
            state="ok",
            first_byte=NOW - 0.55,
            finished=NOW - 0.5,
            tokens=1,
        )
        for i in range(3)
    ]
    obs = observed([*pending(), *answered_now], processes={"router": "stopped"})
    herrings = located(obs, "router").red_herrings
    assert any("stray-1 sending straight to prefill-0" in h for h in herrings), herrings
    assert any("3 answered in the last 3 s" in h for h in herrings), herrings


def test_a_worker_whose_metrics_this_process_could_not_ask_says_so() -> None:
    obs = gaugeless_decode()
    why = "could not be asked: this process failed first (EMFILE: Too many open files)"
    obs.unanswered["decode-0 metrics"] = why
    diagnosis = located(obs, "decode-0")
    assert any(f"its /metrics {why}" in line for line in diagnosis.evidence)


NO_DESCRIPTORS = "could not be asked: this process failed first (EMFILE: Too many open files)"


def not_asked(obs: Observed, *keys: str) -> Observed:
    """``keys`` were fetches this process could not make: no health evidence, a line each."""
    for key in keys:
        obs.health.pop(key.removesuffix(" health"), None)
        obs.unanswered[key] = NO_DESCRIPTORS
    return obs


def test_a_worker_this_process_could_not_ask_is_not_blamed() -> None:
    obs = not_asked(prefill_holds(pending()), "decode-0 health")
    diagnosis = consistent(located(obs, "prefill-0"))
    assert f"decode-0 health {NO_DESCRIPTORS}" in diagnosis.evidence, diagnosis.render()


def test_a_router_this_process_could_not_ask_is_read_as_keeping_no_count() -> None:
    # Counts not read are no zeros, whoever failed: the workers' own gauges say who holds them.
    obs = not_asked(prefill_holds(pending()), "router health", "router metrics")
    obs.router, obs.router_in_flight_known = {}, False
    diagnosis = consistent(located(obs, "prefill-0"))
    assert f"router metrics: {NO_DESCRIPTORS}" in diagnosis.evidence, diagnosis.render()
    assert not [line for line in diagnosis.ruled_out if "/metrics on its own" in line]


def test_a_router_whose_metrics_did_not_answer_is_read_as_keeping_no_count() -> None:
    # Unread counts are no zeros: the workers' own gauges say who holds the requests.
    obs = prefill_holds(pending(), router_in_flight_known=False)
    obs.router = {}
    obs.unanswered["router metrics"] = "did not answer within 0.20 s (ReadTimeout)"
    diagnosis = consistent(located(obs, "prefill-0"))
    assert not [line for line in diagnosis.ruled_out if "/metrics on its own" in line]
