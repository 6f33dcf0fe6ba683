"""pytest-wedge: distributed-hang fault injection for PD-disaggregated LLM serving.

The package works without pytest: build a :class:`TopologySpec`, enter a :class:`Topology`
and drive faults, load and diagnostics from a script. The pytest plugin (``plugin/__init__.py``) is a
thin layer of options, markers and fixtures over the same objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_wedge.errors import WedgeError

if TYPE_CHECKING:
    from pytest_wedge.spec.topology import TopologySpec

__all__ = ["TopologySpec", "WedgeError"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # On first use: every stub, fork server and sampler imports this package first, and the
    # topology's modules (50 ms of imports) are none of theirs.
    if name == "TopologySpec":
        from pytest_wedge.spec.topology import TopologySpec

        return TopologySpec
    raise AttributeError(f"module 'pytest_wedge' has no attribute {name!r}")
