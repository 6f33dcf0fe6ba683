"""Watchdog kinds: the router's timeouts (``router_args``), the stubs' engine watchdogs, and a
user's own (a callable or a command). Each reports whether and when it fired.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_wedge.errors import ConfigError
from pytest_wedge.metrics_text import metric_value

if TYPE_CHECKING:
    from pytest_wedge.views import Scene


@dataclass
class Firing:
    watchdog: str
    at: float
    detail: str = ""


class Watchdog:
    """Base: ``arm`` before the wedge, ``firings`` afterwards, ``disarm`` at the end."""

    name = "watchdog"
    # What it does to healthy work when it fires there, for a false-positive verdict
    # ("cuts healthy streams longer than 2 s"); empty when there is nothing general to say.
    harms = ""

    def arm(self, scene: Scene) -> None:
        """Switch the watchdog on and take whatever baseline ``firings`` compares against."""

    def firings(self, scene: Scene) -> list[Firing]:
        raise NotImplementedError

    def disarm(self, scene: Scene) -> None:
        """Switch it off again (idempotent)."""

    def describe(self) -> str:
        return self.name


def _router_metrics(scene: Scene) -> str:
    import httpx

    try:
        return scene.topology.router_metrics(timeout_s=1.0)
    except httpx.HTTPError:
        return ""  # a paused router answers nothing; its counters are read again later


@dataclass
class RouterFlag(Watchdog):
    """A router timeout armed by its flag in ``router_args``; it fires when the router's
    counters of what that timeout produces go up."""

    flag: str
    seconds: float
    counters: Sequence[tuple[str, dict[str, str]]] = ()
    harms: str = ""
    _baseline: float = field(default=0.0, init=False)
    _fired_at: float | None = field(default=None, init=False)

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"router {self.flag} {self.seconds:g}"

    def _count(self, scene: Scene) -> float:
        text = _router_metrics(scene)
        return sum(metric_value(text, metric, **labels) for metric, labels in self.counters)

    def arm(self, scene: Scene) -> None:
        args = list(scene.topology.spec.router_args)
        if self.flag not in args or args[args.index(self.flag) + 1] != f"{self.seconds:g}":
            raise ConfigError(
                f"The router was not started with {self.flag} {self.seconds:g}",
                facts={"router_args": " ".join(args) or "(none)"},
                fix=f'add router_args=["{self.flag}", "{self.seconds:g}"] to the wedge marker',
            )
        self._baseline = self._count(scene)
        self._fired_at = None

    def firings(self, scene: Scene) -> list[Firing]:
        if self._fired_at is None and self._count(scene) > self._baseline:
            self._fired_at = time.time()
        return [Firing(self.name, self._fired_at)] if self._fired_at else []


def RequestTimeout(seconds: float) -> RouterFlag:
    """smg's ``--request-timeout-secs``: a hard total cap per upstream call (it also cuts
    healthy streams longer than N). Fires when the router counts timeouts or transport errors."""
    return RouterFlag(
        "--request-timeout-secs",
        seconds,
        counters=(
            ("smg_worker_errors_total", {"error_type": "timeout"}),
            ("smg_worker_retries_exhausted_total", {}),
        ),
        harms=f"cuts healthy streams longer than {seconds:g} s",
    )


def StreamBodyStallTimeout(seconds: float) -> RouterFlag:
    """smg's ``--stream-body-stall-timeout-secs``: bounds a *client's upload* only, so it
    never clears a stalled decode. Fires when the router answers 408 request_body_stalled."""
    return RouterFlag(
        "--stream-body-stall-timeout-secs",
        seconds,
        counters=(("smg_http_responses_total", {"error_code": "request_body_stalled"}),),
    )


@dataclass
class StubWatchdog(Watchdog):
    """An engine watchdog inside a stub, switched on through its control API."""

    setting: str  # "inflight_pin_s" or "transfer_timeout_s"
    after_s: float
    target: str
    _armed_at: float = field(default=0.0, init=False)

    @property
    def name(self) -> str:  # type: ignore[override]
        kind = self.setting.removesuffix("_s").replace("_", "-")
        return f"{self.target} {kind} watchdog {self.after_s:g}s"

    def arm(self, scene: Scene) -> None:
        self._armed_at = time.time()
        scene.topology.stub(self.target).set_watchdogs(**{self.setting: self.after_s})

    def firings(self, scene: Scene) -> list[Firing]:
        kind = self.setting.removesuffix("_s")
        return [
            Firing(self.name, f["at"], f"released {f.get('request_id')}")
            for f in scene.topology.stub(self.target).state()["firings"]
            if f["watchdog"] == kind and f["at"] >= self._armed_at
        ]

    def disarm(self, scene: Scene) -> None:
        if scene.topology.runtime.state(self.target) == "running":
            scene.topology.stub(self.target).set_watchdogs(**{self.setting: None})


def InflightPinWatchdog(after_s: float, target: str = "prefill-0") -> StubWatchdog:
    """Releases prefill requests pinned in flight longer than ``after_s`` (incident 3)."""
    return StubWatchdog("inflight_pin_s", after_s, target)


def TransferTimeoutWatchdog(after_s: float, target: str = "decode-0") -> StubWatchdog:
    """Fails decode requests that wait for their KV longer than ``after_s``."""
    return StubWatchdog("transfer_timeout_s", after_s, target)


@dataclass
class CallableWatchdog(Watchdog):
    """A user's watchdog: ``check(wedge)`` runs every ``interval_s`` on its own thread and
    returns a description of what it did, or None when it did nothing.

    ``firings`` and ``errors`` cover the latest arming only. Each arming gets its own thread,
    stop event and lists, so a thread from an earlier arming (say, one still inside a slow
    ``check`` when ``disarm`` gave up waiting) can neither run again nor report into them.
    """

    check: Callable[[Any], str | None]  # gets the object the watchdog was armed with
    interval_s: float = 0.2
    label: str = "user watchdog"
    _fired: list[Firing] = field(default_factory=list, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    errors: list[str] = field(default_factory=list, init=False)

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.label

    def arm(self, scene: Scene) -> None:
        self._halt()  # arming twice must not leave the first thread checking
        self._stop = threading.Event()
        self._fired = []
        self.errors = []
        self._thread = threading.Thread(
            target=self._loop,
            args=(scene, self._stop, self._fired, self.errors),
            daemon=True,
            name=f"wedge-{self.label}",
        )
        self._thread.start()

    def _loop(
        self, scene: Scene, stop: threading.Event, fired: list[Firing], errors: list[str]
    ) -> None:
        while not stop.wait(self.interval_s):
            try:
                action = self.check(scene)
            except Exception as exc:  # a broken watchdog is reported, not fatal to the test
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            if action:
                fired.append(Firing(self.label, time.time(), action))

    def firings(self, scene: Scene) -> list[Firing]:
        return list(self._fired)

    def disarm(self, scene: Scene) -> None:
        self._halt()

    def _halt(self) -> None:
        self._stop.set()
        # The join is bounded so a check stuck in I/O cannot hang teardown; its stop event is
        # set, so it never checks again. A check that disarms its own watchdog skips the join.
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None


def CommandWatchdog(argv: Sequence[str], interval_s: float = 0.5) -> CallableWatchdog:
    """An external program as a watchdog. It gets the topology's addresses in its environment
    (WEDGE_URL, WEDGE_ROUTER_URL, WEDGE_<COMPONENT>_URL) and prints what it did, if anything."""

    def run(scene: Scene) -> str | None:
        topology = scene.topology
        env = {**os.environ, "WEDGE_URL": topology.url, "WEDGE_ROUTER_URL": topology.router_url}
        for name in topology.stubs:
            env[f"WEDGE_{name.upper().replace('-', '_')}_URL"] = topology.worker_url(name)
        done = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=30)
        return done.stdout.strip() or None

    return CallableWatchdog(run, interval_s, label=f"command {' '.join(argv)}")


def watchdog_report(scene: Scene, watchdogs: Sequence[Watchdog]) -> list[dict[str, Any]]:
    """One line per armed watchdog: fired or not, and when."""
    rows: list[dict[str, Any]] = []
    for dog in watchdogs:
        try:
            fired = dog.firings(scene)
        except Exception as exc:
            rows.append({"watchdog": dog.describe(), "fired": None, "error": str(exc)})
            continue
        rows.append(
            {
                "watchdog": dog.describe(),
                "fired": bool(fired),
                "first_at": fired[0].at if fired else None,
                "count": len(fired),
                "detail": fired[0].detail if fired else "",
            }
        )
    return rows


@contextlib.contextmanager
def armed(scene: Scene, watchdogs: Sequence[Watchdog]) -> Iterator[None]:
    """Arm ``watchdogs`` for the block; disarm those that armed, whatever happens."""
    done: list[Watchdog] = []
    try:
        for dog in watchdogs:
            dog.arm(scene)
            done.append(dog)
        yield
    finally:
        for dog in done:
            with contextlib.suppress(Exception):
                dog.disarm(scene)
