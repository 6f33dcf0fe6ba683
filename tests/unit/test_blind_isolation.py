"""The blind locator cannot reach the ground truth: by type, by what its modules import, and
by what it answers: the same observation with every piece of ground truth planted in it (the
stubs' fault and origin log lines, fault JSON in error texts, failed ledger fetches) gets the
same answer, for every kind of location. It takes no fault window: it infers the onset.

The walk reads every import statement of every module of ``pytest_wedge.diagnostics.blind``
with ``ast`` (top level, inside functions, under ``TYPE_CHECKING`` alike) and follows them
through the package. The only modules of pytest_wedge it may reach are its own, the
``Observed`` type and the ``Diagnosis`` it returns: never the oracle walk, the snapshot
collector, the stub client, the fault or toxic descriptions, the runtime or the topology.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_blind_rules import ADDRESS, NOW, in_flight, observed, pending, record

from pytest_wedge.diagnostics.blind import locate_blind
from pytest_wedge.evidence.observed import Observed
from pytest_wedge.evidence.read_public import error_answers_read, log_tails
from pytest_wedge.evidence.snapshot import Snapshot, fill

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_wedge"
BLIND = "pytest_wedge.diagnostics.blind"
ALLOWED = {"pytest_wedge.evidence.observed", "pytest_wedge.diagnostics.diagnosis"}
# What reads ground truth, named so a failure says which door was opened.
GROUND_TRUTH = (
    "pytest_wedge.diagnostics.oracle",
    "pytest_wedge.diagnostics.hops",
    "pytest_wedge.evidence.snapshot",
    "pytest_wedge.evidence.truth",
    "pytest_wedge.stubs",
    "pytest_wedge.faults",
    "pytest_wedge.topology",
    "pytest_wedge.runtime",
    "pytest_wedge.handle",
)


def module_path(name: str) -> Path | None:
    base = PACKAGE.parent / Path(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imports_of(source: str, name: str, is_package: bool) -> set[str]:
    """The pytest_wedge modules ``source`` (module ``name``) imports, resolved to modules."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target.startswith("pytest_wedge") and module_path(target) is None:
                target = target.rpartition(".")[0]
            if target.startswith("pytest_wedge."):
                found.add(target)
    return found


def reachable(start: list[str]) -> dict[str, str]:
    """Every pytest_wedge module reachable from ``start`` through import statements (not
    through the ``__init__`` of a package they merely sit in), with who imported it."""
    seen: dict[str, str] = {name: "(start)" for name in start}
    todo = list(start)
    while todo:
        name = todo.pop()
        path = module_path(name)
        assert path is not None, name
        for target in imports_of(path.read_text(), name, path.name == "__init__.py"):
            if target not in seen:
                seen[target] = name
                todo.append(target)
    return seen


def blind_modules() -> list[str]:
    folder = PACKAGE / "diagnostics" / "blind"
    return sorted(
        f"{BLIND}.{p.stem}" if p.stem != "__init__" else BLIND for p in folder.glob("*.py")
    )


def offenders(seen: dict[str, str]) -> list[str]:
    return sorted(
        f"{who} imports {name}"
        for name, who in seen.items()
        if not name.startswith(BLIND) and name not in ALLOWED
    )


def test_the_walk_sees_every_blind_module_and_what_they_use() -> None:
    modules = blind_modules()
    assert {f"{BLIND}.locate", f"{BLIND}.rules", f"{BLIND}.clientside"} <= set(modules)
    seen = reachable(modules)
    assert set(seen) >= ALLOWED, seen


def test_the_blind_locator_imports_nothing_that_reads_ground_truth() -> None:
    seen = reachable(blind_modules())
    assert offenders(seen) == []
    assert not [name for name in seen if name.startswith(GROUND_TRUTH)]


def test_the_walk_would_catch_a_door_to_the_ground_truth() -> None:
    planted = "from pytest_wedge.diagnostics.hops import Context\nimport pytest_wedge.stubs.control_client"
    found = imports_of(planted, f"{BLIND}.planted", False)
    assert found == {"pytest_wedge.diagnostics.hops", "pytest_wedge.stubs.control_client"}
    relative = imports_of("from ..oracle import locate", f"{BLIND}.planted", False)
    assert relative == {"pytest_wedge.diagnostics.oracle"}
    assert offenders({"pytest_wedge.diagnostics.hops": f"{BLIND}.planted"}) != []


def test_observed_and_ground_truth_are_separate_types() -> None:
    observed = {f.name for f in dataclasses.fields(Observed)}
    assert not observed & {"ledgers", "stub_states", "stub_states_before", "components", "links"}


def test_the_blind_locator_takes_observed_and_nothing_else() -> None:
    signature = inspect.signature(locate_blind)
    first = next(iter(signature.parameters.values()))
    assert first.annotation in ("Observed", Observed)
    others = [p for p in signature.parameters.values() if p is not first]
    assert all(p.annotation in ("str", "float") for p in others), others


# -- the same answer with and without the ground truth ---------------------------------------------

# What only the test knows, planted wherever text could carry it into the blind path: a stub's
# log of the fault it was given and of each request's origin, the fault's JSON in the client's
# error texts, and the failed fetches of the stubs' ledgers, states and Toxiproxy's toxics.
FAULT_JSON = (
    '{"kind": "stall_kv_transfer", "target": "decode-0->prefill-0", "origin": "harness", '
    '"status": 500, "message": "injected: prefill answered 500", "timeout_ms": 0}'
)
PLANTED_LOG = [
    f"2026-12-02 12:00:00 ERROR prefill-0 fault added: {FAULT_JSON}",
    "2026-12-02 12:00:00 WARN decode-0 harness-run1-0 origin=harness held by the fault",
]
PLANTED_UNANSWERED = {
    "prefill-0 ledger": "did not answer within 0.50 s (ReadTimeout)",
    "decode-0 state": "did not answer within 0.20 s (ReadTimeout)",
    "toxiproxy": "did not answer: ConnectError",
    "components": "did not answer: RuntimeError",
}


def _pending_at(**workers: float) -> dict[str, Any]:
    return in_flight(**workers)


def _shapes() -> dict[str, Observed]:
    """One observation per kind of location, as an operator would see each wedge."""
    transport = (
        'HTTP 502: {"error":{"code":"PD disaggregation request failed","message":"Transport '
        "error: error sending request for url (" + ADDRESS["router->prefill-0"] + '/v1/chat)"}}'
    )
    failed_transport = pending(
        state="error", status=502, finished=NOW - 0.1, first_byte=NOW - 0.2, error=transport
    )
    refused_front = pending(
        state="error", sent=None, finished=NOW - 0.2, error="ConnectError: connection refused"
    )
    leaked = [record(i, first_byte=NOW - 1.9, pool_limit=4, pool_in_use=i) for i in range(4)]
    waiting = [record(i, sent=None, pool_limit=4, pool_in_use=4) for i in range(4, 30)]
    return {
        "client": observed(leaked + waiting),
        "client->router": observed(refused_front),
        "client->router pending": observed(pending()),
        "router": observed(pending(), processes={"router": "stopped"}),
        "router->prefill-0": observed(failed_transport),
        "router->decode-0": observed(pending(), router=_pending_at(decode_0=30)),
        "decode-1->prefill-1": observed(
            pending(),
            prefill=2,
            decode=2,
            router=_pending_at(prefill_0=0, prefill_1=30, decode_0=0, decode_1=30),
            workers={
                "prefill-1": {"num_prefill_inflight_queue_reqs": 30.0},
                "decode-1": {"num_decode_transfer_queue_reqs": 30.0},
            },
        ),
        "prefill-0": observed(
            pending(),
            router=_pending_at(prefill_0=30, decode_0=30),
            workers={
                "prefill-0": {"num_running_reqs": 30.0},
                "decode-0": {"num_decode_transfer_queue_reqs": 30.0},
            },
        ),
        "decode-0": observed(
            pending(),
            router=_pending_at(prefill_0=0, decode_0=30),
            processes={"decode-0": "stopped"},
            health={"decode-0": "did not answer"},
        ),
        "none": observed(pending(5, age=0.3)),
    }


def _with_truth_planted(obs: Observed) -> Observed:
    planted = Observed.from_dict(obs.to_dict())
    planted.logs = {name: list(PLANTED_LOG) for name in ["router", *obs.worker_names]}
    planted.unanswered = dict(obs.unanswered) | PLANTED_UNANSWERED
    for r in planted.client:
        if r.get("error"):
            r["error"] = f"{r['error']} {FAULT_JSON}"
    return planted


@pytest.mark.parametrize("where", list(_shapes()))
def test_ground_truth_planted_everywhere_changes_no_answer(where: str) -> None:
    obs = _shapes()[where]
    clean = locate_blind(obs, "harness", 1.0)
    assert clean.location == where.split()[0], clean.render()
    dirty = locate_blind(_with_truth_planted(obs), "harness", 1.0)
    assert (dirty.location, dirty.confidence) == (clean.location, clean.confidence)
    assert dirty.decided_by == clean.decided_by
    assert dirty.ruled_out == clean.ruled_out


def test_truth_fetches_that_fail_are_no_evidence() -> None:
    # A stub whose ledger or state did not answer is ground truth missing, not something an
    # operator saw: it stays in the snapshot, out of Observed.
    topology = SimpleNamespace(links={}, stubs={"prefill-0": None})
    snapshot = Snapshot(NOW, ["prefill-0"], ["decode-0"], [])
    snapshot.observed = Observed(NOW, ["prefill-0"], ["decode-0"], [])
    failed = {"prefill-0 metrics": "did not answer within 0.20 s"} | PLANTED_UNANSWERED
    fill(snapshot, topology, {}, failed, public={"prefill-0 metrics"})  # type: ignore[arg-type]
    assert snapshot.observed.unanswered == {"prefill-0 metrics": "did not answer within 0.20 s"}
    assert set(snapshot.unanswered) == set(failed)


def test_no_stub_log_is_read_into_observed(tmp_path: Path) -> None:
    for name in ("router", "prefill-0", "toxiproxy"):
        (tmp_path / f"{name}.log").write_text("x\n" + "\n".join(PLANTED_LOG) + "\n")
    topology = SimpleNamespace(
        components={"router": None, "prefill-0": None, "toxiproxy": None},
        stubs={"prefill-0": None},
        runtime=SimpleNamespace(log_path=lambda name: str(tmp_path / f"{name}.log")),
    )
    assert list(log_tails(topology)) == ["router"]  # type: ignore[arg-type]


def test_the_router_log_says_which_workers_answered_with_error_statuses(tmp_path: Path) -> None:
    lines = [
        '\x1b[2m2026-12-05 04:31:11\x1b[0m \x1b[31mERROR\x1b[0m http_request{request_id="s-1"}: '
        "pd_router.rs:1195: Decode server returned error status "
        "decode_url=http://127.0.0.1:46031 status=500 Internal Server Error",
        "2026-12-05 04:31:12 ERROR pd_router.rs:2326: Prefill server returned error status "
        "prefill_url=http://127.0.0.1:46717 status=503 Service Unavailable body=",
        "2026-12-05 04:31:13 ERROR Decode server returned error status "
        "decode_url=http://127.0.0.1:1 status=500",  # not a worker of this topology
    ]
    (tmp_path / "router.log").write_text("\n".join(lines) + "\n")
    link = SimpleNamespace
    topology = SimpleNamespace(
        links={
            "router->decode-0": link(listen="127.0.0.1:46031", spec=link(target="decode-0")),
            "router->prefill-0": link(listen="127.0.0.1:46717", spec=link(target="prefill-0")),
        },
        runtime=SimpleNamespace(log_path=lambda name: str(tmp_path / f"{name}.log")),
    )
    read = error_answers_read(topology)  # type: ignore[arg-type]
    second = time.mktime(time.strptime("2026-12-05 04:31:11", "%Y-%m-%d %H:%M:%S"))
    assert read == {"decode-0": second + 1.0, "prefill-0": second + 2.0}


def test_the_locator_takes_no_fault_window() -> None:
    assert "since" not in inspect.signature(locate_blind).parameters
