"""The overdue clock starts when a request is handed to the network, not when it is created.

On a loaded machine a request can wait in the client for longer than any ``overdue_after_s``
before a server could see it; that wait must never make it overdue. A request not sent yet is
its own phase, held by the client only when its pool's connections were all in use. Both
clients (aiohttp, the loads' default, and httpx, kept for incident 6) stamp ``sent`` at the
write, and the scenario run waits on this clock before it locates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import httpx
import pytest
from aiohttp import web

from pytest_wedge.load import (
    ClientLedger,
    Harness,
    PoolGauge,
    RequestRecord,
    StrayRequester,
    new_aiohttp_session,
    new_httpx_client,
    send_chat,
    summary_table,
)
from pytest_wedge.scenarios.catalog import catalog
from pytest_wedge.scenarios.runner import ScenarioFailed, ScenarioResult, _await_showing, showing

NOW = 1_000_000.0


def _server_module() -> ModuleType:
    name = "_wedge_load_test_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_load_server.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


ChatServer: Any = _server_module().ChatServer
wait_until: Any = _server_module().wait_until


class ArrivalServer(ChatServer):  # type: ignore[misc]
    """The test chat server, noting when each request reached its handler (wall clock)."""

    def __init__(self, mode: str = "ok") -> None:
        super().__init__(mode)
        self.arrived: dict[str, float] = {}

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.arrived[request.headers["X-Request-ID"]] = time.time()
        response: web.StreamResponse = await super()._chat(request)
        return response


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with ArrivalServer() as running:
        yield running


def _record(rid: str = "r", **facts: Any) -> RequestRecord:
    return RequestRecord(request_id=rid, origin="harness", target="http://127.0.0.1:1", **facts)


# -- the record's clock -------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_time_in_the_client_is_not_on_the_overdue_clock() -> None:
    record = _record(created=NOW - 5.0)
    assert record.age(NOW) == 0.0 and record.waited(NOW) == 5.0
    assert not record.overdue(0.3, NOW) and record.not_sent_yet
    assert record.phase(0.3, NOW) == "not_sent_yet"
    record.sent = NOW - 0.2  # it left the client after 4.8 s in it
    assert record.age(NOW) == pytest.approx(0.2) and not record.overdue(0.3, NOW)
    assert record.phase(0.3, NOW) == "in_flight"
    assert record.overdue(0.3, NOW + 0.2) and record.phase(0.3, NOW + 0.2) == "overdue"
    record.finish("error", error="boom")
    assert record.finished is not None
    assert record.age() == pytest.approx(record.finished - record.sent)
    assert not record.overdue(0.3) and record.phase(0.3) == "error"


@pytest.mark.timeout(30)
def test_only_an_exhausted_pool_makes_the_client_hold_a_request() -> None:
    held = _record("held", created=NOW - 2.0, pool_limit=4, pool_in_use=4)
    room = _record("room", created=NOW - 2.0, pool_limit=4, pool_in_use=3)
    unbounded = _record("unbounded", created=NOW - 2.0, pool_limit=None, pool_in_use=30)
    fresh = _record("fresh", created=NOW - 0.1, pool_limit=4, pool_in_use=4)
    assert held.pool_exhausted and held.held_by_client(1.0, NOW)
    assert held.phase(1.0, NOW) == "held_by_client" and not held.overdue(1.0, NOW)
    for record in (room, unbounded, fresh):
        assert not record.held_by_client(1.0, NOW)
        assert record.phase(1.0, NOW) == "not_sent_yet"
    assert fresh.pool_exhausted and not room.pool_exhausted and not unbounded.pool_exhausted


@pytest.mark.timeout(30)
def test_views_count_the_phases_on_the_sent_clock() -> None:
    done = _record("done", created=NOW - 9, sent=NOW - 8)
    done.finish("ok")
    ledger = ClientLedger(
        [
            _record("late", created=NOW - 9.0),  # 9 s in the client, still not sent
            _record("held", created=NOW - 9.0, pool_limit=1, pool_in_use=1),
            _record("leaving", created=NOW - 9.0, sent=NOW - 0.1),
            _record("stuck", created=NOW - 9.0, sent=NOW - 2.0),
            done,
        ]
    )
    view = ledger.view()
    phases = view.phases(1.0, NOW)
    assert phases["not_sent_yet"] == phases["held_by_client"] == 1
    assert phases["in_flight"] == phases["overdue"] == phases["ok"] == 1
    assert sum(phases.values()) == 5 and "pending" not in phases
    assert [r.request_id for r in view.overdue(1.0, NOW)] == ["stuck"]
    assert [r.request_id for r in view.held_by_client(1.0, NOW)] == ["held"]
    assert [r.request_id for r in view.not_sent_yet()] == ["late", "held"]


@pytest.mark.timeout(30)
def test_json_round_trip_keeps_the_clock_and_the_pool_evidence() -> None:
    record = _record("x", created=NOW - 3, pool_limit=4, pool_in_use=4)
    sent = _record("y", created=NOW - 3, sent=NOW - 1, pool_limit=4, pool_in_use=2)
    ledger = ClientLedger([record, sent])
    again = ClientLedger.from_json(ledger.to_json())
    assert [r.to_dict() for r in again.records] == [r.to_dict() for r in ledger.records]
    first = again.records[0].to_dict()
    assert (first["sent"], first["pool_limit"], first["pool_in_use"]) == (None, 4, 4)
    assert again.records[0].held_by_client(1.0, NOW)
    # A ledger written before these fields existed still loads: no pool evidence, same clock.
    old = json.loads(ledger.to_json())
    for item in old["records"]:
        del item["pool_limit"], item["pool_in_use"]
    loaded = ClientLedger.from_json(json.dumps(old)).records
    assert [r.pool_exhausted for r in loaded] == [False, False]
    assert loaded[1].age(NOW) == pytest.approx(1.0)


@pytest.mark.timeout(30)
def test_the_table_shows_the_sent_clock_and_what_was_never_sent() -> None:
    table = summary_table([_record("w", created=NOW - 2.5), _record("s", sent=NOW - 1)], now=NOW)
    assert "not sent (2.5s)" in table and "1.0s" in table


# -- both clients stamp sent at the write -------------------------------------------------------


def _send(client_kind: str, base_url: str, mode: str, **kwargs: Any) -> RequestRecord:
    ledger = ClientLedger()
    record = RequestRecord(
        request_id=f"{client_kind}-{mode}-{time.monotonic_ns()}", origin="harness", target=base_url
    )

    async def main() -> None:
        client = new_aiohttp_session() if client_kind == "aiohttp" else new_httpx_client()
        try:
            await send_chat(
                client,
                ledger,
                record,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=3,
                extra_body={"test_mode": mode},
                **kwargs,
            )
        finally:
            await (client.aclose() if isinstance(client, httpx.AsyncClient) else client.close())

    asyncio.run(main())
    return record


@pytest.mark.timeout(30)
@pytest.mark.parametrize("client_kind", ["aiohttp", "httpx"])
def test_sent_is_the_write_and_precedes_the_server_seeing_it(client_kind: str, server: Any) -> None:
    record = _send(client_kind, server.base_url, "ok")
    assert (record.state, record.tokens, record.status) == ("ok", 3, 200)
    assert record.sent is not None and record.first_byte is not None
    assert record.created <= record.sent <= server.arrived[record.request_id]
    assert record.sent <= record.first_byte <= record.finished  # type: ignore[operator]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("client_kind", ["aiohttp", "httpx"])
def test_both_clients_end_in_the_same_states(client_kind: str, server: Any) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("reset", {}),
        ("hang", {"timeout_s": 0.3}),
        ("status500", {}),
        ("no_done", {}),
        ("ping", {"abort_after_tokens": 2}),
    ]
    outcomes = {mode: _send(client_kind, server.base_url, mode, **kwargs) for mode, kwargs in cases}
    assert outcomes["reset"].state == "unknown" and outcomes["reset"].sent is not None
    assert outcomes["hang"].state == "timeout" and outcomes["hang"].sent is not None
    assert outcomes["status500"].state == "error" and "HTTP 500" in str(outcomes["status500"].error)
    assert outcomes["no_done"].error == "stream ended without [DONE] after 3 tokens"
    assert (outcomes["ping"].state, outcomes["ping"].tokens) == ("aborted", 2)
    assert outcomes["ping"].last_ping is not None


@pytest.mark.timeout(30)
@pytest.mark.parametrize("client_kind", ["aiohttp", "httpx"])
def test_a_refused_connection_was_never_sent(client_kind: str) -> None:
    with ChatServer() as gone:
        base_url = gone.base_url
    record = _send(client_kind, base_url, "ok")
    assert record.state == "error" and record.sent is None
    # The same words whichever library failed: the hop walk reads them.
    assert record.error is not None and record.error.startswith("ConnectError")


@pytest.mark.timeout(30)
def test_a_request_waiting_for_the_pool_is_held_by_the_client_not_overdue() -> None:
    with ArrivalServer(mode="hang") as hanging:
        ledger = ClientLedger()
        pool = PoolGauge(limit=1)
        first = RequestRecord(request_id="first", origin="harness", target=hanging.base_url)
        second = RequestRecord(request_id="second", origin="harness", target=hanging.base_url)
        seen_waiting: list[tuple[str, bool, int | None, float | None]] = []
        cancelled_at: list[float] = []

        async def main() -> None:
            client = new_httpx_client(max_connections=1)
            try:
                hold = asyncio.create_task(send_chat(client, ledger, first, messages=[], pool=pool))
                wait = asyncio.create_task(
                    send_chat(
                        client,
                        ledger,
                        second,
                        messages=[],
                        pool=pool,
                        extra_body={"test_mode": "ok"},
                    )
                )
                # The first on the wire (the server has it) and the second held long enough: on
                # a loaded machine the first's connect can outlast the second's 0.2 s.
                async with asyncio.timeout(10):
                    while not ("first" in hanging.arrived and second.held_by_client(0.2)):
                        await asyncio.sleep(0.01)
                seen_waiting.append(
                    (second.phase(0.2), second.overdue(0.2), second.pool_in_use, second.sent)
                )
                cancelled_at.append(time.time())
                hold.cancel()  # frees the one connection: the waiting request goes out
                await asyncio.gather(hold, return_exceptions=True)
                await wait
            finally:
                await client.aclose()

        asyncio.run(main())
    assert seen_waiting == [("held_by_client", False, 1, None)]
    assert (first.state, first.cut_by_stop) == ("unknown", True)
    assert second.state == "ok" and second.sent is not None and first.finished is not None
    assert second.pool_limit == 1
    # It left the client only once the first gave its connection up, which only the cancel
    # does; its overdue clock starts there, and the server saw it after that.
    assert second.sent >= cancelled_at[0]
    assert second.waited() - second.age() == pytest.approx(second.sent - second.created)
    assert second.sent <= hanging.arrived["second"]
    assert pool.in_use == 0 and pool.waiting() == 0


# -- the loads pick their client ----------------------------------------------------------------


@pytest.mark.timeout(30)
def test_loads_use_aiohttp_unless_their_pool_is_the_subject() -> None:
    url = "http://127.0.0.1:9"
    assert Harness(url).client_kind == "aiohttp" and Harness(url).pool.limit is None
    pooled = Harness(url, max_connections=4)
    assert (pooled.client_kind, pooled.pool.limit) == ("httpx", 4)
    assert Harness(url, pool_timeout_s=1.0).client_kind == "httpx"
    assert Harness(url, client="httpx").client_kind == "httpx"
    assert StrayRequester(url).client_kind == "aiohttp"
    with pytest.raises(ValueError, match="client must be one of"):
        Harness(url, client="requests")  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_an_aiohttp_harness_stamps_every_request_and_never_reports_a_full_pool() -> None:
    with ArrivalServer() as quick, Harness(quick.base_url, agents=8, rounds=2) as harness:
        assert harness.wait(20)
    records = harness.ledger.records
    assert len(records) == 16 and {r.state for r in records} == {"ok"}
    for r in records:
        assert r.sent is not None and r.created <= r.sent <= quick.arrived[r.request_id]
        assert r.pool_limit is None and r.pool_in_use is not None and not r.pool_exhausted
    assert harness.pool.in_use == 0


# -- the scenario run waits on this clock -------------------------------------------------------


def _first_wave(n: int, **facts: Any) -> list[RequestRecord]:
    return [_record(f"a{i}", round=0, attempt=0, created=NOW - 5.0, **facts) for i in range(n)]


@pytest.mark.timeout(30)
def test_requests_created_long_ago_but_just_sent_do_not_show_a_wedge() -> None:
    records = _first_wave(4, sent=NOW - 0.05)
    seen = showing(records, agents=4, overdue_after_s=0.3, finished=False, now=NOW)
    assert seen.all_sent and seen.in_flight == 4 and seen.held == 0
    assert not seen.wedge_shows and not seen.decided(expect_wedge=True)
    later = showing(records, agents=4, overdue_after_s=0.3, finished=False, now=NOW + 0.3)
    assert later.held == 4 and later.decided(expect_wedge=True)


@pytest.mark.timeout(30)
def test_a_wedge_shows_only_once_every_first_round_request_left_the_client() -> None:
    records = _first_wave(3, sent=NOW - 2.0)
    records.append(_record("late", round=0, attempt=0, created=NOW - 5.0))  # not sent yet
    seen = showing(records, agents=4, overdue_after_s=0.3, finished=False, now=NOW)
    assert seen.held == 3 and seen.not_sent_yet == 1 and not seen.decided(expect_wedge=True)
    assert not showing(records[:3], agents=4, overdue_after_s=0.3, finished=False, now=NOW).decided(
        expect_wedge=True
    )
    # Incident 6: the client's exhausted pool holds the rest; that is the wedge showing.
    pool_held = _first_wave(2, sent=NOW - 2.0) + [
        _record(f"q{i}", round=0, attempt=0, created=NOW - 2.0, pool_limit=2, pool_in_use=2)
        for i in range(3)
    ]
    seen = showing(pool_held, agents=5, overdue_after_s=1.0, finished=False, now=NOW)
    assert seen.all_sent and seen.held == 5 and seen.wedge_shows


@pytest.mark.timeout(30)
def test_a_finished_harness_or_a_quiet_first_round_decides_without_a_wedge() -> None:
    done = _first_wave(2, sent=NOW - 1.0)
    for r in done:
        r.finish("ok")
    assert showing(done, agents=2, overdue_after_s=1.0, finished=True).decided(True)
    # The first round went out 0.6 s ago and finished; round 1 is in flight, not overdue.
    first = _first_wave(2, sent=NOW - 0.6)
    for r in first:
        r.finish("ok")
    later = [
        _record(f"b{i}", round=1, attempt=0, created=NOW - 0.2, sent=NOW - 0.1) for i in range(2)
    ]
    quiet = showing(first + later, agents=2, overdue_after_s=0.4, finished=False, now=NOW)
    assert quiet.quiet_s == pytest.approx(0.6) and quiet.in_flight == 2 and quiet.held == 0
    assert quiet.decided(expect_wedge=False) and not quiet.decided(expect_wedge=True)
    early = showing(first + later, agents=2, overdue_after_s=0.4, finished=False, now=NOW - 0.3)
    assert not early.decided(expect_wedge=False)


@pytest.mark.timeout(30)
def test_a_wedge_that_never_shows_fails_naming_what_was_awaited() -> None:
    base = {s.name: s for s in catalog()}["kv-transfer-blackhole"]
    scenario = dataclasses.replace(
        base, expect=dataclasses.replace(base.expect, wedge_shows_within_s=0.2)
    )
    harness = SimpleNamespace(records=_first_wave(30), agents=30, running=True)
    started = time.monotonic()
    with pytest.raises(ScenarioFailed) as failure:
        _await_showing(scenario, harness, ScenarioResult())  # type: ignore[arg-type]
    assert 0.2 <= time.monotonic() - started < 5
    headline = failure.value.headline
    assert headline.startswith("Scenario kv-transfer-blackhole: waited 0.2 s for the wedge to show")
    assert "all 30 first-round harness requests sent" in headline
    assert "(> 0.3 s since sent)" in headline
    assert "30 not sent yet, 0 in flight, 0 held" in str(failure.value)
