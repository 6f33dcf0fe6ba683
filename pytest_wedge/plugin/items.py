"""``--wedge-scenarios``: the catalog as test items under one virtual collector, so a node id
is ``wedge-scenarios::NAME`` wherever the package is installed. A scenario file that does not
load is one failing item of its own, ``wedge-scenarios::FILE.toml``; the others still run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_wedge.errors import ConfigError, WedgeError, close_match
from pytest_wedge.plugin.console import open_with_progress
from pytest_wedge.plugin.state import close_handles, resolve_from

if TYPE_CHECKING:
    from pytest_wedge.scenarios.catalog import BadScenario, Scenario

CATALOG_NODE = "wedge-scenarios"


def did_you_mean(unknown: Iterable[str], known: Iterable[str]) -> str:
    """``"NAME (for TYPO); ..."``: the closest known name for each unknown one, if any."""
    known = sorted(known)
    return "; ".join(f"{close} (for {n})" for n in unknown if (close := close_match(n, known)))


class ScenarioSelection:
    """What ``--wedge-scenarios[=NAMES]`` and ``wedge-scenarios::NAME`` selected, resolved
    once per process."""

    def __init__(self, value: str, directories: Sequence[Path], source: str = "") -> None:
        from pytest_wedge.scenarios.catalog import read_catalog

        self.value = value
        self.all, bad = read_catalog(directories)
        names = [n.strip() for n in value.split(",") if n.strip()]
        wanted = None if {"all", "list"} & set(names) or not names else names
        known = {s.name for s in self.all} | {b.path.name for b in bad}
        known |= {b.name for b in bad if b.name}
        unknown = [n for n in dict.fromkeys(wanted or ()) if n not in known]
        if unknown:
            facts = {"from": source or "--wedge-scenarios"}
            hint = did_you_mean(unknown, known)
            if hint:
                facts["did you mean"] = hint
            facts["known"] = ", ".join(sorted(known))
            fix = "run `pytest --wedge-scenarios=list` to see the catalog"
            error = ConfigError(f"Unknown scenario(s): {', '.join(unknown)}", facts=facts, fix=fix)
            raise pytest.UsageError(str(error))
        self.selected = [s for s in self.all if wanted is None or s.name in wanted]
        # A bad file whose name cannot be read may be the one asked for: it is reported too.
        self.bad = [
            b for b in bad if wanted is None or b.name is None or {b.name, b.path.name} & {*wanted}
        ]

    def listing(self) -> str:
        width = max((len(s.name) for s in self.all), default=0)
        lines = [f"{len(self.all)} wedge scenarios:"]
        for s in self.all:
            lines.append(f"  {s.name.ljust(width)}  {s.summary}")
            if s.source:
                lines.append(f"  {''.ljust(width)}  source: {s.source}")
        if self.bad:
            lines.append(f"{len(self.bad)} scenario files that do not load (each fails its run):")
            lines += [f"  {b.path}: {b.error.headline}" for b in self.bad]
        return "\n".join(lines)


class ScenarioCatalog(pytest.Collector):
    """The selected scenarios, as children of the virtual node ``wedge-scenarios``."""

    def collect(self) -> Iterable[pytest.Item]:
        selection: ScenarioSelection = self.config.stash[SELECTION_KEY]
        for scenario in selection.selected:
            item = ScenarioItem.from_parent(self, name=scenario.name, scenario=scenario)
            item.add_marker(pytest.mark.timeout(scenario.timeout_s))
            yield item
        for bad in selection.bad:
            yield BadScenarioItem.from_parent(self, name=bad.path.name, bad=bad)


def _our_failure(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
    """Our errors explain themselves: their text alone, no internal traceback."""
    if isinstance(excinfo.value, WedgeError) and not item.config.getoption("fulltrace"):
        return str(excinfo.value)
    return None


class BadScenarioItem(pytest.Item):
    """A scenario file that did not load: it fails with what is wrong and where."""

    def __init__(self, *, bad: BadScenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bad = bad

    def runtest(self) -> None:
        raise self.bad.error

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        return _our_failure(self, excinfo) or super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.bad.path, 0, f"scenario file {self.bad.path}"


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario

    def runtest(self) -> None:
        from pytest_wedge.plugin.state import plugin_of
        from pytest_wedge.plugin.summary import ROW_PROPERTY, scenario_row
        from pytest_wedge.scenarios.per_router import for_router
        from pytest_wedge.scenarios.runner import ORIGIN, run_scenario

        self.scenario = for_router(self.scenario, plugin_of(self.config).value("wedge_router"))
        spec, runtime = self.scenario.spec, self.scenario.runtime
        handle = open_with_progress(self, spec, runtime)
        self.user_properties.append(("wedge_router", spec.router.describe()))
        result = run_scenario(handle, self.scenario)
        if result.diagnosis is not None:  # JUnit XML properties for `make matrix`
            self.user_properties.append(("wedge_located_at", result.diagnosis.location))
        if result.check is not None:
            cleared_by = "; ".join(result.check.cleared_by()) or "-"
            self.user_properties.append(("wedge_cleared_by", cleared_by))
            self.user_properties.append(("wedge_fired", "; ".join(result.check.firings()) or "-"))
        if result.check is not None and result.check.time_to_clear_s is not None:
            # A JUnit XML property: CI (and `make soak`) can track it across runs.
            self.user_properties.append(
                ("wedge_time_to_clear_s", f"{result.check.time_to_clear_s:.3f}")
            )
        row = scenario_row(self.scenario.name, handle, result, ORIGIN)
        self.user_properties.append((ROW_PROPERTY, json.dumps(row, default=str)))

    def teardown(self) -> None:
        close_handles(self)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        return _our_failure(self, excinfo) or super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.scenario.path, 0, f"scenario {self.scenario.name}: {self.scenario.summary}"


SELECTION_KEY = pytest.StashKey[ScenarioSelection]()


def _split_ids(args: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """``wedge-scenarios[::NAME]`` arguments (None: there were none) and the other args."""
    names: list[str] | None = None
    rest: list[str] = []
    for arg in args:
        head, sep, name = arg.partition("::")
        if head != CATALOG_NODE:
            rest.append(arg)
            continue
        names = [*(names or []), name if sep else "all"]
    return names, rest


def _selection(
    config: pytest.Config, ids: Sequence[str] | None = None, explicit: bool = False
) -> ScenarioSelection | None:
    """The selection, or None when the catalog does not run (an ini ``wedge_scenarios`` counts
    only for a run without test paths)."""
    try:
        setting = resolve_from(config, "wedge_scenarios")
        directories = [Path(p) for p in resolve_from(config, "wedge_scenario_dirs").value]
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from exc
    from_ini = setting.source == "ini file"
    option = setting.value if not (from_ini and (ids or explicit)) else None
    values = [v for v in (option, *(ids or ())) if v]
    if not values:
        return None
    names = {"command line": "--wedge-scenarios", "ini file": "ini wedge_scenarios"}
    sources = [names.get(setting.source, setting.source)] if option else []
    sources += ["the node id wedge-scenarios::NAME"] if ids else []
    return ScenarioSelection(",".join(values), directories, " and ".join(sources))


def configure(config: pytest.Config) -> None:
    ids, rest = _split_ids(config.args)
    explicit = config.args_source == pytest.Config.ArgsSource.ARGS
    selection = _selection(config, ids, explicit=explicit and bool(rest))
    if selection is None:
        return
    config.stash[SELECTION_KEY] = selection
    _print_catalog_ids_as_they_are(config)
    if resolve_from(config, "wedge_scenarios").source == "ini file" and not ids:
        return  # the catalog joins pytest's default run: its testpaths, or this directory
    # From the command line: with other test paths, run both; without, only the catalog.
    config.args[:] = rest if explicit else []


def _print_catalog_ids_as_they_are(config: pytest.Config) -> None:
    """pytest prints a node id relative to the working directory (``../wedge-scenarios::NAME``
    from ``tests/``); the catalog's node is no file, so its ids are printed unchanged."""
    relative = config.cwd_relative_nodeid

    def printed(nodeid: Any) -> Any:
        return nodeid if str(nodeid).partition("::")[0] == CATALOG_NODE else relative(nodeid)

    config.cwd_relative_nodeid = printed  # type: ignore[method-assign]


def add_catalog(collector: pytest.Collector, report: pytest.CollectReport) -> None:
    """Add the catalog's collector to the session's, so ``-k`` and ``--deselect`` select it."""
    if not isinstance(collector, pytest.Session) or not report.passed:
        return
    if collector.config.stash.get(SELECTION_KEY, None) is None:
        return
    catalog = ScenarioCatalog.from_parent(collector, name=CATALOG_NODE, nodeid=CATALOG_NODE)
    report.result.append(catalog)


def listing(config: pytest.Config) -> Iterator[str]:
    """Runs before pytest_configure (from pytest_cmdline_main), so it reads the options itself."""
    if resolve_from(config, "wedge_scenarios").value == "list":
        selection = _selection(config, None)
        assert selection is not None
        yield selection.listing()
