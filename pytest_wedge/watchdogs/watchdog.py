"""Watchdog kinds: the router's timeouts (``router_args``), the stubs' engine watchdogs, and a
user's own (a callable or a command). Each reports whether and when it fired.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_wedge.errors import ConfigError
from pytest_wedge.metrics_text import metric_value
from pytest_wedge.routers.adapters import counts_timeouts
from pytest_wedge.spec.component import check_field_types, typed
from pytest_wedge.watchdogs.actions import Action, run_action, topology_env

if TYPE_CHECKING:
    from pytest_wedge.views import Scene


# How late after ``seconds`` a client may see a router's timeout cut on a loaded machine.
CUT_SLACK_S = 1.5


@dataclass
class Firing:
    """One firing: when the detector decided (``at``) and what it saw; then, for a watchdog
    that acts, what it did, when the action started and ended, and how it went."""

    watchdog: str
    at: float
    detail: str = ""
    action: str = ""
    action_started: float | None = None
    action_ended: float | None = None
    outcome: str = ""  # "done: ...", "failed: ...", or "running" until the action returns


class Watchdog:
    """Base: ``arm`` before the wedge, ``firings`` afterwards, ``disarm`` at the end."""

    name = "watchdog"
    # What it does to healthy work when it fires there, for a false-positive verdict
    # ("cuts healthy streams longer than 2 s"); empty when there is nothing general to say.
    harms = ""
    # Whether a firing changes anything (a restart, a release, a cut), or only observes.
    acts = True
    # What it watches, for the advice when it never fires ("router timeout counters").
    signal = ""

    def fires_after_s(self) -> float | None:
        """The least time from the onset of a wedge before it can fire, when it has one."""
        return None

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
    # A router that counts no cut of this flag is read from its clients' answers instead.
    client_view: bool = False
    _baseline: float = field(default=0.0, init=False)
    _fired_at: float | None = field(default=None, init=False)
    _how: str = field(default="", init=False)
    _armed_at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        check_field_types(self)

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"router {self.flag} {self.seconds:g}"

    @property
    def signal(self) -> str:  # type: ignore[override]
        return "the router's counters " + ", ".join(metric for metric, _ in self.counters)

    def fires_after_s(self) -> float | None:
        return self.seconds

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
        self._fired_at, self._how, self._armed_at = None, "", time.time()

    def firings(self, scene: Scene) -> list[Firing]:
        if self._fired_at is not None:
            return [Firing(self.name, self._fired_at, self._how)]
        if counts_timeouts(scene.topology.spec.router.kind) or not self.client_view:
            if self._count(scene) > self._baseline:
                self._fired_at, self._how = time.time(), "counted by the router"
        elif cut := self._cut_as_clients_saw_it(scene):
            self._fired_at, self._how = cut
        return [Firing(self.name, self._fired_at, self._how)] if self._fired_at else []

    def _cut_as_clients_saw_it(self, scene: Scene) -> tuple[float, str] | None:
        """A router that counts no timeout shows it to its clients only: requests that ended
        without success ``seconds`` after they were sent (a stream without [DONE], or an
        error status); the router's clock starts a little after the client's."""
        cut = [
            r
            for r in scene.ledger.records
            if r.sent is not None
            and r.finished is not None
            and r.sent >= self._armed_at
            and r.state not in ("ok", "aborted")
            and -0.25 <= r.finished - r.sent - self.seconds <= CUT_SLACK_S
        ]
        if not cut:
            return None
        first = min(cut, key=lambda r: r.finished or 0.0)
        return first.finished or 0.0, (
            f"seen by the client: {len(cut)} requests ended without success "
            f"{self.seconds:g} s after they were sent (e.g. {first.request_id}: {first.error})"
        )


@typed
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
        client_view=True,
    )


@typed
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

    def __post_init__(self) -> None:
        check_field_types(self)

    @property
    def name(self) -> str:  # type: ignore[override]
        kind = self.setting.removesuffix("_s").replace("_", "-")
        return f"{self.target} {kind} watchdog {self.after_s:g}s"

    @property
    def signal(self) -> str:  # type: ignore[override]
        return f"{self.target}'s own {self.setting.removesuffix('_s').replace('_', ' ')} timer"

    def fires_after_s(self) -> float | None:
        return self.after_s

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


@typed
def InflightPinWatchdog(after_s: float, target: str = "prefill-0") -> StubWatchdog:
    """Releases prefill requests pinned in flight longer than ``after_s`` (incident 3)."""
    return StubWatchdog("inflight_pin_s", after_s, target)


@typed
def TransferTimeoutWatchdog(after_s: float, target: str = "decode-0") -> StubWatchdog:
    """Fails decode requests that wait for their KV longer than ``after_s``."""
    return StubWatchdog("transfer_timeout_s", after_s, target)


@dataclass
class CallableWatchdog(Watchdog):
    """A watchdog as a detector and an action. ``check(scene)`` runs every ``interval_s`` on
    its own thread and returns what it saw, or None. With an ``action`` (a fault such as
    ``Restart("decode-0")``, or ``AbortOldest``, ``RunCommand``), a firing is recorded the
    moment ``check`` decides, and the action then runs with its start, end and outcome
    recorded beside it. Without one, ``check`` may act itself and return what it did
    (``observes=True``: it only reports).

    ``firings`` and ``errors`` cover the latest arming only. Each arming gets its own thread,
    stop event and lists, so a thread from an earlier arming (say, one still inside a slow
    ``check`` when ``disarm`` gave up waiting) can neither run again nor report into them.
    """

    check: Callable[[Any], str | None]  # gets the object the watchdog was armed with
    interval_s: float = 0.2
    label: str = "user watchdog"
    action: Action | None = None
    observes: bool = False  # True: without an action, its check changes nothing
    watches: str = ""  # what the check reads, for the advice when it never fires
    after_s: float | None = None  # how long a wedge must last before the check can fire
    _fired: list[Firing] = field(default_factory=list, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    # Held while a check or an action runs: a reader waits for it, so a firing whose action
    # cleared the wedge is not read as silent while the check is still returning.
    _busy: threading.Lock = field(default_factory=threading.Lock, init=False)
    errors: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        check_field_types(self)

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.label

    @property
    def acts(self) -> bool:  # type: ignore[override]
        return self.action is not None or not self.observes

    @property
    def signal(self) -> str:  # type: ignore[override]
        return self.watches

    def fires_after_s(self) -> float | None:
        return self.after_s

    def describe(self) -> str:
        return f"{self.label} -> {self.action.describe()}" if self.action else self.label

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
            with self._busy:
                try:
                    seen = self.check(scene)
                except Exception as exc:  # a broken watchdog is reported, not fatal to the test
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if not seen:
                    continue
                firing = Firing(self.label, time.time(), seen)
                fired.append(firing)
                if self.action is not None:
                    self._act(scene, firing, self.action)

    @staticmethod
    def _act(scene: Scene, firing: Firing, action: Action) -> None:
        firing.action, firing.outcome = action.describe(), "running"
        firing.action_started = time.time()
        try:
            firing.outcome = f"done: {run_action(action, scene)}"
        except Exception as exc:  # recorded in its row: the wedge then stays
            firing.outcome = f"failed: {type(exc).__name__}: {exc}"
        firing.action_ended = time.time()

    def firings(self, scene: Scene) -> list[Firing]:
        # A check or action under way may be the one that fired: wait for it (bounded).
        if self._busy.acquire(timeout=10):
            self._busy.release()
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


@typed
def CommandWatchdog(
    argv: Sequence[str], interval_s: float = 0.5, action: Action | None = None
) -> CallableWatchdog:
    """An external program as a watchdog. It gets the topology's addresses in its environment
    (WEDGE_URL, WEDGE_ROUTER_URL, WEDGE_<COMPONENT>_URL) and prints what it saw or did, if
    anything: with an ``action``, its output is the detector's decision."""

    def run(scene: Scene) -> str | None:
        done = subprocess.run(
            list(argv), env=topology_env(scene), capture_output=True, text=True, timeout=30
        )
        return done.stdout.strip() or None

    watches = f"the output of {' '.join(argv)}"
    label = f"command {' '.join(argv)}"
    return CallableWatchdog(run, interval_s, label=label, action=action, watches=watches)


def watchdog_report(scene: Scene, watchdogs: Sequence[Watchdog]) -> list[dict[str, Any]]:
    """One row per armed watchdog: whether and when its detector fired, whether it acts, and
    its first firing's action with start, end and outcome."""
    rows: list[dict[str, Any]] = []
    for dog in watchdogs:
        about = {
            "watchdog": dog.describe(),
            "acts": dog.acts,
            "signal": dog.signal,
            "fires_after_s": dog.fires_after_s(),
        }
        try:
            fired = dog.firings(scene)
        except Exception as exc:
            rows.append({**about, "fired": None, "error": str(exc)})
            continue
        first = fired[0] if fired else Firing(dog.describe(), 0.0)
        rows.append(
            {
                **about,
                "fired": bool(fired),
                "first_at": first.at if fired else None,
                "count": len(fired),
                "detail": first.detail,
                "action": first.action,
                "action_started": first.action_started,
                "action_ended": first.action_ended,
                "outcome": first.outcome,
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
