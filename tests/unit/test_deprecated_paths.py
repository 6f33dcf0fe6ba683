"""Modules that moved in the 0.2 layout keep their old import paths for a release: each old
name still resolves to the very same object, with a DeprecationWarning naming the new home."""

from __future__ import annotations

import importlib

import pytest

MOVED = [
    ("pytest_wedge.session", "WedgeSession", "pytest_wedge.topology.session"),
    ("pytest_wedge.running", "Topology", "pytest_wedge.topology.running"),
    ("pytest_wedge.scenario_run", "run_scenario", "pytest_wedge.scenarios.run"),
    ("pytest_wedge.reporting", "build_report", "pytest_wedge.glue.report"),
    ("pytest_wedge.clearing", "expect_cleared", "pytest_wedge.watchdogs.clearing"),
    ("pytest_wedge.compose", "render", "pytest_wedge.topology.compose"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED, ids=[m[0] for m in MOVED])
def test_an_old_path_gives_the_same_object_with_a_warning(old: str, name: str, new: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}; import {name} from there"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


def test_an_unknown_name_on_an_old_path_is_still_an_attribute_error() -> None:
    module = importlib.import_module("pytest_wedge.session")
    with pytest.warns(DeprecationWarning), pytest.raises(AttributeError):
        module.NoSuchThing  # noqa: B018


@pytest.mark.parametrize(
    ("package", "names"),
    [
        ("pytest_wedge.topology", ["TopologySpec", "StubOptions", "ComponentSpec"]),
        ("pytest_wedge.watchdogs", ["RequestTimeout", "CoRestartWatchdog", "expect_cleared"]),
        ("pytest_wedge.scenarios", ["catalog", "load_scenario", "CATALOG_DIR"]),
        ("pytest_wedge.diagnostics", ["diagnose", "locate", "Probe", "dump_stacks"]),
    ],
)
def test_former_modules_now_packages_keep_their_public_names(
    package: str, names: list[str]
) -> None:
    module = importlib.import_module(package)
    assert [n for n in names if not hasattr(module, n)] == []
