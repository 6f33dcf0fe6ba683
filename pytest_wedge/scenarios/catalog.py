"""The scenario catalog: declarative TOML files that map one to one onto the Python API.
Every key is checked on load; a bad file is a ConfigError naming the file and the key.
"""

from __future__ import annotations

import importlib.util
import inspect
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults.fault import Fault
from pytest_wedge.faults.registry import FAULT_REGISTRY
from pytest_wedge.load import Aborter, Harness, StrayRequester
from pytest_wedge.scenarios.per_router import read_overrides
from pytest_wedge.scenarios.schema import NUMBER, TableReader, matches_hint
from pytest_wedge.spec.marker_args import parse_keywords
from pytest_wedge.spec.topology import BOOKKEEPING_FIELDS, TopologySpec
from pytest_wedge.watchdogs import (
    AggregateThroughputWatchdog,
    CommandWatchdog,
    CoRestartWatchdog,
    InflightPinWatchdog,
    NoProgressWatchdog,
    RequestTimeout,
    StreamBodyStallTimeout,
    StubWatchdog,
    TransferTimeoutWatchdog,
    Watchdog,
)


def _catalog_dir() -> Path:
    # Installed, the catalog is the package pytest_wedge.fixtures; in an editable install that
    # name maps onto the project's top-level fixtures/ directory. A source checkout on
    # PYTHONPATH uses its own fixtures/, beside its own code.
    beside = Path(__file__).resolve().parents[2]
    if (beside / "pyproject.toml").is_file() and (beside / "fixtures" / "__init__.py").is_file():
        return beside / "fixtures"
    spec = importlib.util.find_spec("pytest_wedge.fixtures")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[2] / "fixtures"


CATALOG_DIR = _catalog_dir()

# Every registered fault (``@register`` in pytest_wedge.faults), live and read-only: a fault
# a user registers in a conftest is a kind here too.
FAULTS: Mapping[str, type[Fault]] = FAULT_REGISTRY
WATCHDOGS: dict[str, Callable[..., Watchdog]] = {
    factory.__name__: factory
    for factory in (
        RequestTimeout,
        StreamBodyStallTimeout,
        InflightPinWatchdog,
        TransferTimeoutWatchdog,
        CoRestartWatchdog,
        AggregateThroughputWatchdog,
        CommandWatchdog,
        NoProgressWatchdog,
        StubWatchdog,  # any engine watchdog of the stubs, by its setting (bootstrap_timeout_s)
    )
}


@dataclass(frozen=True)
class ScheduledFault:
    fault: Fault
    at_s: float = 0.0
    for_s: float | None = None


@dataclass(frozen=True)
class ArmedWatchdog:
    watchdog: Watchdog
    expect_fire: bool = True


@dataclass(frozen=True)
class Expect:
    located_at: str
    red_herring: str | None = None
    cleared_within_s: float | None = None
    clears: bool = True
    require_recovery: bool = True
    nothing_lost: bool = True
    overdue_after_s: float = 1.0
    wedge_shows_within_s: float = 10.0
    finish_within_s: float = 30.0
    settle_within_s: float | None = None
    # The healthy-edge check: None for a wedge scenario; True when the armed watchdogs must
    # leave the healthy load alone; False when they must not (a false positive, shown on
    # purpose), with ``false_positive`` a text the verdict must contain.
    quiet: bool | None = None
    false_positive: str | None = None
    quiet_within_s: float = 30.0
    # Executions counted (load/executions.py): True, no harness request id may run on more
    # than one attempt; False, some must (a non-idempotent replay, shown on purpose).
    executed_once: bool | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    path: Path
    spec: TopologySpec
    runtime: str | None
    harness: Mapping[str, Any]
    strays: tuple[Mapping[str, Any], ...]
    aborters: tuple[Mapping[str, Any], ...]
    faults: tuple[ScheduledFault, ...]
    watchdogs: tuple[ArmedWatchdog, ...]
    expect: Expect
    warmup_requests: int = 1
    timeout_s: float = 60.0
    incident: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def _build(reader: TableReader, registry: Mapping[str, Callable[..., Any]], what: str) -> Any:
    kind = reader.take("kind", str, expected=f"a {what} kind: {', '.join(sorted(registry))}")
    factory = registry.get(kind)
    if factory is None:
        raise reader.fail("kind", f"one of {', '.join(sorted(registry))}", kind)
    kwargs = dict(reader.table)
    reader.table.clear()
    try:
        return factory(**kwargs)
    except (TypeError, ConfigError) as exc:
        detail = exc.headline if isinstance(exc, ConfigError) else str(exc)
        raise reader.fail(
            next(iter(kwargs), "kind"), f"the arguments of {kind}{_signature(factory)}", detail
        ) from exc


def _signature(factory: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(factory)).replace("'", "")
    except (TypeError, ValueError):
        return "(...)"


def _load_options(reader: TableReader, cls: type, key: str) -> dict[str, Any]:
    """Options of a load class, checked against its constructor's keyword parameters."""
    table = reader.sub(key)
    hints = typing.get_type_hints(cls.__init__)  # type: ignore[misc]
    allowed = {n for n in inspect.signature(cls).parameters if n not in ("base_url", "ledger")}
    for name, value in table.table.items():
        if name == "target" and cls is StrayRequester:
            # A stray may bypass the router: "decode-0", "router", or a URL.
            if not isinstance(value, str):
                raise table.fail(name, "a component name, 'router' or a URL", value)
            continue
        if name not in allowed:
            raise table.fail(name, f"one of {', '.join(sorted(allowed))}", value)
        if name in hints and not matches_hint(value, hints[name]):
            hint = getattr(hints[name], "__name__", str(hints[name]).replace("typing.", ""))
            raise table.fail(name, f"{hint} ({cls.__name__} {name})", value)
    options = dict(table.table)
    table.table.clear()
    return options


def load_scenario(path: Path) -> Scenario:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"Bad scenario file {path.name}: not valid TOML",
            facts={"file": path, "error": str(exc)},
            fix=f"fix the TOML syntax in {path}",
        ) from exc
    top = TableReader(path, data, "").only(
        "name",
        "summary",
        "incident",
        "timeout_s",
        "topology",
        "load",
        "faults",
        "watchdogs",
        "expect",
        "routers",
    )
    name = top.take("name", str)
    summary = top.take("summary", str)
    incident = top.take("incident", int, None)
    timeout_s = float(top.take("timeout_s", NUMBER, 60.0))
    if timeout_s == 0:  # pytest-timeout reads 0 as "no timeout": a hang would never end
        raise top.fail("timeout_s", "a number of seconds > 0", 0)
    # The marker's keywords: TopologySpec's fields a user sets (not its bookkeeping).
    keys = [f.name for f in fields(TopologySpec) if f.name not in BOOKKEEPING_FIELDS]
    topo = top.sub("topology").only(*keys, "runtime")
    marker_kwargs = {key: topo.table.pop(key) for key in keys if key in topo.table}
    runtime = topo.take("runtime", str, None)
    topo.done()
    try:
        spec = parse_keywords((), marker_kwargs).spec
    except ConfigError as exc:
        raise topo.fail(
            next(iter(marker_kwargs), "prefill"), "valid topology settings", exc.headline
        ) from exc
    load = top.sub("load").only("warmup_requests", "harness", "stray", "aborter")
    warmup = load.take("warmup_requests", int, 1)
    harness = _load_options(load, Harness, "harness")
    strays = tuple(
        _load_options(TableReader(path, {"x": t}, f"load.stray[{i}]"), StrayRequester, "x")
        for i, t in enumerate(load.take("stray", list, []))
    )
    aborters = tuple(
        _load_options(TableReader(path, {"x": t}, f"load.aborter[{i}]"), Aborter, "x")
        for i, t in enumerate(load.take("aborter", list, []))
    )
    load.done()
    scheduled = []
    for reader in top.entries("faults"):
        at_s = float(reader.take("at_s", NUMBER, 0.0))
        for_s = reader.take("for_s", NUMBER, None)
        target_key = "target" if "target" in reader.table else "kind"
        fault = _build(reader, FAULTS, "fault")
        known = [*spec.component_names, *spec.link_names()]
        if fault.target not in known:
            raise reader.fail(
                target_key,
                f"a component or link of this topology: {', '.join(known)}",
                fault.target,
            )
        scheduled.append(ScheduledFault(fault, at_s, for_s))
    armed = [_armed(reader) for reader in top.entries("watchdogs")]
    per_router = read_overrides(top, _armed)
    exp = top.sub("expect", required=True).only(*(f.name for f in fields(Expect)))
    expect = Expect(
        located_at=exp.take("located_at", str),
        red_herring=exp.take("red_herring", str, None),
        cleared_within_s=exp.take("cleared_within_s", NUMBER, None),
        clears=exp.take("clears", bool, True),
        require_recovery=exp.take("require_recovery", bool, True),
        nothing_lost=exp.take("nothing_lost", bool, True),
        overdue_after_s=float(exp.take("overdue_after_s", NUMBER, 1.0)),
        wedge_shows_within_s=float(exp.take("wedge_shows_within_s", NUMBER, 10.0)),
        finish_within_s=float(exp.take("finish_within_s", NUMBER, 30.0)),
        settle_within_s=exp.take("settle_within_s", NUMBER, None),
        quiet=exp.take("quiet", bool, None),
        false_positive=exp.take("false_positive", str, None),
        quiet_within_s=float(exp.take("quiet_within_s", NUMBER, 30.0)),
        executed_once=exp.take("executed_once", bool, None),
    )
    exp.done()
    top.done()
    _check_healthy_edge(exp, expect)
    if armed and expect.cleared_within_s is None and expect.quiet is None:
        # A watchdog is checked against a budget; without one it would be silently ignored.
        raise exp.fail(
            "cleared_within_s", "a budget in seconds, since [[watchdogs]] are armed", "nothing"
        )
    return Scenario(
        name,
        summary,
        path,
        spec,
        runtime,
        harness,
        strays,
        aborters,
        tuple(scheduled),
        tuple(armed),
        expect,
        warmup,
        timeout_s,
        incident,
        {"routers": per_router},
    )


def _armed(reader: TableReader) -> ArmedWatchdog:
    expect_fire = reader.take("expect_fire", bool, True)
    return ArmedWatchdog(_build(reader, WATCHDOGS, "watchdog"), expect_fire)


def _check_healthy_edge(exp: TableReader, expect: Expect) -> None:
    """A healthy-edge scenario runs healthy load: there is no wedge to locate or clear."""
    if expect.quiet is None:
        if expect.false_positive is not None:
            raise exp.fail("false_positive", "quiet = false alongside it", "no quiet key")
        return
    if expect.located_at != "none":
        raise exp.fail(
            "located_at", '"none": a healthy-edge check runs healthy load', expect.located_at
        )
    if expect.cleared_within_s is not None:
        raise exp.fail(
            "cleared_within_s",
            "nothing: healthy load has no wedge to clear",
            expect.cleared_within_s,
        )
    if expect.quiet is False and not expect.false_positive:
        raise exp.fail(
            "false_positive", "the text the false-positive verdict must contain", "nothing"
        )


def catalog(directories: Iterable[Path] = ()) -> list[Scenario]:
    """The built-in catalog plus every ``*.toml`` under ``directories``, sorted by name."""
    files = sorted(CATALOG_DIR.glob("*.toml"))
    for directory in directories:
        files += sorted(Path(directory).rglob("*.toml"))
    scenarios = [load_scenario(f) for f in files]
    seen: dict[str, Path] = {}
    for scenario in scenarios:
        if scenario.name in seen:
            raise ConfigError(
                f"Two scenarios are named {scenario.name!r}",
                facts={"first": seen[scenario.name], "second": scenario.path},
                fix="rename one of them",
            )
        seen[scenario.name] = scenario.path
    return sorted(scenarios, key=lambda s: s.name)
