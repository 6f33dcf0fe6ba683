"""The pytest side: options, the marker, fixtures, report sections and hooks. Loaded in every
pytest run where pytest-wedge is installed, so the topology, the handle and their HTTP clients
are imported only by the hooks and fixtures that need them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.plugin import console, hookspecs
from pytest_wedge.plugin import items as scenario_items
from pytest_wedge.plugin.grouping import ShapeGrouping
from pytest_wedge.plugin.settings import SETTINGS
from pytest_wedge.plugin.state import (
    HANDLES_KEY,
    PLUGIN_KEY,
    WedgePlugin,
    close_handles,
    marker_args,
    plain_errors,
    plugin_of,
)
from pytest_wedge.plugin.summary import SummaryRows

if TYPE_CHECKING:
    from pytest_wedge.handle import Wedge
    from pytest_wedge.topology.session import WedgeSession

WEDGE_FIXTURES = {"wedge", "wedge_session", "wedge_factory"}


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wedge", "pytest-wedge: distributed-hang fault injection")
    for setting in SETTINGS.values():
        if setting.has_option:
            kwargs: dict[str, Any] = {"dest": setting.name, "default": None, "help": setting.help}
            kwargs.update(setting.option_kwargs())
            group.addoption(setting.option, **kwargs)
        parser.addini(setting.name, setting.help, type=setting.ini_type, default=None)


SUMMARY_KEY = pytest.StashKey[SummaryRows]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "wedge(prefill=1, decode=1, router_args=(), stub=None, runtime=None): the topology "
        "the `wedge` fixture brings up for this test (see pytest_wedge.spec.marker_args.wedge).",
    )
    plugin = WedgePlugin(config)
    config.stash[PLUGIN_KEY] = plugin
    config.stash[SUMMARY_KEY] = SummaryRows()
    config.pluginmanager.register(config.stash[SUMMARY_KEY], "wedge-summary")
    if config.getoption("xmlpath", None) and not hasattr(config, "workerinput"):
        from pytest_wedge.plugin.junit import WedgeJUnit

        # The wedge text also goes into each failed test's JUnit system-out.
        config.pluginmanager.register(WedgeJUnit(config), "wedge-junit")
    scenario_items.configure(config)
    # xdist: one worker per topology shape (plugin/grouping.py); a no-op without xdist.
    config.pluginmanager.register(ShapeGrouping(), "wedge-grouping")


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--wedge-scenarios=list`` prints the catalog and runs nothing."""
    for text in scenario_items.listing(config):
        print(text)
        return 0
    return None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """The scenario catalog joins the session's collection as ``wedge-scenarios::NAME``."""
    report: pytest.CollectReport = yield  # type: ignore[assignment]
    scenario_items.add_catalog(collector, report)
    return report  # type: ignore[return-value]


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Runtime, router, Toxiproxy (path and version) and the artifacts folder."""
    try:
        return console.header_lines(config)
    except Exception as exc:  # the header must never stop a run
        return [f"wedge: (the header failed: {exc!r})"]


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is not None:
        plugin.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check the binaries once, up front, when a collected test needs a topology."""
    if config.option.collectonly:
        return
    for item in items:
        if WEDGE_FIXTURES & set(getattr(item, "fixturenames", ())) or isinstance(
            item, scenario_items.ScenarioItem
        ):
            plugin_of(config).check_binaries()
            return


@pytest.fixture(scope="session")
def wedge_session(request: pytest.FixtureRequest) -> WedgeSession:
    """The per-process session: Toxiproxy server and the shared topologies."""
    with plain_errors(request.config):
        return plugin_of(request.config).session()


@pytest.fixture
def wedge_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., Wedge]]:
    """Handles onto other topologies: ``wedge_factory(prefill=2, decode=2)``."""
    item = request.node

    def make(**kwargs: Any) -> Wedge:
        parsed = marker_args(item, (), kwargs, what="wedge_factory(...)")
        return console.open_with_progress(item, parsed.spec, parsed.runtime)

    yield make
    close_handles(item)


@pytest.fixture
def wedge(request: pytest.FixtureRequest, wedge_factory: Callable[..., Wedge]) -> Wedge:
    """A handle onto the topology of this test's ``wedge`` marker (default 1P+1D), reset before
    each test; its faults and loads end with the test."""
    marker = request.node.get_closest_marker("wedge")
    if marker is None:
        return wedge_factory()
    parsed = marker_args(request.node, marker.args, marker.kwargs, what="@pytest.mark.wedge")
    return console.open_with_progress(request.node, parsed.spec, parsed.runtime)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On failure, including a pytest-timeout (signal method), before teardown runs: the
    wedge section in the terminal and JUnit XML, and the artifacts on disk."""
    report: pytest.TestReport = yield  # type: ignore[assignment]
    _point_at_the_test(item, call, report)
    if item.stash.get(HANDLES_KEY, []) and report.when == "call":
        from pytest_wedge.plugin.failure import report_call

        report_call(item, report, call.excinfo.value if call.excinfo else None)
    return report  # type: ignore[return-value]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A Ctrl-C'd hang gets its report too, taken before teardown reverts anything."""
    try:
        return (yield)
    except KeyboardInterrupt as exc:
        if item.stash.get(HANDLES_KEY, []):
            from pytest_wedge.plugin.failure import report_interrupt

            report_interrupt(item, exc)
        raise


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The scenarios' summary table; the reports of tests interrupted by Ctrl-C (they have no
    failure report to carry one)."""
    from pytest_wedge.plugin.failure import interrupted_reports
    from pytest_wedge.plugin.summary import render, write

    config = terminalreporter.config
    summary = config.stash.get(SUMMARY_KEY, None)
    if summary is not None and summary.rows:
        rows = sorted(summary.rows, key=lambda row: str(row["scenario"]))
        terminalreporter.write_sep("=", f"wedge scenarios: {len(rows)} run")
        for line in render(rows):
            terminalreporter.write_line(line)
        with contextlib.suppress(OSError, ConfigError):
            path = write(rows, plugin_of(config).run_dir())
            terminalreporter.write_line(f"summary: {path}")
    for nodeid, text in interrupted_reports(config):
        terminalreporter.write_sep("_", f"wedge report: {nodeid} (interrupted)")
        terminalreporter.write_line(text)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker writes into the controller's run folder, which the first
    worker that needs it makes (a run without wedge tests makes none)."""
    from pytest_wedge.plugin.state import ARTIFACTS_KEY, RUN_OWNER_KEY

    owner, base = plugin_of(node.config).run_owner()
    node.workerinput[RUN_OWNER_KEY] = owner
    node.workerinput[ARTIFACTS_KEY] = str(base)


def _point_at_the_test(
    item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
) -> None:
    """A ConfigError in a test is a misuse of pytest-wedge: show the test's line and our
    explanation, not our frames (``--full-trace`` still shows them)."""
    excinfo = call.excinfo
    if (
        report.when != "call"
        or not report.failed
        or excinfo is None
        or not isinstance(excinfo.value, ConfigError)
        or item.config.getoption("fulltrace")
    ):
        return
    lines = []
    frames = [entry for entry in excinfo.traceback if Path(entry.path) == item.path]
    if frames:
        entry = frames[-1]
        lines += [
            f"{entry.path}:{entry.lineno + 1}: in {entry.name}",
            f"    {str(entry.statement).strip()}",
        ]
    lines.append(f"{type(excinfo.value).__name__}: {excinfo.value}")
    report.longrepr = "\n".join(lines)
