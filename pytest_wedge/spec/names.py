"""Checking the names a test gives components and links, against its topology's spec."""

from __future__ import annotations

import re

from pytest_wedge.errors import ConfigError
from pytest_wedge.spec.topology import TopologySpec

_COMPONENT_NAME = re.compile(r"^(router|client|toxiproxy|prefill-\d+|decode-\d+)$")


def validate_component_name(name: str, spec: TopologySpec) -> None:
    """Raise a ConfigError naming the known components when ``name`` is not one of them."""
    known = spec.component_names
    if name not in known or not _COMPONENT_NAME.match(name):
        raise ConfigError(
            f"Unknown component {name!r}",
            facts={"known components": ", ".join(known)},
            fix=f"use one of: {', '.join(known)}",
        )


def validate_link_name(name: str, spec: TopologySpec) -> None:
    known = spec.link_names()
    if name not in known:
        raise ConfigError(
            f"Unknown link {name!r}",
            facts={"known links": ", ".join(known)},
            fix=f"use one of: {', '.join(known)}",
        )
