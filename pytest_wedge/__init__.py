"""pytest-wedge: distributed-hang fault injection for PD-disaggregated LLM serving.

The package works without pytest: build a :class:`TopologySpec`, start it in a
:class:`WedgeSession`, and drive faults, load and diagnosis through a :class:`Wedge`. The
pytest plugin is a thin layer of options, markers and fixtures over the same objects. The
public surface is the names below plus the subpackages ``faults``, ``watchdogs`` and ``load``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_wedge.errors import ConfigError, WedgeError

if TYPE_CHECKING:
    from pytest_wedge.diagnostics import diagnose
    from pytest_wedge.diagnostics.diagnosis import Diagnosis
    from pytest_wedge.diagnostics.oracle import locate
    from pytest_wedge.evidence.snapshot import Snapshot
    from pytest_wedge.handle import Wedge
    from pytest_wedge.plugin.report import build_report
    from pytest_wedge.scenarios.catalog import Scenario, catalog, load_scenario
    from pytest_wedge.scenarios.runner import ScenarioFailed, run_scenario
    from pytest_wedge.spec.topology import StubOptions, TopologySpec
    from pytest_wedge.topology.running import Topology
    from pytest_wedge.topology.session import WedgeSession
    from pytest_wedge.waiting import WaitTimeout, wait_for

# Imported on first use: every stub and fork server imports this package first, and the
# topology's modules (and httpx, aiohttp, faker) are none of theirs.
_LAZY = {
    "Diagnosis": "pytest_wedge.diagnostics.diagnosis",
    "Scenario": "pytest_wedge.scenarios.catalog",
    "ScenarioFailed": "pytest_wedge.scenarios.runner",
    "Snapshot": "pytest_wedge.evidence.snapshot",
    "StubOptions": "pytest_wedge.spec.topology",
    "Topology": "pytest_wedge.topology.running",
    "TopologySpec": "pytest_wedge.spec.topology",
    "WaitTimeout": "pytest_wedge.waiting",
    "Wedge": "pytest_wedge.handle",
    "WedgeSession": "pytest_wedge.topology.session",
    "build_report": "pytest_wedge.plugin.report",
    "catalog": "pytest_wedge.scenarios.catalog",
    "diagnose": "pytest_wedge.diagnostics",
    "load_scenario": "pytest_wedge.scenarios.catalog",
    "locate": "pytest_wedge.diagnostics.oracle",
    "run_scenario": "pytest_wedge.scenarios.runner",
    "wait_for": "pytest_wedge.waiting",
}

__all__ = [
    "ConfigError",
    "Diagnosis",
    "Scenario",
    "ScenarioFailed",
    "Snapshot",
    "StubOptions",
    "Topology",
    "TopologySpec",
    "WaitTimeout",
    "Wedge",
    "WedgeError",
    "WedgeSession",
    "build_report",
    "catalog",
    "diagnose",
    "load_scenario",
    "locate",
    "run_scenario",
    "wait_for",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_wedge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
