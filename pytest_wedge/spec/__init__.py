"""The topology: what runs (``spec``, pure data), where (``ports``), and the running thing.

``TopologySpec`` and its parts are re-exported here; ``Topology`` (the running topology),
``WedgeSession`` and the Toxiproxy client live in their own modules and are imported from
there, so that reading a spec never imports an HTTP client.
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
