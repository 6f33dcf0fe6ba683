"""pytest glue only: options and ini, the marker, fixtures, report sections and hooks.

Everything it drives works without pytest (see ``pytest_wedge.session``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_wedge import hookspecs, scenario_items
from pytest_wedge.config import SETTINGS, resolve
from pytest_wedge.errors import ConfigError, WedgeError
from pytest_wedge.handle import Wedge
from pytest_wedge.marker import parse_marker
from pytest_wedge.reporting import build_report, keep_artifacts
from pytest_wedge.running import find_executables
from pytest_wedge.session import WedgeSession
from pytest_wedge.topology import TopologySpec
from pytest_wedge.toxiproxy import find_toxiproxy

WEDGE_FIXTURES = {"wedge", "wedge_session", "wedge_factory"}
HANDLES_KEY = pytest.StashKey[list[Wedge]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


SCENARIOS_HELP = (
    "Run the scenario catalog: all scenarios, the comma-separated NAMES, or 'list' to print "
    "the catalog. Without test paths on the command line, only the catalog runs."
)
SCENARIO_DIRS_HELP = "Directories of your own scenario files (*.toml), added to the catalog."


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wedge", "pytest-wedge: distributed-hang fault injection")
    group.addoption("--wedge-scenarios", dest="wedge_scenarios", nargs="?", const="all",
                    default=None, metavar="NAMES", help=SCENARIOS_HELP)
    parser.addini("wedge_scenarios", SCENARIOS_HELP, default=None)
    parser.addini("wedge_scenario_dirs", SCENARIO_DIRS_HELP, type="paths", default=[])
    for setting in SETTINGS.values():
        kwargs: dict[str, Any] = {"dest": setting.dest, "default": None, "help": setting.help}
        if isinstance(setting.default, bool):
            kwargs.update(action="store_const", const=True)
        group.addoption(setting.option, **kwargs)
        parser.addini(setting.name, setting.help, default=None)


class WedgePlugin:
    """Per-process state: resolved settings and the sessions (one per runtime)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.sessions: dict[str, WedgeSession] = {}
        try:
            self.settings = {
                name: resolve(name, cli=config.getoption(name), ini=config.getini)
                for name in SETTINGS
            }
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from exc

    def value(self, name: str) -> Any:
        return self.settings[name].value

    def check_binaries(self) -> None:
        """Fail the run up front, with the fix, when a program the topology needs is missing
        (or the artifacts directory cannot be made)."""
        try:
            binary = find_toxiproxy(self.value("wedge_toxiproxy"), Path.cwd())
            find_executables(binary)
            if self.value("wedge_runtime") == "docker":
                from pytest_wedge.runtime.docker import connect

                connect().close()
            self._check_artifacts_dir()
        except WedgeError as exc:
            raise pytest.UsageError(str(exc)) from exc

    def _check_artifacts_dir(self) -> None:
        setting = self.settings["wedge_artifacts"]
        try:
            Path(setting.value).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"Cannot create the artifacts directory {setting.value!r}",
                facts={"from": setting.source, "error": exc},
                fix="pass --wedge-artifacts=DIR (or ini wedge_artifacts) naming a directory "
                "this user can create and write",
            ) from exc

    def session(self, runtime: str | None = None) -> WedgeSession:
        runtime = runtime or self.value("wedge_runtime")
        assert runtime is not None
        existing = self.sessions.get(runtime)
        if existing is not None:
            return existing
        hook = self.config.hook

        def factory(name: str, artifacts_dir: str, session_id: str) -> Any:
            custom = hook.pytest_wedge_make_runtime(
                name=name, artifacts_dir=artifacts_dir, session_id=session_id
            )
            if custom is not None:
                return custom
            from pytest_wedge.runtime import make_runtime

            return make_runtime(name, artifacts_dir, session_id)

        session = WedgeSession(
            runtime=runtime,
            artifacts_dir=self.value("wedge_artifacts"),
            toxiproxy_binary=self.value("wedge_toxiproxy"),
            runtime_factory=factory,
            ready_timeout_s=self.value("wedge_ready_timeout"),
        )
        self.sessions[runtime] = session
        return session.start()

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()


PLUGIN_KEY = pytest.StashKey[WedgePlugin]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "wedge(prefill=1, decode=1, router_args=(), stub=None, runtime=None): the topology "
        "the `wedge` fixture brings up for this test (see pytest_wedge.marker.wedge).",
    )
    config.stash[PLUGIN_KEY] = WedgePlugin(config)
    scenario_items.configure(config)


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--wedge-scenarios=list`` prints the catalog and runs nothing."""
    for text in scenario_items.listing(config):
        print(text)
        return 0
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    return scenario_items.collect_file(file_path, parent)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.stash.get(PLUGIN_KEY, None)
    if plugin is not None:
        plugin.close()


def _plugin(config: pytest.Config) -> WedgePlugin:
    return config.stash[PLUGIN_KEY]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Validate every wedge marker at collection, and check the binaries once if needed."""
    needs_topology = False
    for item in items:
        marker = item.get_closest_marker("wedge")
        if marker is not None:
            try:
                parse_marker(marker.args, marker.kwargs)
            except ConfigError as exc:
                raise pytest.UsageError(f"{item.nodeid}: {exc}") from exc
        if WEDGE_FIXTURES & set(getattr(item, "fixturenames", ())) or isinstance(
            item, scenario_items.ScenarioItem
        ):
            needs_topology = True
    if needs_topology:
        _plugin(config).check_binaries()


@contextlib.contextmanager
def plain_errors(config: pytest.Config) -> Iterator[None]:
    """A topology that cannot come up fails the test with our error text alone: it names what
    was checked, the log tail and the fix, where a traceback through pytest-wedge adds nothing
    (``--full-trace`` still shows it)."""
    try:
        yield
    except WedgeError as exc:
        if config.getoption("fulltrace"):
            raise
        raise pytest.fail.Exception(f"{type(exc).__name__}: {exc}", pytrace=False) from None


def open_handle(item: pytest.Item, spec: TopologySpec, runtime: str | None) -> Wedge:
    """A fresh handle onto the session's topology for ``spec``, closed with ``item``."""
    plugin = _plugin(item.config)
    with plain_errors(item.config):
        topology = plugin.session(runtime).topology(spec)
        topology.reset()
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid)[-120:]
    artifacts = Path(plugin.value("wedge_artifacts")) / "tests" / safe
    handle = Wedge(topology, artifacts, probe_interval_s=plugin.value("wedge_probe_interval"))
    item.stash.setdefault(HANDLES_KEY, []).append(handle)
    return handle


@pytest.fixture(scope="session")
def wedge_session(request: pytest.FixtureRequest) -> WedgeSession:
    """The per-process session: Toxiproxy server and the shared topologies."""
    with plain_errors(request.config):
        return _plugin(request.config).session()


@pytest.fixture
def wedge_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., Wedge]]:
    """Build handles onto other topologies: ``wedge_factory(prefill=2, decode=2)``.

    Takes the same keyword arguments as the ``wedge`` marker.
    """
    item = request.node

    def make(**kwargs: Any) -> Wedge:
        try:
            parsed = parse_marker((), kwargs)
        except ConfigError as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from exc
        return open_handle(item, parsed.spec, parsed.runtime)

    yield make
    close_handles(item)


@pytest.fixture
def wedge(request: pytest.FixtureRequest, wedge_factory: Callable[..., Wedge]) -> Wedge:
    """A handle onto the session's topology for this test's ``wedge`` marker (default 1P+1D).

    Faults and loads it started end with the test; the topology is reset before each test.
    """
    marker = request.node.get_closest_marker("wedge")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    return wedge_factory(**kwargs)


def close_handles(item: pytest.Item) -> None:
    errors: list[str] = []
    for handle in item.stash.get(HANDLES_KEY, []):
        errors += handle.close()
    if errors:
        raise WedgeError(
            "Some faults could not be reverted",
            facts={"errors": "; ".join(errors)},
            fix="the next test resets the topology; check the component logs",
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[None]:
    """On failure, including a pytest-timeout (signal method), before teardown runs: the
    wedge section in the terminal and JUnit XML, and the artifacts on disk."""
    report: pytest.TestReport = yield  # type: ignore[assignment]
    _point_at_the_test(item, call, report)
    handles = item.stash.get(HANDLES_KEY, [])
    if not handles or report.when != "call":
        return report  # type: ignore[return-value]
    keep = _plugin(item.config).value("wedge_keep")
    hook = item.config.hook

    def extra(wedge: Wedge, origin: str) -> list[str]:
        lines = hook.pytest_wedge_diagnose(wedge=wedge, origin=origin)
        return [line for result in lines if result for line in result]

    for handle in handles:
        try:
            if report.failed:
                text, data = build_report(handle, extra_evidence=extra)
                hook.pytest_wedge_report(wedge=handle, report=data)
                report.sections.append(("wedge", text))
                # JUnit XML writes properties, not custom sections: CI test views show it.
                item.user_properties.append(("wedge", text))
            elif keep:
                keep_artifacts(handle)
        except Exception as exc:  # the report must never hide the test's own failure
            report.sections.append(("wedge", f"(the wedge report failed: {exc!r})"))
    return report  # type: ignore[return-value]


def _point_at_the_test(item: pytest.Item, call: pytest.CallInfo[None],
                       report: pytest.TestReport) -> None:  # fmt: skip
    """A ConfigError raised in a test is a mistake in the test's use of pytest-wedge (an
    unknown link, a bad fault argument): show the test's line and our explanation, not the
    frames of pytest-wedge's internals (``--full-trace`` still shows them)."""
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
        lines += [f"{entry.path}:{entry.lineno + 1}: in {entry.name}",
                  f"    {str(entry.statement).strip()}"]  # fmt: skip
    lines.append(f"{type(excinfo.value).__name__}: {excinfo.value}")
    report.longrepr = "\n".join(lines)
