"""The oracle's reference rule on recorded-style snapshots: the injected fault's hop where the
fault manifested, ``none`` where it did not, the documented exceptions; from the ledgers and
the injected faults alone, never from the toxics or the blind locator's code."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, cast

import pytest
from test_diagnostics_locator import NOW, record

from pytest_wedge.diagnostics.oracle import (
    InjectedFault,
    elsewhere,
    flowing_at,
    injected_faults,
    locate,
    wedged_requests,
)
from pytest_wedge.evidence.observed import ClientRecord, Observed
from pytest_wedge.evidence.read_public import client_as_of, client_records
from pytest_wedge.evidence.snapshot import Snapshot
from pytest_wedge.load.client_ledger import ClientLedger, RequestRecord

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_wedge"


def request(n: int, *, age: float = 2.0, **fields: Any) -> dict[str, Any]:
    return record(n, age=age, **fields)


def entry(n: int, state: str, *, room: int | None = 7, tokens: int = 0, **ago: float) -> Any:
    """A worker ledger entry of request ``n``; each stamp given as seconds before NOW."""
    stamps = {"arrived": NOW - 1.9} | {k: NOW - v for k, v in ago.items()}
    return {
        "request_id": f"harness-x-{n}",
        "origin": "harness",
        "room": room,
        "state": state,
        "tokens": tokens,
        "error": None,
        "t": stamps,
    }


def snapshot(
    client: list[dict[str, Any]],
    ledgers: dict[str, list[Any]],
    *,
    shape: tuple[int, int] = (1, 1),
    components: dict[str, str] | None = None,
    links: dict[str, Any] | None = None,
    started: dict[str, float] | None = None,
) -> Snapshot:
    prefill = [f"prefill-{i}" for i in range(shape[0])]
    decode = [f"decode-{j}" for j in range(shape[1])]
    running = {name: "running" for name in ["router", *prefill, *decode]}
    snap = Snapshot(
        taken_at=NOW,
        prefill=prefill,
        decode=decode,
        link_names=list(links or {}),
        client=client,
        ledgers={name: ledgers.get(name, []) for name in [*prefill, *decode]},
        components=running | (components or {}),
        links=links or {},
    )
    for silent in [n for n, s in snap.components.items() if s not in ("running", "paused")]:
        snap.ledgers.pop(silent, None)  # a dead stub answers no ledger fetch
    if started is not None:
        snap.observed = Observed(
            taken_at=NOW, prefill=prefill, decode=decode, link_names=[], started=started
        )
    return snap


def fault(kind: str, target: str, ago: float = 3.0) -> list[InjectedFault]:
    return [InjectedFault(kind, target, NOW - ago)]


def finished_streams(n: int) -> dict[str, list[Any]]:
    """Every request prefilled and decoded to the end: the bytes are lost on the way back."""
    return {
        "prefill-0": [
            entry(i, "ok", kv_ready=1.8, transfer_start=1.7, finished=1.7) for i in range(n)
        ],
        "decode-0": [
            entry(i, "ok", tokens=16, kv_received=1.7, first_token=1.69, finished=1.6)
            for i in range(n)
        ],
    }


# -- independence ------------------------------------------------------------------------------


def _imported(module: str) -> set[str]:
    """The pytest_wedge modules ``module`` imports (every import statement, read with ast)."""
    path = PACKAGE.parent / Path(*module.split("."))
    source = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {m for m in found if m.startswith("pytest_wedge.")}


def _exists(module: str) -> bool:
    path = PACKAGE.parent / Path(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_the_oracle_reaches_nothing_of_the_blind_locator() -> None:
    seen: set[str] = set()
    todo = ["pytest_wedge.diagnostics.oracle", "pytest_wedge.diagnostics.hops"]
    while todo:
        module = todo.pop()
        if module in seen or not _exists(module):
            continue
        seen.add(module)
        todo += sorted(_imported(module))
    assert "pytest_wedge.diagnostics.diagnosis" in seen  # the walk did follow the imports
    blind = sorted(m for m in seen if m.startswith("pytest_wedge.diagnostics.blind"))
    assert blind == []


def test_a_toxic_on_toxiproxy_is_no_answer_the_injected_fault_is() -> None:
    # The ledgers cannot tell router->decode-0 from the router: only the injected fault can.
    timeout = {"type": "timeout", "stream": "downstream", "attributes": {"timeout": 0}}
    links = {"router->decode-0": {"enabled": True, "toxics": [timeout]}}
    snap = snapshot([request(i) for i in range(30)], finished_streams(30), links=links)
    assert locate(snap).location != "router->decode-0"
    found = locate(snap, faults=fault("Timeout", "router->decode-0"))
    assert found.location == "router->decode-0", found.render()
    assert "injected: Timeout on router->decode-0" in found.evidence


def test_injected_faults_are_read_from_fault_windows() -> None:
    class Down:
        target = "client->router"

    class Window:
        fault, started, ended = Down(), NOW - 1.0, None

    assert injected_faults([Window()]) == [InjectedFault("Down", "client->router", NOW - 1.0)]


# -- the reference rule --------------------------------------------------------------------------


def test_a_fault_that_never_showed_is_none() -> None:
    done = [request(i, state="ok", finished=NOW - 1.5, tokens=16) for i in range(30)]
    young = [request(i, age=0.3) for i in range(30, 40)]
    found = locate(snapshot(done + young, {}), faults=fault("Bandwidth", "decode-0->prefill-0"))
    assert found.location == "none"


def test_failures_before_the_fault_are_not_its_wedge() -> None:
    old = [
        request(i, age=9, state="error", finished=NOW - 8, error="HTTP 500: boom")
        for i in range(30)
    ]
    found = locate(snapshot(old, {}), faults=fault("Latency", "client->router", ago=4.0))
    assert found.location == "none", found.render()


def test_a_killed_router_is_the_router_though_the_client_could_not_connect() -> None:
    refused = [
        request(i, age=0.5, sent=None, state="error", finished=NOW - 0.4, error="ConnectError: x")
        for i in range(30)
    ]
    snap = snapshot(refused, {}, components={"router": "exited"})
    assert locate(snap, faults=fault("Kill", "router")).location == "router"
    assert locate(snapshot(refused, {}), faults=fault("Down", "client->router")).location == (
        "client->router"
    )


def test_a_reset_on_client_to_router_is_that_link_wherever_the_legs_were() -> None:
    # Each connection was reset: the router then aborted both legs at the decode.
    cut = [
        request(i, state="unknown", finished=NOW - 0.5, error="ReadError (ClientOSError): reset")
        for i in range(20)
    ]
    ledgers = {
        "prefill-0": [entry(i, "ok", kv_ready=1.8, transfer_start=1.7) for i in range(20)],
        "decode-0": [entry(i, "aborted", kv_received=1.7, first_token=1.6) for i in range(20)],
    }
    found = locate(snapshot(cut, ledgers), faults=fault("ResetPeer", "client->router"))
    assert found.location == "client->router", found.render()


def test_a_crashed_prefill_holds_what_its_decodes_wait_for() -> None:
    waiting = {"decode-0": [entry(i, "transfer", transfer_start=1.8) for i in range(30)]}
    snap = snapshot([request(i) for i in range(30)], waiting, components={"prefill-0": "exited"})
    assert locate(snap, faults=fault("Crash", "prefill-0")).location == "prefill-0"


def test_a_prefill_restarted_under_its_requests_holds_them_not_the_transfer_link() -> None:
    # The new prefill process has no ledger entry for them; the decode failed their fetch.
    failed_fetch = [entry(i, "error", transfer_start=1.5, finished=1.0) for i in range(10)]
    failed = [
        request(i, state="error", finished=NOW - 0.9, status=502, error="HTTP 502: transfer")
        for i in range(10)
    ]
    snap = snapshot(failed, {"decode-0": failed_fetch}, started={"prefill-0": NOW - 1.2})
    found = locate(snap, faults=fault("Restart", "prefill-0", ago=1.6))
    assert found.location == "prefill-0", found.render()


def test_a_decode_only_restart_is_its_transfer_wedge_not_what_the_restart_dropped() -> None:
    # Dropped by the restart (failed before the decode was back) and, after it, new requests
    # prefilled whose decode waits for a KV that never comes.
    dropped = [
        request(i, age=6, state="error", finished=NOW - 4.5, error="HTTP 502: decode")
        for i in range(30)
    ]
    new = [request(i, age=2.0) for i in range(30, 50)]
    ledgers = {
        "prefill-0": [entry(i, "inflight", kv_ready=1.8) for i in range(30, 50)],
        "decode-0": [entry(i, "transfer", transfer_start=1.8) for i in range(30, 50)],
    }
    snap = snapshot(dropped + new, ledgers, started={"decode-0": NOW - 4.0})
    injected = fault("DecodeOnlyRestart", "decode-0", ago=5.0)
    found = locate(snap, faults=injected)
    assert found.location == "decode-0->prefill-0", found.render()
    assert found.wedged == 20
    assert elsewhere(injected[0], found.location, snap.prefill) is not None


def _finished_unread(first: int, n: int, *, ago: float) -> list[Any]:
    """Requests decode-0 streamed to the end ``ago`` seconds before NOW (after holding them
    0.2 s), whose bytes the client has not read yet."""
    stamps = {"arrived": NOW - ago - 0.2}
    done = dict(kv_received=ago + 0.15, first_token=ago + 0.1, finished=ago)
    return [
        {**entry(i, "ok", tokens=16, **done), "t": stamps | {k: NOW - v for k, v in done.items()}}
        for i in range(first, first + n)
    ]


def test_a_client_short_of_cpu_is_late_no_hop_holds_what_it_has_yet_to_read() -> None:
    """As in the heavy bench's three draws where the oracle said ``client`` (seeds 42396700050,
    42396700224, 42396700271): a KV black hole on a transfer link, and a client starved of CPU
    that had not yet read what the decode finished 0.3 s before. Those requests are overdue,
    but nothing holds them: the wedge is the black-holed transfer."""
    waiting = [request(i) for i in range(6)]
    unread = [request(i, age=1.4) for i in range(6, 20)]
    ledgers = {
        "prefill-0": [entry(i, "ok", kv_ready=1.8) for i in range(6)],
        "decode-0": [entry(i, "transfer", transfer_start=1.8) for i in range(6)]
        + _finished_unread(6, 14, ago=0.3),
    }
    found = locate(
        snapshot(waiting + unread, ledgers), faults=fault("Timeout", "decode-0->prefill-0")
    )
    assert (found.location, found.wedged) == ("decode-0->prefill-0", 6), found.render()


def test_a_stream_left_unread_is_the_client_however_recent() -> None:
    leaked = [request(i, age=1.4, left_unread=True) for i in range(10)]
    snap = snapshot(leaked, {"decode-0": _finished_unread(0, 10, ago=0.3)})
    assert locate(snap).location == "client"
    # Unread for longer than a request may take: a leak, flagged or not.
    stale = [request(i, age=3.0) for i in range(10)]
    snap = snapshot(stale, {"decode-0": _finished_unread(0, 10, ago=2.0)})
    assert locate(snap).location == "client"


def test_breakers_opened_by_a_failing_prefill_are_that_prefill() -> None:
    refused = [
        request(
            i, age=0.5, state="error", status=503, finished=NOW - 0.3, error="no_available_workers"
        )
        for i in range(30)
    ]
    ledgers = {
        "prefill-0": [entry(i, "error", running=1.5, finished=1.4) for i in range(30)],
        "decode-0": [entry(i, "aborted", transfer_start=1.5) for i in range(30)],
    }
    snap = snapshot(refused, ledgers)
    found = locate(snap, faults=fault("ErrorStatus", "prefill-0"))
    assert found.location == "prefill-0", found.render()


@pytest.mark.parametrize(
    ("kind", "location", "documented"),
    [
        ("DecodeOnlyRestart", "decode-1->prefill-0", True),
        ("DecodeOnlyRestart", "decode-1", False),  # its own hop: no exception needed
        ("DecodeOnlyRestart", "decode-0->prefill-0", False),  # another decode's transfer
        ("Restart", "decode-1->prefill-0", True),  # a decode restarted alone
        ("Crash", "router", False),
    ],
)
def test_documented_exceptions(kind: str, location: str, documented: bool) -> None:
    why = elsewhere(InjectedFault(kind, "decode-1", NOW), location, ["prefill-0", "prefill-1"])
    assert (why is not None) is documented


def test_a_restarted_prefill_wedges_no_transfer_by_its_nature() -> None:
    restarted = InjectedFault("Restart", "prefill-0", NOW)
    assert elsewhere(restarted, "decode-0->prefill-0", ["prefill-0"]) is None


def test_wedged_requests_are_overdue_or_failed_in_the_window() -> None:
    client = [
        request(0, age=2.0),  # overdue
        request(1, age=0.5),  # young
        request(2, age=5.0, sent=None),  # not sent yet, the pool was not full: nothing holds it
        request(3, age=5.0, sent=None, pool_limit=4, pool_in_use=4),  # behind a full pool
        request(4, state="error", finished=NOW - 0.5),  # failed in the window
        request(5, state="error", finished=NOW - 3.0),  # failed before it
        request(6, state="timeout", finished=NOW - 0.5, cut_by_stop=True),  # the load stopped
        request(7, state="ok", finished=NOW - 0.5),
    ]
    found = wedged_requests(client, NOW, 1.0, 10.0, since=NOW - 1.0)
    assert [r["request_id"] for r in found] == ["harness-x-0", "harness-x-3", "harness-x-4"]


def test_judged_at_an_earlier_moment_the_ledgers_read_since_are_read_as_of_it() -> None:
    """The bench reads the ground truth after the blind diagnosis; the oracle judges the
    instant the blind observed. Requests 0.7 s old then, overdue by the time the truth was
    read, were not yet wedged; one that failed since was still pending; one sent since is
    left out."""
    client = [
        request(0, age=1.0),  # 0.7 s old at the blind's moment
        request(1, age=1.0, state="error", finished=NOW - 0.1, error="HTTP 500: boom"),
        request(2, age=0.2),  # created after it
    ]
    ledgers = {"prefill-0": [entry(0, "queued"), entry(1, "queued")]}
    faults = fault("Pause", "prefill-0", ago=1.2)
    assert locate(snapshot(client, ledgers), faults=faults).location == "prefill-0"
    then = locate(snapshot(client, ledgers), faults=faults, at=NOW - 0.3)
    assert (then.location, then.total) == ("none", 2), then.render()
    later = locate(snapshot(client, ledgers), faults=faults, at=NOW - 0.3, overdue_after_s=0.5)
    assert (later.location, later.wedged) == ("prefill-0", 2), later.render()


def test_a_request_still_pending_is_read_without_the_steps_it_took_after_the_moment() -> None:
    pending = {**request(0, age=1.0), "first_byte": NOW - 0.1}
    then = client_as_of(cast(ClientRecord, pending), NOW - 0.3)
    assert then is not None and then["first_byte"] is None and then["state"] == "pending"
    assert then["sent"] == pending["sent"]


def test_a_request_whose_first_token_came_after_the_moment_had_no_tokens_then() -> None:
    streaming = {**request(0, age=1.0), "first_byte": NOW - 0.5, "first_token": NOW - 0.1}
    then = client_as_of(cast(ClientRecord, {**streaming, "tokens": 7}), NOW - 0.3)
    assert then is not None and then["tokens"] == 0 and then["first_byte"] == NOW - 0.5
    later = client_as_of(cast(ClientRecord, {**streaming, "tokens": 7}), NOW - 0.05)
    assert later is not None and later["tokens"] == 7


# -- draws the bench found the oracle wrong on, recorded ---------------------------------------

CASES = sorted((Path(__file__).parent / "oracle_cases").glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_recorded_bench_draws(path: Path) -> None:
    """A recorded draw (the snapshot, trimmed to the harness's recent requests, without the
    toxics) with its injected faults, judged at the moment the blind locator observed (``at``)
    when the case records it: the oracle's answer is the expected one."""
    case = json.loads(path.read_text())
    faults = [InjectedFault(**f) for f in case["faults"]]
    snapshot = Snapshot.from_dict(case["snapshot"])
    found = locate(snapshot, "harness", 1.0, faults=faults, at=case.get("at"))
    assert found.location == case["expected"], f"{case['draw']}\n{found.render()}"


def test_the_client_view_is_copied_as_of_one_instant() -> None:
    # The load keeps writing while the ledger is copied: a request that ended after the
    # instant the view is read at is still pending in it, and one not yet created is absent.
    ledger = ClientLedger()
    ended = ledger.add(RequestRecord("r-0", "harness", "http://127.0.0.1:1", created=NOW - 2.0))
    ended.sent, ended.first_byte = NOW - 1.9, NOW - 0.05
    ended.finished, ended.state, ended.status = NOW - 0.04, "ok", 200
    ledger.add(RequestRecord("r-1", "harness", "http://127.0.0.1:1", created=NOW - 0.01))
    view = client_records(ledger, NOW - 0.1)
    assert [r["request_id"] for r in view] == ["r-0"]
    assert view[0]["state"] == "pending" and view[0]["first_byte"] is None
    assert wedged_requests(view, NOW - 0.1, 1.0, 10.0, None) == view


@pytest.mark.parametrize(
    ("first_token_s", "finished_s", "flowing"),
    [(0.6, 1.05, True), (1.15, 1.3, False), (0.1, 1.2, False), (0.6, 0.9, False)],
    ids=["flowing", "waited too long", "streamed too long", "over before"],
)
def test_a_stream_that_flowed_at_the_moment_judged_is_slow_not_held(
    first_token_s: float, finished_s: float, flowing: bool
) -> None:
    # Sent a second before the moment judged and still open then, but no stretch of it (the
    # wait for its first token, the stream after) lasted the overdue bound: nothing held it.
    sent = NOW - 1.0
    stream = record(
        0,
        age=1.0,
        stream=True,
        sent=sent,
        first_token=sent + first_token_s,
        finished=sent + finished_s,
        state="ok",
        tokens=16,
    )
    assert flowing_at(cast(ClientRecord, stream), NOW, 1.0) is flowing
