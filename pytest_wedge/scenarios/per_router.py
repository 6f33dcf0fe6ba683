"""Per-router expectations: a ``[routers.<kind>]`` table replaces the router flags, watchdogs and
some expectations when the catalog runs on that kind (``--wedge-router=<kind>``). It must say
``because`` (the behaviour that differs) and ``shown_by`` (the test that shows it): a difference
nobody demonstrated may not relax an expectation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_wedge.errors import close_match
from pytest_wedge.routers.router_spec import BUILT_IN, RouterSpec
from pytest_wedge.scenarios.schema import TableReader

OVERRIDABLE_EXPECT = (
    "located_at",
    "cleared_within_s",
    "clears",
    "require_recovery",
    "nothing_lost",
    "false_positive",
    "quiet",
    "executed_once",
    "every_request_ok",
    "settle_within_s",
)


@dataclass(frozen=True)
class RouterOverride:
    because: str
    shown_by: str
    router_args: tuple[str, ...] | None = None
    watchdogs: tuple[Any, ...] | None = None  # ArmedWatchdog, built by the catalog
    expect: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def read_overrides(
    top: TableReader, build_watchdog: Callable[[TableReader], Any]
) -> dict[str, RouterOverride]:
    """The ``[routers.*]`` tables of one scenario file, checked key by key."""
    routers = top.sub("routers")
    found: dict[str, RouterOverride] = {}
    for kind in list(routers.table):
        if kind not in BUILT_IN:
            expected = f"a router kind: {', '.join(BUILT_IN)}"
            raise routers.fail(kind, expected, kind, guess=close_match(kind, BUILT_IN))
        table = routers.sub(kind).only("because", "shown_by", "router_args", "watchdogs", "expect")
        because = table.take("because", str)
        shown_by = table.take("shown_by", str, expected="the test that shows the difference")
        args = table.take("router_args", list, None)
        if args is not None and not all(isinstance(a, str) for a in args):
            raise table.fail("router_args", "a list of strings", args)
        watchdogs = None
        if "watchdogs" in table.table:
            watchdogs = tuple(build_watchdog(entry) for entry in table.entries("watchdogs"))
        expect = table.sub("expect").only(*OVERRIDABLE_EXPECT)
        overrides = dict(expect.table)
        expect.table.clear()
        table.done()
        found[kind] = RouterOverride(
            because, shown_by, None if args is None else tuple(args), watchdogs, overrides
        )
    routers.done()
    return found


def for_router(scenario: Any, kind: str) -> Any:
    """``scenario`` as it runs on router ``kind``: its spec on that router, and its
    ``[routers.<kind>]`` overrides applied."""
    spec = scenario.spec
    if kind != "smg" and spec.router == RouterSpec():
        spec = dataclasses.replace(spec, router=RouterSpec(kind=kind))
    override: RouterOverride | None = scenario.extra.get("routers", {}).get(kind)
    if override is None:
        return dataclasses.replace(scenario, spec=spec)
    if override.router_args is not None:
        spec = dataclasses.replace(spec, router_args=override.router_args)
    changes: dict[str, Any] = {"spec": spec}
    if override.watchdogs is not None:
        changes["watchdogs"] = override.watchdogs
    if override.expect:
        changes["expect"] = dataclasses.replace(scenario.expect, **override.expect)
    return dataclasses.replace(scenario, **changes)
