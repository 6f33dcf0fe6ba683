"""The one polling loop of the package (a predicate, one deadline, one interval), so every wait
agrees on what a deadline means: the predicate runs at least once, and once more at the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pytest_wedge.errors import WedgeError

T = TypeVar("T")


@dataclass(frozen=True)
class Clock:
    """Where ``poll`` reads the time and sleeps; tests pass a fake one to run without waiting."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


MONOTONIC = Clock()


@dataclass(frozen=True)
class Polled(Generic[T]):
    """How a poll ended: the predicate's last value, whether it was truthy, and the cost."""

    value: T
    met: bool
    checks: int
    elapsed_s: float


def poll(
    predicate: Callable[[], T],
    *,
    timeout_s: float,
    interval_s: float,
    clock: Clock = MONOTONIC,
    first_interval_s: float | None = None,
) -> Polled[T]:
    """Run ``predicate`` every ``interval_s`` until it returns something truthy or ``timeout_s``
    has passed (its exceptions propagate). ``first_interval_s``: the first pause, doubled up to
    ``interval_s``. The last check starts at or after the deadline; no sleep overshoots it."""
    started = clock.now()
    deadline = started + timeout_s
    checks = 0
    pause = interval_s if first_interval_s is None else min(first_interval_s, interval_s)
    while True:
        checked_at = clock.now()
        value = predicate()
        checks += 1
        if value:
            return Polled(value, True, checks, clock.now() - started)
        if checked_at >= deadline:
            return Polled(value, False, checks, clock.now() - started)
        clock.sleep(max(0.0, min(pause, deadline - clock.now())))
        pause = min(2 * pause, interval_s)


class WaitTimeout(WedgeError, AssertionError):
    """A condition did not hold before its deadline. An AssertionError, so tests fail plainly."""


def wait_for(
    condition: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.02,
    describe: Callable[[], str] | None = None,
    clock: Clock = MONOTONIC,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that; on timeout raise
    :class:`WaitTimeout` naming ``what`` and the state ``describe()`` reports."""
    polled = poll(condition, timeout_s=timeout_s, interval_s=interval_s, clock=clock)
    if polled.met:
        return polled.value
    facts = {"waited": f"{timeout_s:.1f} s", "checks": polled.checks}
    if describe is not None:
        facts["last seen"] = describe()
    raise WaitTimeout(
        f"Timed out waiting for {what}",
        facts=facts,
        fix="see the wedge report for where requests are held",
    )


def observe(
    sample: Callable[[], T],
    *,
    for_s: float,
    interval_s: float = 0.05,
    clock: Clock = MONOTONIC,
) -> list[T]:
    """Sample ``sample`` every ``interval_s`` over a fixed window of ``for_s`` (a measurement,
    not a wait): from the window's start up to and including its end."""
    values: list[T] = []

    def take_sample() -> bool:
        values.append(sample())
        return False  # never "met": the window always runs to its end

    poll(take_sample, timeout_s=for_s, interval_s=interval_s, clock=clock)
    return values


def in_background(function: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """``function(*args, **kwargs)`` in a daemon thread of its own; its result, or what it
    raised, in the returned future (a wait that overlaps other work)."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(function(*args, **kwargs))
        except BaseException as exc:  # the waiter gets it from the future
            future.set_exception(exc)

    name = f"wedge-{getattr(function, '__name__', 'background')}"
    threading.Thread(target=run, name=name, daemon=True).start()
    return future
