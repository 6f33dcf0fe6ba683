"""The few pieces of Markdown the reference pages are made of."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pytest_wedge.reference.introspect import Entry

GENERATED = (
    "<!-- Generated from the code by `pytest-wedge reference` (`make docs`). Do not edit: "
    "change the code and run it again. -->"
)


# Docstrings are reST: ``code`` and :meth:`name`; Markdown has one backtick and no roles.
_ROLE = re.compile(r":(?:meth|class|func|attr|mod|data):`~?([^`]+)`")


def prose(docstring: str) -> str:
    """A docstring as Markdown text."""
    return _ROLE.sub(r"`\1`", docstring).replace("``", "`")


def cell(text: str) -> str:
    """One table cell: a pipe would end the cell and a newline the row."""
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    return f"`{text}`" if text else ""


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def entry_table(entries: Iterable[Entry]) -> list[str]:
    """Name, type, default and meaning: one row per field or option."""
    rows = [(code(e.name), code(e.type), code(e.default), prose(e.meaning)) for e in entries]
    return table(("name", "type", "default", "meaning"), rows)


def page(title: str, intro: str, body: list[str]) -> str:
    return "\n".join([GENERATED, "", f"# {title}", "", intro, "", *body]).rstrip() + "\n"
