"""``pytest-wedge docs [NAME]``: the user docs, which ship inside the package, listed or printed,
so every hint can name a page that a pip user has."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import TextIO

from pytest_wedge.errors import ConfigError


def docs_dir() -> Path:
    """The docs: the package's ``docs`` folder when installed from a wheel; in a checkout (or an
    editable install) the project's top-level ``docs/``, the one copy the wheel is built from."""
    package = Path(__file__).resolve().parents[1]
    beside = package.parent
    if (beside / "pyproject.toml").is_file() and (beside / "docs").is_dir():
        return beside / "docs"
    return package / "docs"


def pages(root: Path | None = None) -> dict[str, Path]:
    """Page name (``writing-a-hang-test``, ``reference/faults``) -> its file."""
    root = root or docs_dir()
    found = sorted(root.glob("*.md")) + sorted(root.glob("reference/*.md"))
    return {path.relative_to(root).with_suffix("").as_posix(): path for path in found}


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def run_docs(name: str | None, out: TextIO = sys.stdout) -> int:
    found = pages()
    if name is None:
        width = max((len(n) for n in found), default=0)
        print(f"pytest-wedge docs ({docs_dir()}):", file=out)
        for page, path in found.items():
            print(f"  {page.ljust(width)}  {_title(path)}", file=out)
        print("print one with `pytest-wedge docs NAME`", file=out)
        return 0
    wanted = name.removesuffix(".md")
    if wanted not in found:
        facts: dict[str, object] = {"known": ", ".join(found)}
        close = difflib.get_close_matches(wanted, list(found), n=1, cutoff=0.5)
        if close:
            facts = {"did you mean": close[0], **facts}
        raise ConfigError(
            f"No doc named {name!r}", facts=facts, fix="run `pytest-wedge docs` to list them"
        )
    out.write(found[wanted].read_text(encoding="utf-8"))
    return 0
