"""Reading a scenario file: typed access to TOML tables with errors that name file and key.

Every mistake in a scenario file becomes a ConfigError naming the file, the key path (such as
``faults[0].component``), what was expected and what was found.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_wedge.errors import ConfigError, close_match
from pytest_wedge.spec.component import describe_hint, matches_hint


class TableReader:
    """Reads one table of a file, recording the key path for error messages."""

    def __init__(self, path: Path, table: Mapping[str, Any], where: str) -> None:
        self.path, self.table, self.where = path, dict(table), where

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(
        self,
        key: str,
        expected: str,
        found: object,
        *,
        guess: str | None = None,
        facts: Mapping[str, object] | None = None,
    ) -> ConfigError:
        """The error for ``key``; ``guess`` is the name it is most likely a typo of."""
        return ConfigError(
            f"Bad scenario file {self.path.name}: key {self._key(key)}",
            facts={
                "file": self.path,
                "key": self._key(key),
                "expected": expected,
                "found": repr(found),
                **(facts or {}),
                **({"did you mean": guess} if guess else {}),
            },
            fix=f"edit {self.path}; the format is in `pytest-wedge docs writing-a-hang-test`",
        )

    def take(self, key: str, hint: Any, default: Any = ..., expected: str = "") -> Any:
        """The value of ``key``, checked against the type hint ``hint`` (the constructors'
        check); ``default`` when it is absent, and ``...`` makes it required."""
        # TOML has no None: an optional key is left out.
        expected = expected or describe_hint(hint).removesuffix(" or None")
        if key not in self.table:
            if default is ...:
                raise self.fail(key, f"{expected} (required)", "nothing")
            return default
        value = self.table.pop(key)
        if not matches_hint(value, hint):
            raise self.fail(key, expected, value)
        if matches_hint(0.5, hint) and value is not None and not 0 <= value < math.inf:
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
                raise self.fail(
                    key, f"one of {', '.join(keys)}", value, guess=close_match(key, keys)
                )
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
