"""pytest-wedge: distributed-hang fault injection for PD-disaggregated LLM serving.

The package works without pytest: build a :class:`TopologySpec`, enter a :class:`Topology`
and drive faults, load and diagnostics from a script. The pytest plugin (``plugin.py``) is a
thin layer of options, markers and fixtures over the same objects.
"""

from pytest_wedge.errors import WedgeError
from pytest_wedge.topology.spec import TopologySpec

__all__ = ["TopologySpec", "WedgeError"]
__version__ = "0.1.0"
