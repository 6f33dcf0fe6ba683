"""What a watchdog does once its detector fires: a fault's own act (``Restart``, ``CoRestart``,
``Kill``), aborting the oldest request of an origin, or running a command. Each returns what
it did, in words, for the watchdog's row."""

from __future__ import annotations

import os
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_wedge.faults.fault import Fault
from pytest_wedge.load.chat_request import abort_in_flight
from pytest_wedge.spec.component import check_field_types

if TYPE_CHECKING:
    from pytest_wedge.views import Scene


class WatchdogAction(ABC):
    """An action that is not a fault: it returns what it did."""

    @abstractmethod
    def act(self, scene: Scene) -> str: ...

    @abstractmethod
    def describe(self) -> str: ...


# A fault acts through its ``apply`` and is not recorded as an injected fault: a watchdog's
# restart is the cure, not part of the wedge.
Action = Fault | WatchdogAction


def run_action(action: Action, scene: Scene) -> str:
    """Do ``action`` on ``scene``; what was done."""
    if isinstance(action, Fault):
        action.apply(scene.topology)
        return f"{action.describe()} done"
    return action.act(scene)


@dataclass(frozen=True)
class AbortOldest(WatchdogAction):
    """Abort the oldest sent, unfinished request of ``origin`` as its client would: the
    connection closes, and the record ends ``aborted``."""

    origin: str = "harness"

    def __post_init__(self) -> None:
        check_field_types(self)

    def describe(self) -> str:
        return f"abort the oldest {self.origin} request"

    def act(self, scene: Scene) -> str:
        sent = [r for r in scene.ledger.by_origin(self.origin).pending() if r.sent is not None]
        if not sent:
            return f"no {self.origin} request in flight to abort"
        oldest = min(sent, key=lambda r: r.sent or 0.0)
        if not abort_in_flight(oldest.request_id, "aborted by a watchdog"):
            return f"{oldest.request_id} ended before it could be aborted"
        return f"aborted {oldest.request_id} (in flight for {oldest.age():.1f} s)"


def topology_env(scene: Scene) -> dict[str, str]:
    """The environment a command gets: WEDGE_URL, WEDGE_ROUTER_URL, WEDGE_<COMPONENT>_URL."""
    topology = scene.topology
    env = {**os.environ, "WEDGE_URL": topology.url, "WEDGE_ROUTER_URL": topology.router_url}
    for name in topology.stubs:
        env[f"WEDGE_{name.upper().replace('-', '_')}_URL"] = topology.worker_url(name)
    return env


@dataclass(frozen=True)
class RunCommand(WatchdogAction):
    """Run ``argv`` with the topology's addresses in its environment; a non-zero exit fails
    the action (recorded in the watchdog's row)."""

    argv: Sequence[str]
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        check_field_types(self)
        object.__setattr__(self, "argv", tuple(self.argv))

    def describe(self) -> str:
        return f"run {' '.join(self.argv)}"

    def act(self, scene: Scene) -> str:
        done = subprocess.run(
            list(self.argv),
            env=topology_env(scene),
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{self.argv[0]} exited with {done.returncode}: {done.stderr.strip()[-200:]}"
            )
        return done.stdout.strip() or f"ran {self.argv[0]}"
