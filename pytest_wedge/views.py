"""The narrow views that diagnostics and watchdogs take instead of the ``Wedge`` handle.

The handle (``handle.py``) sits above them and satisfies these protocols structurally, so
nothing below it ever imports it, and a script can hand them any object with the same parts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pytest_wedge.faults.fault import FaultSet
    from pytest_wedge.load.client_ledger import ClientLedger
    from pytest_wedge.topology.running import Topology


class Scene(Protocol):
    """A running topology and the client ledger of the requests sent into it."""

    @property
    def topology(self) -> Topology: ...

    @property
    def ledger(self) -> ClientLedger: ...


class ActiveScene(Scene, Protocol):
    """A scene whose faults can be applied: what a watchdog that acts (restarts) needs."""

    @property
    def faults(self) -> FaultSet: ...
