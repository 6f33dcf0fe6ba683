"""One polling loop with one deadline, for tests and watchdog checks (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pytest_wedge.errors import WedgeError

T = TypeVar("T")


class WaitTimeout(WedgeError, AssertionError):
    """A condition did not hold before its deadline. An AssertionError, so tests fail plainly."""


def wait_for(
    condition: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.02,
    describe: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy; return that value.

    On timeout, raise :class:`WaitTimeout` naming ``what`` was awaited and, if given, the
    state ``describe()`` reports at that moment.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            facts = {"waited": f"{timeout_s:.1f} s"}
            if describe is not None:
                facts["last seen"] = describe()
            raise WaitTimeout(f"Timed out waiting for {what}", facts=facts,
                              fix="see the wedge report for where requests are held")  # fmt: skip
        time.sleep(interval_s)


def observe(sample: Callable[[], T], *, for_s: float, interval_s: float = 0.05) -> list[T]:
    """Sample ``sample`` repeatedly over a fixed observation window (a measurement, not a wait)."""
    values: list[T] = []
    end = time.monotonic() + for_s
    while time.monotonic() < end:
        values.append(sample())
        time.sleep(interval_s)
    return values
