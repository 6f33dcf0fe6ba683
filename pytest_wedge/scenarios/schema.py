"""Reading a scenario file: typed access to TOML tables with errors that name file and key.

Every mistake in a scenario file becomes a ConfigError naming the file, the key path (such as
``faults[0].component``), what was expected and what was found.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_wedge.errors import ConfigError


class TableReader:
    """Reads one table of a file, recording the key path for error messages."""

    def __init__(self, path: Path, table: Mapping[str, Any], where: str) -> None:
        self.path, self.table, self.where = path, dict(table), where

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, expected: str, found: object) -> ConfigError:
        return ConfigError(
            f"Bad scenario file {self.path.name}: key {self._key(key)}",
            facts={
                "file": self.path,
                "key": self._key(key),
                "expected": expected,
                "found": repr(found),
            },
            fix=f"edit {self.path}; the format is in docs/writing-a-hang-test.md",
        )

    def take(
        self, key: str, kind: type | tuple[type, ...], default: Any = ..., expected: str = ""
    ) -> Any:
        if key not in self.table:
            if default is ...:
                raise self.fail(key, expected or f"a {_kind_name(kind)} (required)", "nothing")
            return default
        value = self.table.pop(key)
        bad_bool = isinstance(value, bool) and bool not in _as_tuple(kind)
        if not isinstance(value, kind) or bad_bool:
            raise self.fail(key, expected or f"a {_kind_name(kind)}", value)
        if kind == NUMBER and not 0 <= typing.cast(float, value) < math.inf:
            # Every number read here is seconds: nan or a negative one would turn a bound off.
            raise self.fail(key, "a finite number of seconds >= 0", value)
        return value

    def sub(self, key: str, *, required: bool = False) -> TableReader:
        table = self.take(key, dict, ... if required else {}, "a table")
        return TableReader(self.path, table, self._key(key))

    def only(self, *keys: str) -> TableReader:
        """Fail on an unknown key first: a typo is the mistake to report, not the key it hid."""
        for key, value in self.table.items():
            if key not in keys:
                raise self.fail(key, f"one of {', '.join(keys)}", value)
        return self

    def done(self) -> None:
        if self.table:
            key = next(iter(self.table))
            raise self.fail(key, "no such key here", self.table[key])

    def entries(self, key: str) -> list[TableReader]:
        """A list of tables (``[[faults]]``), each read with its index in the key path."""
        items = self.take(key, list, [])
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.fail(f"{key}[{i}]", "a table", item)
        return [
            TableReader(self.path, item, self._key(f"{key}[{i}]")) for i, item in enumerate(items)
        ]


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        int: "integer",
        float: "number",
        str: "string",
        bool: "boolean",
        list: "list",
        dict: "table",
    }
    return " or ".join(names.get(k, k.__name__) for k in _as_tuple(kind))


NUMBER = (int, float)


def matches_hint(value: Any, hint: Any) -> bool:
    """Whether a TOML value fits a constructor's type hint (the hints load classes use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(matches_hint(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is not None:
        return isinstance(value, dict if origin in (dict, Mapping) else origin)
    return isinstance(value, hint)
