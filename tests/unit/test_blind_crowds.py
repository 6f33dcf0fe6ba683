"""The blind locator when few requests are overdue yet and the rest of the stack is busy: the
moment right after a wedge shows, on a loaded machine. Every case is a miss the randomized
wedge bench (``bench/wedges.py``) found; the numbers are the ones its snapshots held."""

from __future__ import annotations

from test_blind_rules import NOW, in_flight, located, observed, pending, record, refused

from pytest_wedge.diagnostics import locate_blind


def test_a_decode_running_them_without_tokens_outranks_a_prefill_prefilling_a_few() -> None:
    # StallBeforeFirstToken on decode-0, one harness request overdue: prefill-0 prefills the
    # next one as usual, decode-0 holds 16 running and generates nothing.
    obs = observed(
        pending(1),
        prefill=2,
        decode=2,
        router=in_flight(prefill_0=1, decode_0=16, decode_1=3),
        workers={
            "prefill-0": {"num_running_reqs": 1.0},
            "decode-0": {"num_running_reqs": 16.0},
            "decode-1": {"num_running_reqs": 0.0},
        },
    )
    located(obs, "decode-0", "likely")


def test_a_decode_holding_them_outranks_the_routers_lagging_count_for_a_prefill() -> None:
    # The router still counts 3 in flight to prefill-0, which has answered them already.
    obs = observed(
        pending(1),
        prefill=2,
        decode=2,
        router=in_flight(prefill_0=3, decode_0=16, decode_1=3),
        workers={"decode-0": {"num_running_reqs": 16.0}, "decode-1": {"num_running_reqs": 0.0}},
    )
    located(obs, "decode-0", "likely")


def test_a_prefill_prefilling_fewer_than_a_decode_waits_for_is_not_what_holds_them() -> None:
    # A 3 s latency on decode-0->prefill-0: decode-0 waits for 11 KVs, prefill-1 (healthy,
    # on a loaded machine) prefills 9; only the transfer link to prefill-0 does not carry
    # /health.
    obs = observed(
        pending(1),
        prefill=2,
        decode=2,
        router=in_flight(prefill_0=2, prefill_1=9, decode_0=15, decode_1=7),
        workers={
            "prefill-1": {"num_running_reqs": 9.0},
            "decode-0": {"num_decode_transfer_queue_reqs": 11.0, "num_running_reqs": 2.0},
            "decode-1": {"num_decode_transfer_queue_reqs": 3.0, "num_running_reqs": 0.0},
        },
        health={"via decode-0->prefill-0": "did not answer within 0.20 s"},
    )
    located(obs, "decode-0->prefill-0", "likely")


def test_a_prefill_without_the_routers_requests_in_flight_is_not_what_holds_them() -> None:
    # StallBeforeFirstToken on decode-0 of 2P+2D while a stray keeps decode-0 generating: one
    # harness request overdue, prefill-0 prefills 2 of its own traffic with none of the
    # router's in flight to it; decode-0 holds 19 of the router's requests.
    obs = observed(
        pending(1),
        prefill=2,
        decode=2,
        router=in_flight(decode_0=19),
        workers={
            "prefill-0": {"num_running_reqs": 2.0},
            "decode-0": {"num_running_reqs": 19.0},
            "decode-1": {"num_decode_transfer_queue_reqs": 1.0},
        },
    )
    assert locate_blind(obs, "harness", 1.0).location != "prefill-0"


def test_early_in_a_prefill_stall_the_one_prefill_holding_requests_is_named() -> None:
    # StallBeforeFirstToken on prefill-1 of 2P+2D, one harness request overdue: the decodes
    # wait for KV of every request in flight (healthy ones too), more than prefill-1 holds yet;
    # no transfer link is told apart, and prefill-1 alone prefills.
    obs = observed(
        pending(1),
        prefill=2,
        decode=2,
        router=in_flight(prefill_0=1, prefill_1=7, decode_0=8, decode_1=16),
        workers={
            "prefill-0": {"num_running_reqs": 0.0},
            "prefill-1": {"num_running_reqs": 7.0},
            "decode-0": {"num_decode_transfer_queue_reqs": 8.0, "num_running_reqs": 0.0},
            "decode-1": {"num_decode_transfer_queue_reqs": 16.0, "num_running_reqs": 0.0},
        },
    )
    located(obs, "prefill-1", "likely")


def test_kv_of_requests_a_prefill_answered_straight_away_is_not_what_a_decode_waits_for() -> None:
    # A stray sends straight to prefill-0, which answers each at once and keeps its KV; none
    # is pending. decode-1 waits for 17 KVs: prefill-0's 13 ready are the stray's, not theirs.
    answered = [
        record(300 + i, origin="stray-1", target="prefill-0", age=1.0, state="ok", finished=NOW)
        for i in range(13)
    ]
    obs = observed(
        [*pending(4), *answered],
        prefill=2,
        decode=2,
        router=in_flight(prefill_0=22, prefill_1=6, decode_0=11, decode_1=18),
        workers={
            "prefill-0": {"num_prefill_inflight_queue_reqs": 13.0},
            "prefill-1": {"num_running_reqs": 5.0},
            "decode-0": {"num_decode_transfer_queue_reqs": 6.0},
            "decode-1": {"num_decode_transfer_queue_reqs": 17.0, "num_running_reqs": 1.0},
        },
    )
    found = locate_blind(obs, "harness", 1.0)
    assert not (found.location == "decode-1->prefill-0" and found.confidence == "certain"), (
        found.render()
    )


def test_kv_ready_for_requests_sent_straight_to_a_prefill_names_no_transfer() -> None:
    # A stray sends straight to prefill-1: no decode will ever fetch those KVs. decode-1
    # waits for 12 KVs and nothing says from which prefill.
    direct = [record(300 + i, origin="stray-2", target="prefill-1", age=0.5) for i in range(8)]
    obs = observed(
        [*pending(12), *direct],
        prefill=2,
        decode=2,
        router=in_flight(decode_1=12),
        workers={
            "prefill-1": {"num_prefill_inflight_queue_reqs": 8.0},
            "decode-1": {"num_decode_transfer_queue_reqs": 12.0},
        },
    )
    diagnosis = located(obs, "decode-1->prefill-0")
    assert diagnosis.confidence != "certain", diagnosis.render()


def test_streams_trickling_past_the_decodes_are_between_the_router_and_the_client() -> None:
    # 21 streams trickle to the client while the router has 7 in flight to any decode: most
    # are done at the workers. decode-1 answers nothing within 0.2 s on a loaded machine.
    slow = pending(21, first_byte=NOW - 1.5, first_token=NOW - 1.5, last_byte=NOW - 0.05, tokens=3)
    obs = observed(
        slow,
        prefill=2,
        decode=2,
        router=in_flight(decode_1=7),
        health={"decode-1": "did not answer within 0.20 s (ReadTimeout)"},
    )
    located(obs, "client->router", "likely")


def test_the_side_whose_partner_counted_the_aborts_opened_the_breakers() -> None:
    # smg counts each failed PD request against both workers; decode-0's legs were cancelled
    # (it counted the aborts), so prefill-0 failed them.
    errors = [
        {"worker_type": "prefill", "error_type": "backend_error", "value": 12.0},
        {"worker_type": "decode", "error_type": "backend_error", "value": 12.0},
    ]
    obs = observed(
        refused(5),
        router={
            "cb_state": {"prefill-0": 1.0, "decode-0": 1.0},
            "cb_failed": {"prefill-0": 12.0, "decode-0": 12.0},
            "errors": errors,
        },
        router_before={"errors": []},
        workers={"decode-0": {"num_aborted_requests": 12.0}},
        workers_window={
            "prefill-0": {"num_aborted_requests": 0.0},
            "decode-0": {"num_aborted_requests": 0.0},
        },
    )
    diagnosis = located(obs, "prefill-0", "likely")
    assert any("aborts" in line for line in diagnosis.decided_by), diagnosis.render()


def test_after_a_decode_restart_bytes_lost_on_one_transfer_link_are_no_certainty() -> None:
    # decode-1 restarted alone: its old connections to both prefills closed, one of them with
    # bytes still in it. The requests it now waits for may be held on either transfer link.
    obs = observed(
        pending(12),
        prefill=2,
        decode=2,
        router=in_flight(decode_1=12),
        workers={"decode-1": {"num_decode_transfer_queue_reqs": 12.0}},
        traffic={"decode-1->prefill-1": {"downstream_in": 9000.0, "downstream_out": 300.0}},
        traffic_before={"decode-1->prefill-1": {"downstream_in": 100.0, "downstream_out": 100.0}},
        started={"decode-1": NOW - 0.8},
    )
    diagnosis = located(obs, "decode-1->prefill-1", "likely")
    assert any("started anew" in line for line in diagnosis.decided_by), diagnosis.render()


def test_of_two_decodes_waiting_for_kv_the_one_waiting_for_all_it_was_sent_is_stuck() -> None:
    # decode-0 restarted: all 8 of its requests wait for their KV. decode-1 is busy and waits
    # for 10 of its 19 passing through while it runs the rest.
    obs = observed(
        pending(8),
        prefill=2,
        decode=2,
        router=in_flight(prefill_0=4, prefill_1=4, decode_0=8, decode_1=19),
        workers={
            "prefill-0": {"num_prefill_inflight_queue_reqs": 4.0},
            "prefill-1": {"num_prefill_inflight_queue_reqs": 4.0},
            "decode-0": {"num_decode_transfer_queue_reqs": 8.0, "num_running_reqs": 0.0},
            "decode-1": {"num_decode_transfer_queue_reqs": 10.0, "num_running_reqs": 7.0},
        },
    )
    diagnosis = locate_blind(obs, "harness", 1.0)
    assert diagnosis.location.startswith("decode-0->"), diagnosis.render()


def test_a_refused_bootstrap_names_the_prefill_whose_legs_were_cancelled() -> None:
    # 2P+2D: smg counted the failures against the decodes only; prefill-1 counted the aborts
    # of the legs it cancelled, prefill-0 none.
    body = (
        'HTTP 502: data: {"error":{"message":"bootstrap failed: prefill answered 503",'
        '"type":"InternalServerError"}}'
    )
    failed = pending(
        5, state="error", status=502, finished=NOW - 0.1, first_byte=NOW - 0.2, error=body
    )
    obs = observed(
        failed,
        prefill=2,
        decode=2,
        router=in_flight(decode_1=20),
        workers={
            "decode-1": {"num_bootstrap_failed_reqs": 27.0},
            "prefill-1": {"num_aborted_requests": 51.0},
        },
        workers_window={
            "decode-1": {"num_bootstrap_failed_reqs": 0.0},
            "prefill-0": {"num_aborted_requests": 0.0},
            "prefill-1": {"num_aborted_requests": 0.0},
        },
    )
    diagnosis = located(obs, "prefill-1", "likely")
    assert any("aborted" in line for line in diagnosis.decided_by), diagnosis.render()


def test_one_request_passing_through_a_decode_is_not_the_transfer_that_holds_them() -> None:
    # A 3 s latency on decode-0->prefill-1: decode-0 waits for 11 of its 18; decode-1 waits
    # for the one request it was sent, passing through.
    obs = observed(
        pending(1),
        prefill=2,
        decode=2,
        router=in_flight(decode_0=18, decode_1=1),
        workers={
            "decode-0": {"num_decode_transfer_queue_reqs": 11.0, "num_running_reqs": 0.0},
            "decode-1": {"num_decode_transfer_queue_reqs": 1.0, "num_running_reqs": 0.0},
        },
        health={"via decode-0->prefill-1": "did not answer within 0.20 s"},
    )
    located(obs, "decode-0->prefill-1", "likely")


def test_a_decode_slow_to_answer_health_does_not_outrank_the_prefill_holding_them() -> None:
    # StallBeforeFirstToken on prefill-0; on a loaded machine decode-0's /health took longer
    # than 0.2 s to answer.
    obs = observed(
        pending(30),
        router=in_flight(prefill_0=30, decode_0=30),
        workers={
            "prefill-0": {"num_running_reqs": 30.0},
            "decode-0": {"num_decode_transfer_queue_reqs": 30.0},
        },
        health={"decode-0": "did not answer within 0.20 s (ReadTimeout)"},
    )
    located(obs, "prefill-0", "certain")


def test_a_prefill_that_answers_nothing_holds_the_kv_a_decode_waits_for() -> None:
    # Every endpoint of prefill-0 timed out, so its gauges read as zeros and prove nothing.
    silent = "did not answer within 0.20 s (ReadTimeout)"
    obs = observed(
        pending(2),
        router=in_flight(prefill_0=34, decode_0=30),
        workers={"decode-0": {"num_decode_transfer_queue_reqs": 30.0}},
        health={
            "prefill-0": silent,
            "prefill-0 bootstrap": silent,
            "via decode-0->prefill-0": silent,
        },
    )
    obs.workers.pop("prefill-0")
    located(obs, "prefill-0", "likely")


def test_kv_ready_on_one_prefill_is_no_certainty_while_the_other_link_fails_its_probe() -> None:
    # A timeout toxic on decode-1->prefill-0; prefill-1 has the 2 KVs decode-1 waits for in
    # passing. Which transfer holds them is not certain.
    obs = observed(
        pending(1),
        prefill=2,
        decode=2,
        router=in_flight(prefill_1=4, decode_1=4),
        workers={
            "prefill-1": {"num_prefill_inflight_queue_reqs": 2.0},
            "decode-1": {"num_decode_transfer_queue_reqs": 2.0, "num_running_reqs": 0.0},
        },
        health={"via decode-1->prefill-0": "did not answer within 0.20 s"},
    )
    obs.health_s["prefill-0 bootstrap"] = 0.3  # answered, but not briskly: the timeout says little
    diagnosis = locate_blind(obs, "harness", 1.0)
    assert diagnosis.confidence != "certain", diagnosis.render()
    assert not any(r.startswith("decode-1->prefill-0:") for r in diagnosis.ruled_out)


def test_a_prefill_that_restarted_in_the_window_lost_the_kv_a_decode_waits_for() -> None:
    # prefill-0 restarted alone: the KV of the requests its old process had is gone, while
    # its new process has KV ready for newer ones.
    obs = observed(
        pending(1),
        router=in_flight(prefill_0=13, decode_0=28),
        workers={
            "prefill-0": {"num_prefill_inflight_queue_reqs": 11.0},
            "decode-0": {
                "num_decode_transfer_queue_reqs": 6.0,
                "num_running_reqs": 21.0,
                "generation_tokens": 800.0,
            },
        },
        workers_before={"decode-0": {"generation_tokens": 0.0}},
        started={"prefill-0": NOW - 0.9},
    )
    located(obs, "prefill-0", "likely")


def test_failed_transfers_name_the_link_to_the_one_prefill_that_counted_aborts() -> None:
    # A limit_data toxic on decode-1->prefill-1 cuts its transfers; the router counted nothing
    # against a prefill, but prefill-1 alone had legs cancelled.
    body = 'HTTP 500: {"error":{"code":"decode_internal_error","message":"KV transfer failed"}}'
    failed = pending(
        5, state="error", status=500, finished=NOW - 0.1, first_byte=NOW - 0.2, error=body
    )
    obs = observed(
        failed,
        prefill=2,
        decode=2,
        router=in_flight(decode_1=20),
        workers={
            "decode-1": {"num_transfer_failed_reqs": 18.0},
            "prefill-1": {"num_aborted_requests": 2.0},
        },
        workers_window={
            "decode-1": {"num_transfer_failed_reqs": 0.0},
            "prefill-0": {"num_aborted_requests": 0.0},
            "prefill-1": {"num_aborted_requests": 0.0},
        },
    )
    located(obs, "decode-1->prefill-1", "likely")
