"""The blind locator cannot reach the ground truth: by type, and by what its modules import.

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
from pathlib import Path

from pytest_wedge.diagnostics.blind import locate_blind
from pytest_wedge.evidence.observed import Observed

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
    assert all(p.annotation in ("str", "float", "float | None") for p in others), others
