"""Network faults on a link, in Toxiproxy's own terms (one toxic each, plus ``Down``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pytest_wedge.errors import ConfigError
from pytest_wedge.faults.fault import Fault, FaultNotApplied
from pytest_wedge.faults.registry import register
from pytest_wedge.spec.names import validate_link_name

if TYPE_CHECKING:
    from pytest_wedge.topology.running import Topology

Stream = Literal["upstream", "downstream"]


def _proxy(topology: Topology, link: str) -> str:
    validate_link_name(link, topology.spec)
    return topology.links[link].proxy


@dataclass(frozen=True, kw_only=True)
class Toxic(Fault):
    """A Toxiproxy toxic on the link ``target``. ``upstream`` = client->server, ``downstream``
    = back. Each instance is its own toxic, so two of one type on one link both apply."""

    stream: Stream = "downstream"
    """The direction it acts on: ``upstream`` (towards the server) or ``downstream`` (back)."""
    toxicity: float = 1.0
    """The probability, 0 to 1, that it applies to a connection (drawn per connection)."""
    toxic_type: ClassVar[str]

    def __post_init__(self) -> None:
        super().__post_init__()  # the types, ``stream`` among them (a Literal)
        if not 0.0 <= self.toxicity <= 1.0:
            raise ConfigError(f"Bad toxicity {self.toxicity!r}", fix="use a value in [0, 1]")

    @property
    def toxic_name(self) -> str:
        # Toxiproxy refuses a second toxic of one name on a proxy (409): the instance id
        # lets equal faults stack, and each revert removes only its own toxic.
        return f"wedge_{self.toxic_type}_{self.stream}_{self.instance_id}"

    # Our field name -> Toxiproxy's attribute name (or override attributes()).
    attribute_names: ClassVar[dict[str, str]] = {}

    def attributes(self) -> dict[str, Any]:
        return {theirs: getattr(self, ours) for ours, theirs in self.attribute_names.items()}

    def payload(self) -> dict[str, Any]:
        """The toxic as Toxiproxy's API takes it."""
        return {
            "name": self.toxic_name,
            "type": self.toxic_type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": self.attributes(),
        }

    def apply(self, topology: Topology) -> None:
        proxy = _proxy(topology, self.target)  # validates the link name first
        topology.toxiproxy.add_toxic(proxy, self.payload())

    def revert(self, topology: Topology) -> None:
        topology.toxiproxy.remove_toxic(_proxy(topology, self.target), self.toxic_name)

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        proxy = _proxy(topology, self.target)
        listed = [t.get("name") for t in topology.toxiproxy.toxics(proxy)]
        if self.toxic_name not in listed:
            raise FaultNotApplied(
                self,
                expected=f"Toxiproxy lists the toxic {self.toxic_name} on {proxy}",
                seen=f"{proxy} lists {', '.join(map(str, listed)) or 'no toxics'}",
            )
        return f"Toxiproxy lists {self.toxic_type} {self.stream} on {self.target}"


@register
@dataclass(frozen=True, kw_only=True)
class Latency(Toxic):
    """Delays every chunk of data by ``latency_ms`` plus or minus ``jitter_ms``."""

    latency_ms: int
    """The delay added to each chunk, in milliseconds."""
    jitter_ms: int = 0
    """A random spread around ``latency_ms``, in milliseconds."""
    toxic_type: ClassVar[str] = "latency"
    attribute_names: ClassVar[dict[str, str]] = {"latency_ms": "latency", "jitter_ms": "jitter"}


@register
@dataclass(frozen=True, kw_only=True)
class Bandwidth(Toxic):
    """Throttles the link to ``rate_kb_per_s``. It slows a link down; it never cuts one."""

    rate_kb_per_s: int
    """The rate, in KB/s; must be > 0 (Toxiproxy treats 0 as unlimited)."""
    toxic_type: ClassVar[str] = "bandwidth"
    attribute_names: ClassVar[dict[str, str]] = {"rate_kb_per_s": "rate"}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rate_kb_per_s <= 0:
            raise ConfigError(
                f"Bandwidth rate_kb_per_s={self.rate_kb_per_s} does not cut a link",
                facts={"why": "Toxiproxy treats rate <= 0 as unlimited"},
                fix="use Down(target=...) or Timeout(target=..., timeout_ms=0) to cut a link",
            )


@register
@dataclass(frozen=True, kw_only=True)
class SlowClose(Toxic):
    """Delays closing the connection after the other side has closed."""

    delay_ms: int
    """How long the close is delayed, in milliseconds."""
    toxic_type: ClassVar[str] = "slow_close"
    attribute_names: ClassVar[dict[str, str]] = {"delay_ms": "delay"}


@register
@dataclass(frozen=True, kw_only=True)
class Timeout(Toxic):
    """Drops all data; closes after ``timeout_ms``, or never with 0 (a black hole).

    Removing it closes the connections it held (Toxiproxy does so on purpose).
    """

    timeout_ms: int = 0
    """Close the connection after this many milliseconds; 0: never (a black hole)."""
    toxic_type: ClassVar[str] = "timeout"
    attribute_names: ClassVar[dict[str, str]] = {"timeout_ms": "timeout"}


@register
@dataclass(frozen=True, kw_only=True)
class ResetPeer(Toxic):
    """On the first data, waits ``timeout_ms`` and then resets the connection (TCP RST)."""

    timeout_ms: int = 0
    """How long to wait after the first data before the reset, in milliseconds."""
    toxic_type: ClassVar[str] = "reset_peer"
    attribute_names: ClassVar[dict[str, str]] = {"timeout_ms": "timeout"}


@register
@dataclass(frozen=True, kw_only=True)
class Slicer(Toxic):
    """Splits the data into many small writes, optionally with a delay between them."""

    average_size_bytes: int
    """The average size of one write, in bytes."""
    size_variation_bytes: int = 0
    """A random spread around ``average_size_bytes``, in bytes."""
    delay_us: int = 0
    """The pause between two writes, in microseconds."""
    toxic_type: ClassVar[str] = "slicer"
    attribute_names: ClassVar[dict[str, str]] = {
        "average_size_bytes": "average_size",
        "size_variation_bytes": "size_variation",
        "delay_us": "delay",
    }


@register
@dataclass(frozen=True, kw_only=True)
class LimitData(Toxic):
    """Passes ``bytes`` bytes of a connection, then closes it."""

    bytes: int
    """How many bytes pass before the connection is closed."""
    toxic_type: ClassVar[str] = "limit_data"
    attribute_names: ClassVar[dict[str, str]] = {"bytes": "bytes"}


@register
@dataclass(frozen=True, kw_only=True)
class Down(Fault):
    """The link refuses connections and drops the open ones (``enabled=false``, not a toxic)."""

    def apply(self, topology: Topology) -> None:
        proxy = _proxy(topology, self.target)
        topology.toxiproxy.set_enabled(proxy, False)

    def revert(self, topology: Topology) -> None:
        topology.toxiproxy.set_enabled(_proxy(topology, self.target), True)

    def verify(self, topology: Topology, applied_at: float) -> str | None:
        proxy = _proxy(topology, self.target)
        enabled = topology.toxiproxy.proxies().get(proxy, {}).get("enabled")
        if enabled is not False:
            raise FaultNotApplied(
                self, expected=f"Toxiproxy shows {proxy} disabled", seen=f"enabled={enabled}"
            )
        return f"Toxiproxy shows {self.target} disabled"
