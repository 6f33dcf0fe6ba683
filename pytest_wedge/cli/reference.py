"""``pytest-wedge reference``: write the pages under docs/reference/, or (``--check``) exit 1
naming the ones that differ from what the code renders."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from pytest_wedge.reference import render_pages

# `python -m` from the repository root renders that checkout's code, whatever is installed.
REGENERATE = "python -m pytest_wedge.cli reference (or `make docs`) from the repository root"


def stale_pages(out: Path, pages: dict[str, str] | None = None) -> list[str]:
    """The pages under ``out`` that are missing or differ from the code's rendering."""
    rendered = render_pages() if pages is None else pages
    stale = []
    for name, text in rendered.items():
        path = out / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def run_reference(out: Path, *, check: bool, stream: TextIO | None = None) -> int:
    """Write the pages into ``out``, or with ``check`` compare them (1 when one is stale)."""
    said = stream or sys.stdout  # looked up per call: a caller may have redirected it
    pages = render_pages()
    if check:
        stale = stale_pages(out, pages)
        if stale:
            print(
                f"stale reference pages in {out}: {', '.join(stale)}. "
                f"To fix this: run {REGENERATE} and commit the pages.",
                file=stream or sys.stderr,
            )
            return 1
        print(f"the reference pages in {out} match the code", file=said)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (out / name).write_text(text, encoding="utf-8")
        print(f"wrote {out / name}", file=said)
    return 0
