"""The scenario catalog: declarative TOML files that map one to one onto the Python API.
Every key is checked on load, its type too (by the constructors' own checks); a bad file is a
ConfigError naming the file and the key, and only that file fails.
"""

from __future__ import annotations

import importlib.util
import inspect
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from pytest_wedge.errors import ConfigError, FieldTypeError, close_match
from pytest_wedge.faults.fault import Fault
from pytest_wedge.faults.registry import FAULT_REGISTRY
from pytest_wedge.load import Aborter, Harness, StrayRequester
from pytest_wedge.scenarios.per_router import read_overrides
from pytest_wedge.scenarios.schema import TableReader
from pytest_wedge.spec.component import check_values
from pytest_wedge.spec.marker_args import parse_keywords
from pytest_wedge.spec.topology import BOOKKEEPING_FIELDS, TopologySpec
from pytest_wedge.watchdogs import (
    AbortOldest,
    AggregateThroughputWatchdog,
    CommandWatchdog,
    CoRestartWatchdog,
    EngineGaugeWatchdog,
    InflightPinWatchdog,
    KubernetesProbes,
    NoProgressWatchdog,
    OldestRequestWatchdog,
    ProbeWatchdog,
    RequestTimeout,
    RouterCircuitBreaker,
    RouterHealthCheck,
    RunCommand,
    StreamBodyStallTimeout,
    StubWatchdog,
    TransferTimeoutWatchdog,
    Watchdog,
)
from pytest_wedge.watchdogs.clearing import WATCHDOG_CASES


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
        OldestRequestWatchdog,
        EngineGaugeWatchdog,
        ProbeWatchdog,
        StubWatchdog,  # any engine watchdog of the stubs, by its setting (bootstrap_timeout_s)
        KubernetesProbes,
        RouterHealthCheck,
        RouterCircuitBreaker,
    )
}
# What a watchdog of a scenario file may do when it fires: ``action = { kind = "Restart",
# target = "decode-0" }``. Every registered fault, and these actions that are not faults.
ACTIONS: Mapping[str, Callable[..., Any]] = {"AbortOldest": AbortOldest, "RunCommand": RunCommand}


@dataclass(frozen=True)
class ScheduledFault:
    fault: Fault
    at_s: float = 0.0
    for_s: float | None = None


@dataclass(frozen=True)
class ArmedWatchdog:
    watchdog: Watchdog
    expect_fire: bool = True
    # The case its row must name ("cleared", "acted, wedge stayed", ...; clearing.py), or None.
    expect_case: str | None = None


@dataclass(frozen=True)
class Expect:
    """What a scenario checks: the ``[expect]`` table."""

    located_at: str
    """The hop the diagnosis must name (``decode-0``, ``router->decode-0``), or ``none``;
    ``a|b``: either one, where the same fault lands on one of two hops by chance."""
    red_herring: str | None = None
    """A text one of the diagnosis's red-herring lines must contain (``stray-1``)."""
    cleared_within_s: float | None = None
    """Arm the watchdogs and check that they clear the wedge within this budget; None: no
    check."""
    clears: bool = True
    """False: the clearing check must fail (a watchdog that must not be trusted)."""
    require_recovery: bool = True
    """A new request of the origin must succeed after the clearing too."""
    nothing_lost: bool = True
    """Every harness request has exactly one final state at the end."""
    overdue_after_s: float = 1.0
    """When a pending request counts as wedged, in seconds after it was sent."""
    wedge_shows_within_s: float = 10.0
    """How long to wait for the wedge to show before diagnosing."""
    finish_within_s: float = 30.0
    """How long the harness may take to finish once the faults are lifted."""
    settle_within_s: float | None = None
    """In-flight counters must reach 0 within this, the faults still applied; None: off."""
    quiet: bool | None = None
    """The healthy-edge check: None, a wedge scenario; True, the armed watchdogs must leave
    healthy load alone; False, they must not (a false positive shown on purpose)."""
    false_positive: str | None = None
    """With ``quiet = false``: a text the false-positive verdict must contain."""
    quiet_within_s: float = 30.0
    """How long the healthy load of a ``quiet`` check may take to finish."""
    every_request_ok: bool | None = None
    """True: every harness request ended ok (what a graceful drain promises the requests in
    flight); False: some must not (a fault that cuts them, shown on purpose); None: not
    checked."""
    executed_once: bool | None = None
    """True: no harness request id ran on more than one attempt; False: some must (a
    non-idempotent replay shown on purpose); None: not counted."""


# The top-level keys of a scenario file.
TOP_KEYS = (
    "name",
    "summary",
    "source",
    "incident",
    "timeout_s",
    "topology",
    "load",
    "faults",
    "watchdogs",
    "expect",
    "routers",
)


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
    source: str = ""
    """Where the failure was seen in the field: the public issue or pull request it models."""


@dataclass(frozen=True)
class BadScenario:
    """A scenario file that did not load: it fails on its own, and the others still run."""

    path: Path
    error: ConfigError
    name: str | None  # its ``name`` key when readable: selecting that name selects this file


def _build(reader: TableReader, registry: Mapping[str, Callable[..., Any]], what: str) -> Any:
    kind = reader.take("kind", str, expected=f"a {what} kind: {', '.join(sorted(registry))}")
    factory = registry.get(kind)
    if factory is None:
        expected = f"one of {', '.join(sorted(registry))}"
        raise reader.fail("kind", expected, kind, guess=close_match(kind, registry))
    kwargs = dict(reader.table)
    reader.table.clear()
    _check_arguments(reader, factory, kind, kwargs)
    try:
        return factory(**kwargs)
    except FieldTypeError as exc:  # the constructor's own type check, mapped onto the key
        raise reader.fail(exc.field, exc.expected, exc.found) from exc
    except (TypeError, ConfigError) as exc:
        detail = exc.headline if isinstance(exc, ConfigError) else str(exc)
        raise reader.fail(
            next(iter(kwargs), "kind"), f"the arguments of {kind}{_signature(factory)}", detail
        ) from exc


def _check_arguments(
    reader: TableReader, factory: Callable[..., Any], kind: str, kwargs: Mapping[str, Any]
) -> None:
    """Each key is a parameter of the constructor, and each required one is there."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for key, value in kwargs.items():
        if key not in params:
            expected = f"the arguments of {kind}{_signature(factory)}"
            raise reader.fail(key, expected, value, guess=close_match(key, params))
    for name, param in params.items():
        required = param.default is param.empty and param.kind is not param.VAR_POSITIONAL
        if required and name not in kwargs:
            raise reader.fail(name, f"a value ({kind} requires it)", "nothing")


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
    if cls is StrayRequester:  # a stray may bypass the router: "decode-0", "router", a URL
        allowed.add("target")
        hints["target"] = str
    for name, value in table.table.items():
        if name not in allowed:
            expected = f"one of {', '.join(sorted(allowed))}"
            raise table.fail(name, expected, value, guess=close_match(name, allowed))
    try:
        check_values(cls.__name__, table.table, hints)
    except FieldTypeError as exc:
        expected = f"{exc.expected} ({cls.__name__} {exc.field})"
        raise table.fail(exc.field, expected, exc.found) from exc
    options = dict(table.table)
    table.table.clear()
    return options


def load_scenario(path: Path) -> Scenario:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"Bad scenario file {path.name}: not valid TOML",
            facts={"file": path, "error": str(exc)},
            fix=f"fix the TOML syntax in {path}",
        ) from exc
    top = TableReader(path, data, "").only(*TOP_KEYS)
    name = top.take("name", str)
    summary = top.take("summary", str)
    source = top.take("source", str, "")
    incident = top.take("incident", int, None)
    timeout_s = float(top.take("timeout_s", float, 60.0))
    if timeout_s == 0:  # pytest-timeout reads 0 as "no timeout": a hang would never end
        raise top.fail("timeout_s", "a number of seconds > 0", 0)
    # The marker's keywords: TopologySpec's fields a user sets (not its bookkeeping).
    keys = [f.name for f in fields(TopologySpec) if f.name not in BOOKKEEPING_FIELDS]
    topo = top.sub("topology").only(*keys, "runtime")
    marker_kwargs = {key: topo.table.pop(key) for key in keys if key in topo.table}
    runtime = topo.take("runtime", str, None)
    topo.done()
    spec = _topology_spec(topo, marker_kwargs)
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
        at_s = float(reader.take("at_s", float, 0.0))
        for_s = reader.take("for_s", float, None)
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
    expect_types = typing.get_type_hints(Expect)  # [expect] and its overrides are typed by it
    for kind, override in per_router.items():
        try:
            check_values("expect", override.expect, expect_types)
        except FieldTypeError as exc:
            raise top.fail(f"routers.{kind}.expect.{exc.field}", exc.expected, exc.found) from exc
    exp = top.sub("expect", required=True).only(*(f.name for f in fields(Expect)))
    expect = Expect(
        **{
            f.name: exp.take(
                f.name, expect_types[f.name], ... if f.default is MISSING else f.default
            )
            for f in fields(Expect)
        }
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
        source,
    )


def _topology_spec(topo: TableReader, given: Mapping[str, Any]) -> TopologySpec:
    try:
        return parse_keywords((), given).spec
    except ConfigError as exc:
        error = exc

    def fails_alone(key: str) -> bool:
        try:
            parse_keywords((), {key: given[key]})
        except ConfigError as alone:
            return alone.headline == error.headline
        return False

    # The key to blame is the one that fails the same way on its own (else the first).
    key = next((k for k in given if fails_alone(k)), next(iter(given), "prefill"))
    if isinstance(error, FieldTypeError) and error.field != key:  # a key of a table: stub.itl_ms
        raise topo.fail(f"{key}.{error.field}", error.expected, error.found) from error
    facts = {"error": error.headline, **error.facts}
    raise topo.fail(key, f"a valid {key}", given.get(key), facts=facts) from error


def _armed(reader: TableReader) -> ArmedWatchdog:
    expect_fire = reader.take("expect_fire", bool, True)
    expect_case = reader.take("expect_case", str, None)
    if expect_case is not None and expect_case not in WATCHDOG_CASES:
        raise reader.fail("expect_case", f"one of {', '.join(WATCHDOG_CASES)}", expect_case)
    if "action" in reader.table:  # a table: the fault or action it runs when it fires
        kinds: dict[str, Callable[..., Any]] = {**FAULTS, **ACTIONS}
        action = _build(reader.sub("action", required=True), kinds, "watchdog action")
        reader.table["action"] = action
    return ArmedWatchdog(_build(reader, WATCHDOGS, "watchdog"), expect_fire, expect_case)


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


def read_catalog(directories: Iterable[Path] = ()) -> tuple[list[Scenario], list[BadScenario]]:
    """The built-in catalog plus every ``*.toml`` under ``directories``, sorted by name, and
    every file of them that did not load (a second file of one name among them)."""
    files = sorted(CATALOG_DIR.glob("*.toml"))
    for directory in directories:
        files += sorted(Path(directory).rglob("*.toml"))
    scenarios: list[Scenario] = []
    bad: list[BadScenario] = []
    seen: dict[str, Path] = {}
    for path in files:
        try:
            scenario = load_scenario(path)
        except ConfigError as exc:
            bad.append(BadScenario(path, exc, _declared_name(path)))
            continue
        if scenario.name in seen:
            error = ConfigError(
                f"Two scenarios are named {scenario.name!r}",
                facts={"first": seen[scenario.name], "second": path},
                fix=f"rename the scenario in {path}",
            )
            bad.append(BadScenario(path, error, scenario.name))
            continue
        seen[scenario.name] = path
        scenarios.append(scenario)
    return sorted(scenarios, key=lambda s: s.name), bad


def _declared_name(path: Path) -> str | None:
    try:
        name = tomllib.loads(path.read_text()).get("name")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return name if isinstance(name, str) else None


def catalog(directories: Iterable[Path] = ()) -> list[Scenario]:
    """The scenarios of :func:`read_catalog`; the first bad file's ConfigError if any."""
    scenarios, bad = read_catalog(directories)
    if bad:
        raise bad[0].error
    return scenarios
