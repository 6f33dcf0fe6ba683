"""pytest-xdist: tests of one topology shape run on one worker, so each shape comes up once per
run. :class:`ShapeScheduling` is xdist's ``loadscope`` with the shape (or an ``xdist_group``) as
the scope: the default without ``--dist``, and ``--dist loadgroup``. Groups travel in files
named in ``workerinput``: pytest 9.2's node ids drop xdist's ``@group`` tags (xdist#1386).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.plugin.items import ScenarioItem
from pytest_wedge.plugin.state import plugin_of

WORKERINPUT_KEY = "wedge_groups_dir"
GROUPS_DIR_KEY = pytest.StashKey[Path]()


def chosen_dist(config: pytest.Config) -> str | None:
    """The ``--dist`` the user gave (read from the parsed arguments, before xdist's defaulting),
    or None."""
    known = config.known_args_namespace
    if getattr(known, "distload", False):
        return "load"
    dist = getattr(known, "dist", "no")
    return None if dist == "no" else str(dist)


def groups_by_shape(config: pytest.Config) -> bool:
    """On the xdist controller: is this run scheduled by shape?"""
    if getattr(config.option, "dist", "no") == "no" or not getattr(config.option, "tx", None):
        return False
    return chosen_dist(config) in (None, "loadgroup")


def item_group(item: pytest.Item) -> str | None:
    """The item's own ``xdist_group``, else the shape it brings up, else None (``wedge_factory``
    alone, or a bad marker, which fails its own test at setup)."""
    own = [
        str(m.args[0] if m.args else m.kwargs.get("name", "default"))
        for m in item.iter_markers("xdist_group")
    ]
    if own:
        return "_".join(sorted(set(own)))
    from pytest_wedge.spec.shape import shape_id

    default_runtime: str = plugin_of(item.config).value("wedge_runtime")
    if isinstance(item, ScenarioItem):
        return shape_id(item.scenario.spec, item.scenario.runtime or default_runtime)
    if "wedge" not in getattr(item, "fixturenames", ()):
        return None
    from pytest_wedge.spec.marker_args import parse_keywords

    marker = item.get_closest_marker("wedge")
    try:
        parsed = parse_keywords(marker.args, marker.kwargs) if marker else parse_keywords((), {})
    except ConfigError:
        return None
    return shape_id(parsed.spec, parsed.runtime or default_runtime)


def write_groups(directory: Path, worker: str, items: list[pytest.Item]) -> None:
    groups = {item.nodeid: group for item in items if (group := item_group(item))}
    partial = directory / f".{worker}.json"
    partial.write_text(json.dumps(groups))
    os.replace(partial, directory / f"{worker}.json")  # the controller never reads half a map


def read_groups(directory: Path) -> dict[str, str]:
    groups: dict[str, str] = {}
    for path in sorted(directory.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            groups.update(json.loads(path.read_text()))
    return groups


def make_scheduler(config: pytest.Config, log: Any, directory: Path) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ShapeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's loadscope with the topology shape (or ``xdist_group``) as the scope."""

        def __init__(self) -> None:
            super().__init__(config, log)
            self._groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            # First called from schedule(), once every worker has sent its collection, and a
            # worker writes its map before it sends that.
            if self._groups is None:
                self._groups = read_groups(directory)
            return self._groups.get(nodeid, nodeid)

    return ShapeScheduling()


class ShapeGrouping:
    """Registered by the plugin; the xdist hooks are optional, so it loads without xdist."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        if getattr(config, "workerinput", None) is None and groups_by_shape(config):
            config.stash[GROUPS_DIR_KEY] = Path(tempfile.mkdtemp(prefix="pytest-wedge-groups-"))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        directory = config.stash.get(GROUPS_DIR_KEY, None)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        directory = node.config.stash.get(GROUPS_DIR_KEY, None)
        if directory is not None:
            node.workerinput[WORKERINPUT_KEY] = str(directory)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        directory = config.stash.get(GROUPS_DIR_KEY, None)
        return None if directory is None else make_scheduler(config, log, directory)

    # trylast: after -k and --deselect, so the map holds the node ids the controller gets.
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        workerinput = getattr(config, "workerinput", None)
        if workerinput is None or WORKERINPUT_KEY not in workerinput:
            return
        with contextlib.suppress(OSError):  # ungrouped, not failed: see the module docstring
            write_groups(Path(workerinput[WORKERINPUT_KEY]), workerinput["workerid"], items)
