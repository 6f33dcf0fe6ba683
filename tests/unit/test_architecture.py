"""The house is one-way: no import circles, nothing below the handle imports it, small modules,
and loading the plugin (every pytest run in an environment that has it) stays light.

The walk reads every import statement with ``ast``: top-level ones, those inside functions and
those under ``TYPE_CHECKING`` alike, because a circle through a type-only import is still a
circle in the design.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_wedge"
MAX_LINES = 350
# The handle and the plugin sit on top: only these may import them.
ABOVE_THE_HANDLE = ("pytest_wedge.plugin", "pytest_wedge.plugin", "pytest_wedge.scenarios")
HEAVY = ("faker", "httpx", "prometheus_client", "toxiproxy", "aiohttp")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_names(path: Path, name: str) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of this package it imports.

    Importing ``a.b.c`` also runs ``a.b``'s ``__init__``: that counts, except where ``a.b`` is
    the importer's own package (a package's modules may use their siblings freely)."""
    modules = all_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for target in imported_names(path, name):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            while target.startswith("pytest_wedge."):
                if target != name and not (name + ".").startswith(target + "."):
                    edges.add(target)
                target = target.rpartition(".")[0]
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_walk_sees_the_package() -> None:
    graph = import_graph()
    assert "pytest_wedge.handle" in graph
    assert "pytest_wedge.topology.running" in graph["pytest_wedge.handle"]


def test_no_import_circle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_planted_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_nothing_below_the_handle_imports_it_or_the_plugin() -> None:
    offenders = []
    for name, edges in import_graph().items():
        if name.startswith(ABOVE_THE_HANDLE) or name == "pytest_wedge.handle":
            continue
        for target in sorted(edges & {"pytest_wedge.handle", "pytest_wedge.plugin"}):
            offenders.append(f"{name} imports {target}")
    assert offenders == []


def test_the_stub_workers_import_nothing_of_the_plugin() -> None:
    """They run as their own program in a bare container: aiohttp and prometheus_client only.
    ``stubs.client`` is the plugin's side of their control API and may use the plugin."""
    offenders = [
        f"{name} imports {target}"
        for name, edges in import_graph().items()
        if name.startswith("pytest_wedge.stubs") and name != "pytest_wedge.stubs.client"
        for target in edges
        if not target.startswith("pytest_wedge.stubs")
    ]
    assert offenders == []


def test_no_module_over_the_line_budget() -> None:
    long = {
        name: count
        for name, path in all_modules().items()
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_wedge.plugin; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""


# toxiproxy-python is no longer a dependency; the four others are, so the check is live.
@pytest.mark.parametrize("heavy", [m for m in HEAVY if m != "toxiproxy"])
def test_the_lightness_check_would_see_a_heavy_import(heavy: str) -> None:
    code = f"import sys, {heavy}; print({heavy!r} in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "True"
