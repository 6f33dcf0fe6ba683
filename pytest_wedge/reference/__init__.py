"""The pages under docs/reference/, generated from the code so that they cannot drift
(``tests/unit/test_reference_docs.py`` fails when a committed page differs)."""

from __future__ import annotations

PAGES = (
    "faults.md",
    "harness.md",
    "ledger.md",
    "metrics.md",
    "scenarios.md",
    "settings.md",
    "topology.md",
    "watchdogs.md",
)


def render_pages() -> dict[str, str]:
    """File name under docs/reference/ -> its Markdown."""
    # Imported here: rendering loads the faults, the loads and the evidence, which the
    # command's other subcommands never need.
    from pytest_wedge.reference import (
        faults_page,
        loads_page,
        metrics_page,
        scenario_page,
        settings_page,
        watchdogs_page,
    )

    ledger, harness = loads_page.render_ledger, loads_page.render_harness
    scenarios, topology = scenario_page.render_scenarios, scenario_page.render_topology
    renderers = (
        faults_page.render,
        harness,
        ledger,
        metrics_page.render,
        scenarios,
        settings_page.render,
        topology,
        watchdogs_page.render,
    )
    return {name: render() for name, render in zip(PAGES, renderers, strict=True)}
