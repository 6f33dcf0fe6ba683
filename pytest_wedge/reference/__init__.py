"""The reference pages under docs/reference/, generated from the code so that they cannot drift.

``pytest-wedge reference`` writes them; ``tests/unit/test_reference_docs.py`` renders them in
memory and fails when a committed page differs, or when a fault, option, ledger field or metric
has no description.
"""

from __future__ import annotations

from collections.abc import Callable

PAGES: dict[str, str] = {
    "faults.md": "every fault kind and its fields",
    "harness.md": "every option of the harness, stray requesters and aborters",
    "ledger.md": "the client ledger's fields, states and phases",
    "metrics.md": "the router, engine and link metrics the evidence reads, and their meaning",
    "settings.md": "every pytest option, ini key and environment variable of the plugin",
}


def _renderers() -> dict[str, Callable[[], str]]:
    # Imported here: rendering loads the faults, the loads and the evidence, which the
    # command's other subcommands never need.
    from pytest_wedge.reference import faults_page, loads_page, metrics_page, settings_page

    return {
        "faults.md": faults_page.render,
        "harness.md": loads_page.render_harness,
        "ledger.md": loads_page.render_ledger,
        "metrics.md": metrics_page.render,
        "settings.md": settings_page.render,
    }


def render_pages() -> dict[str, str]:
    """File name under docs/reference/ -> its Markdown."""
    renderers = _renderers()
    return {name: renderers[name]() for name in PAGES}
