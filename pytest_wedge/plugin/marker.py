"""The ``wedge`` marker: ``@pytest.mark.wedge(prefill=1, decode=1, router_args=[...], ...)``.

Its keywords are those of :func:`pytest_wedge.spec.marker_args.wedge`, shared with
``wedge_factory`` and with the ``[topology]`` table of scenario files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_wedge.spec.marker_args import MarkerArgs, parse_keywords, wedge


def parse_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> MarkerArgs:
    """Parse ``@pytest.mark.wedge(...)``; any misuse becomes a ConfigError naming the fix."""
    return parse_keywords(args, kwargs)


__all__ = ["MarkerArgs", "parse_marker", "wedge"]
