"""What runs, as pure data: the topology, its components, links, workers and the marker's keywords.

Below ``runtime/``: nothing here does I/O or imports an HTTP client. The running topology is
``topology/``.
"""

from pytest_wedge.spec.names import validate_component_name, validate_link_name
from pytest_wedge.spec.topology import (
    LOOPBACK,
    ComponentSpec,
    Executables,
    LinkSpec,
    PortPlan,
    StubOptions,
    TopologySpec,
    render_components,
)

__all__ = [
    "LOOPBACK",
    "ComponentSpec",
    "Executables",
    "LinkSpec",
    "PortPlan",
    "StubOptions",
    "TopologySpec",
    "render_components",
    "validate_component_name",
    "validate_link_name",
]
