"""What the out-of-process sampler reads, as plain JSON data, and a stand-in topology over it.

The sampler (``evidence/sampler.py``) runs in its own interpreter, so it cannot hold the
:class:`~pytest_wedge.topology.running.Topology`: that owns processes, clients and locks. It
gets a :class:`ProbeTarget` instead: every address the probe's fetches use, which stay fixed
for the life of a topology (ports are planned before start, restarts keep them). The runtime's
own view of its components (PIDs, paused or not) is *not* here: it changes under the test and
only the test process knows it, so the probe adds it to each sample on arrival.

:class:`TargetTopology` answers the few attributes the snapshot functions and the link meter
read of a topology (``spec`` names, ``stubs``, ``links`` and their listen ports,
``toxiproxy``, the router's URLs, ``worker_url``, ``plan.bootstrap``), so one sampling function
serves both sides.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology


@dataclass(frozen=True)
class LinkTarget:
    listen: str  # host:port, the client side of the proxy
    proxy: str  # Toxiproxy's name for it
    target: str  # the component behind it


@dataclass(frozen=True)
class ProbeTarget:
    prefill: list[str]
    decode: list[str]
    stubs: dict[str, str]  # name -> control API base URL
    links: dict[str, LinkTarget]
    toxiproxy_url: str
    router_url: str
    router_metrics_url: str
    workers: dict[str, str]  # name -> its real port's URL
    bootstrap: dict[str, int] = field(default_factory=dict)
    router_kind: str = "smg"  # which metrics the router keeps (routers/adapters.py)

    @classmethod
    def of(cls, topology: Topology) -> ProbeTarget:
        spec = topology.spec
        names = [*spec.prefill_names, *spec.decode_names]
        return cls(
            prefill=list(spec.prefill_names),
            decode=list(spec.decode_names),
            stubs={name: stub.base_url for name, stub in topology.stubs.items()},
            links={
                name: LinkTarget(link.listen, link.proxy, link.spec.target)
                for name, link in topology.links.items()
            },
            toxiproxy_url=topology.toxiproxy.base_url,
            router_url=topology.router_url,
            router_metrics_url=topology.router_metrics_url,
            workers={name: topology.worker_url(name) for name in names},
            bootstrap=dict(topology.plan.bootstrap) if topology.plan is not None else {},
            router_kind=spec.router.kind,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeTarget:
        links = {name: LinkTarget(**link) for name, link in data["links"].items()}
        return cls(**{**data, "links": links})


# -- the stand-in: attribute names as Topology has them -----------------------------------------


@dataclass(frozen=True)
class _Router:
    kind: str


@dataclass(frozen=True)
class _Spec:
    prefill_names: list[str]
    decode_names: list[str]
    router: _Router


@dataclass(frozen=True)
class _Stub:
    base_url: str


@dataclass(frozen=True)
class _LinkSpec:
    target: str


@dataclass(frozen=True)
class _Link:
    listen: str
    proxy: str
    spec: _LinkSpec

    @property
    def listen_port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


@dataclass(frozen=True)
class _Toxiproxy:
    base_url: str


@dataclass(frozen=True)
class _Plan:
    bootstrap: dict[str, int]


class TargetTopology:
    """A read-only topology over a :class:`ProbeTarget`: addresses only, no runtime."""

    def __init__(self, target: ProbeTarget) -> None:
        self.target = target
        self.spec = _Spec(target.prefill, target.decode, _Router(target.router_kind))
        self.stubs = {name: _Stub(url) for name, url in target.stubs.items()}
        self.links = {
            name: _Link(link.listen, link.proxy, _LinkSpec(link.target))
            for name, link in target.links.items()
        }
        self.toxiproxy = _Toxiproxy(target.toxiproxy_url)
        self.router_url = target.router_url
        self.router_metrics_url = target.router_metrics_url
        self.plan = _Plan(target.bootstrap)

    def worker_url(self, name: str) -> str:
        return self.target.workers[name]

    def as_topology(self) -> Topology:
        """For the snapshot functions' signatures: they read only the attributes above."""
        return cast("Topology", self)
