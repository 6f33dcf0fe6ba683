"""pytest glue for ``--wedge-scenarios``: the catalog as collected test items."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_wedge.errors import ConfigError, WedgeError
from pytest_wedge.glue.state import close_handles, open_handle, resolve_from

if TYPE_CHECKING:
    from pytest_wedge.scenarios.catalog import Scenario


class ScenarioSelection:
    """What ``--wedge-scenarios[=NAMES]`` selected, resolved once per process."""

    def __init__(self, value: str, directories: Sequence[Path]) -> None:
        from pytest_wedge.scenarios.catalog import catalog

        self.value = value
        try:
            self.all = catalog(directories)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from exc
        wanted = None if value in ("all", "list") else [n.strip() for n in value.split(",") if n]
        known = {s.name for s in self.all}
        unknown = sorted(set(wanted or ()) - known)
        if unknown:
            raise pytest.UsageError(str(ConfigError(
                f"Unknown scenario(s): {', '.join(unknown)}",
                facts={"from": "--wedge-scenarios", "known": ", ".join(sorted(known))},
                fix="run `pytest --wedge-scenarios=list` to see the catalog",
            )))  # fmt: skip
        self.selected = [s for s in self.all if wanted is None or s.name in wanted]
        self.files = {s.path.resolve() for s in self.selected}

    def listing(self) -> str:
        width = max((len(s.name) for s in self.all), default=0)
        lines = [f"{len(self.all)} wedge scenarios:"]
        lines += [f"  {s.name.ljust(width)}  {s.summary}" for s in self.all]
        return "\n".join(lines)

    def extend_args(self, args: list[str], explicit: bool) -> list[str]:
        """Without test paths given, run only the catalog; with them, run both."""
        paths = sorted(str(f) for f in self.files)
        base = args if explicit else []
        known = {str(Path(a).resolve()) for a in base}
        return [*base, *(p for p in paths if p not in known)]

    def scenarios_in(self, path: Path) -> list[Scenario]:
        return [s for s in self.selected if s.path.resolve() == path.resolve()]


class ScenarioFile(pytest.File):
    def collect(self) -> Iterable[pytest.Item]:
        selection: ScenarioSelection = self.config.stash[SELECTION_KEY]
        from pytest_wedge.scenarios.catalog import load_scenario

        try:
            scenarios = selection.scenarios_in(self.path) or [load_scenario(self.path)]
        except ConfigError as exc:  # a file edited after start-up
            raise pytest.UsageError(str(exc)) from exc
        for scenario in scenarios:
            item = ScenarioItem.from_parent(self, name=scenario.name, scenario=scenario)
            item.add_marker(pytest.mark.timeout(scenario.timeout_s))
            yield item


class ScenarioItem(pytest.Item):
    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario

    def runtest(self) -> None:
        from pytest_wedge.scenarios.run import run_scenario

        handle = open_handle(self, self.scenario.spec, self.scenario.runtime)
        result = run_scenario(handle, self.scenario)
        if result.check is not None and result.check.time_to_clear_s is not None:
            # A JUnit XML property: CI (and `make soak`) can track it across runs.
            self.user_properties.append(
                ("wedge_time_to_clear_s", f"{result.check.time_to_clear_s:.3f}")
            )

    def teardown(self) -> None:
        close_handles(self)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
                     ) -> str | Any:  # fmt: skip
        if isinstance(excinfo.value, WedgeError):
            return str(excinfo.value)  # our errors explain themselves; no internal traceback
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"scenario {self.scenario.name}: {self.scenario.summary}"


SELECTION_KEY = pytest.StashKey[ScenarioSelection]()


def _selection(config: pytest.Config) -> ScenarioSelection | None:
    try:
        value = resolve_from(config, "wedge_scenarios").value
        directories = [Path(p) for p in resolve_from(config, "wedge_scenario_dirs").value]
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if not value:
        return None
    return ScenarioSelection(value, directories)


def configure(config: pytest.Config) -> None:
    selection = _selection(config)
    if selection is None:
        return
    config.stash[SELECTION_KEY] = selection
    if selection.value != "list":
        explicit = config.args_source == pytest.Config.ArgsSource.ARGS
        config.args[:] = selection.extend_args(list(config.args), explicit)


def collect_file(file_path: Path, parent: pytest.Collector) -> ScenarioFile | None:
    selection = parent.config.stash.get(SELECTION_KEY, None)
    if selection is None or file_path.suffix != ".toml":
        return None
    if file_path.resolve() not in selection.files:
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


def listing(config: pytest.Config) -> Iterator[str]:
    """Runs before pytest_configure (from pytest_cmdline_main), so it reads the options itself."""
    if resolve_from(config, "wedge_scenarios").value == "list":
        selection = _selection(config)
        assert selection is not None
        yield selection.listing()
