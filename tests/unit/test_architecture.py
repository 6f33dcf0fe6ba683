"""The house is one-way, and loading the plugin stays light.

Folders sit in the order ``docs/architecture.md`` states (:data:`FOLDER_ORDER`): a folder imports
only from folders below it. No two modules, and no two folders, import each other in a circle.
The walk reads every import statement with ``ast``, top-level, inside functions and under
``TYPE_CHECKING`` alike: a circle through a type-only import is still a circle in the design.
Modules are found in the tree, so a module that is added, renamed or deleted needs no edit here;
a new folder must be given its place.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_wedge"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
HEAVY = ("faker", "httpx", "prometheus_client", "toxiproxy", "aiohttp")

# Bottom to top. A folder (``name/``) or root module (``name.py``) may import from its own layer
# and the layers below it; circles inside a layer are caught by the package-level circle test.
FOLDER_ORDER: tuple[tuple[str, ...], ...] = (
    ("errors.py", "loopback.py", "metrics_text.py", "waiting.py"),
    ("routers/",),
    ("spec/",),
    ("stubs/",),
    ("runtime/",),
    ("load/",),
    ("topology/",),
    ("evidence/",),
    ("links/",),
    ("faults/",),
    ("views.py",),
    ("diagnostics/",),
    ("watchdogs/",),
    ("handle.py",),
    ("scenarios/",),
    ("plugin/",),
    ("reference/", "cli/"),
    ("__init__.py",),
)
FLOOR = FOLDER_ORDER[0]
# The stub workers are their own program in a bare container: they import the floor only.
SEPARATE_PROGRAM = "stubs/"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported_names(path: Path, name: str, modules: Iterable[str]) -> set[str]:
    """Every module ``path`` names in an import. ``from a import b`` names ``a.b`` when that is a
    module, else ``a``, so ``from pytest_wedge import errors`` does not count as the root."""
    known = set(modules)
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
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in known else target)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of this package it imports.

    Importing ``a.b.c`` also runs ``a.b``'s ``__init__``: that counts, except where ``a.b`` is
    the importer's own package (a package's modules may use their siblings freely). The root's
    ``__init__`` counts only where a module imports the root itself."""
    modules = all_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for target in imported_names(path, name, modules):
            if target == "pytest_wedge" and name != "pytest_wedge":
                edges.add(target)
            while target and target not in modules:
                target = target.rpartition(".")[0]
            while target.startswith("pytest_wedge."):
                if target != name and not (name + ".").startswith(target + "."):
                    edges.add(target)
                target = target.rpartition(".")[0]
        graph[name] = edges
    return graph


def folder_of(module: str) -> str:
    """``pytest_wedge.topology.running`` -> ``topology/``; ``pytest_wedge.views`` -> ``views.py``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    if len(parts) > 2 or (PACKAGE / parts[1]).is_dir():
        return f"{parts[1]}/"
    return f"{parts[1]}.py"


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for name, edges in graph.items():
        mine = folder_of(name)
        folders.setdefault(mine, set()).update(f for f in map(folder_of, edges) if f != mine)
    return folders


def layer(folder: str) -> int:
    return next(i for i, names in enumerate(FOLDER_ORDER) if folder in names)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
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


def order_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a module from a folder above its own, or a stub importing past the floor."""
    found = []
    for name, edges in sorted(graph.items()):
        mine = folder_of(name)
        for target in sorted(edges):
            theirs = folder_of(target)
            if theirs == mine:
                continue
            if layer(theirs) > layer(mine):
                found.append(f"{name} ({mine}) imports {target} ({theirs}), which sits above it")
            elif mine == SEPARATE_PROGRAM and theirs not in FLOOR:
                found.append(
                    f"{name} (a stub worker) imports {target}: stubs import the floor only"
                )
    return found


def test_the_walk_sees_the_package() -> None:
    graph = import_graph()
    assert "pytest_wedge.handle" in graph
    assert "pytest_wedge.topology.running" in graph["pytest_wedge.handle"]
    assert "pytest_wedge.spec.topology" in graph["pytest_wedge"]


def test_no_module_import_circle() -> None:
    assert cycles(import_graph()) == []


def test_no_package_import_circle() -> None:
    assert cycles(folder_graph(import_graph())) == []


def test_the_cycle_finder_finds_a_planted_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_folder_has_its_place_in_the_order() -> None:
    placed = {name for names in FOLDER_ORDER for name in names}
    assert set(map(folder_of, all_modules())) - placed == set()


def test_folders_import_only_from_below() -> None:
    assert order_violations(import_graph()) == []


def test_the_order_check_sees_an_upward_import_and_a_stub_past_the_floor() -> None:
    planted = {
        "pytest_wedge.runtime.process": {"pytest_wedge.topology.running"},
        "pytest_wedge.stubs.server": {"pytest_wedge.spec.topology", "pytest_wedge.errors"},
        "pytest_wedge.handle": {"pytest_wedge.topology.running"},
    }
    assert order_violations(planted) == [
        "pytest_wedge.runtime.process (runtime/) imports pytest_wedge.topology.running "
        "(topology/), which sits above it",
        "pytest_wedge.stubs.server (a stub worker) imports pytest_wedge.spec.topology: "
        "stubs import the floor only",
    ]


def test_a_root_import_counts_and_a_submodule_import_does_not(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("import pytest_wedge\nfrom pytest_wedge import errors\n")
    names = imported_names(source, "pytest_wedge.x.mod", ["pytest_wedge", "pytest_wedge.errors"])
    assert names == {"pytest_wedge", "pytest_wedge.errors"}


def test_the_architecture_doc_states_the_same_order() -> None:
    """The doc's rule is the layers top to bottom, separated by ``>``, in a fenced block after
    "## The dependency rule"."""
    text = ARCHITECTURE.read_text()
    section = text.split("## The dependency rule", 1)[1]
    block = section.split("```", 2)[1]
    layers = [tuple(part.split()) for part in block.split(">") if part.strip()]
    assert tuple(layers[::-1]) == FOLDER_ORDER


def documented_modules() -> set[str]:
    return set(re.findall(r"`(pytest_wedge/[\w/]+\.py)`", ARCHITECTURE.read_text()))


def test_the_module_map_names_every_module_and_only_modules_that_exist() -> None:
    in_tree = {str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")}
    named = documented_modules()
    assert sorted(in_tree - named) == [], "modules missing from docs/architecture.md's map"
    assert sorted(named - in_tree) == [], "docs/architecture.md names modules that do not exist"


def test_the_architecture_doc_is_short_and_cites_only_what_the_repo_has() -> None:
    text = ARCHITECTURE.read_text()
    assert len(text.splitlines()) <= 300
    cited = re.findall(r"\]\(([^)#]+)", text) + re.findall(r"[\w./-]+\.md\b", text)
    missing = {c for c in cited if not any((d / c).exists() for d in (ARCHITECTURE.parent, ROOT))}
    assert missing == set()


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
