"""Scenarios: the TOML schema, the catalog (loading and validating files) and the runner."""

from pytest_wedge.scenarios.catalog import (
    CATALOG_DIR,
    ArmedWatchdog,
    Expect,
    Scenario,
    ScheduledFault,
    catalog,
    load_scenario,
)

__all__ = [
    "CATALOG_DIR",
    "ArmedWatchdog",
    "Expect",
    "Scenario",
    "ScheduledFault",
    "catalog",
    "load_scenario",
]
