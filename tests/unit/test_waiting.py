"""The one polling primitive: a predicate, one deadline, one interval, on a fake clock.

Every test runs on :class:`FakeClock`, whose ``sleep`` only moves the time forward, so the
counts and times asserted here are exact and no test waits for real.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from pytest_wedge.errors import ComponentStartError
from pytest_wedge.runtime.interface import wait_ready
from pytest_wedge.spec.topology import ComponentSpec
from pytest_wedge.waiting import Clock, WaitTimeout, in_background, observe, poll, wait_for


class FakeClock:
    """Time that moves only when someone sleeps (or a check is said to take a while)."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.t += seconds

    @property
    def clock(self) -> Clock:
        return Clock(now=self.now, sleep=self.sleep)


class Checks:
    """A predicate that turns truthy on its ``truthy_on``-th call; records when it ran."""

    def __init__(self, fake: FakeClock, truthy_on: int | None = None, takes_s: float = 0.0):
        self.fake = fake
        self.truthy_on = truthy_on
        self.takes_s = takes_s
        self.at: list[float] = []

    def __call__(self) -> str:
        self.at.append(self.fake.t)
        self.fake.t += self.takes_s
        return "ok" if len(self.at) == self.truthy_on else ""


def test_poll_returns_the_first_truthy_value_without_sleeping_after_it() -> None:
    fake = FakeClock()
    checks = Checks(fake, truthy_on=3)
    polled = poll(checks, timeout_s=10, interval_s=0.5, clock=fake.clock)
    assert (polled.value, polled.met, polled.checks) == ("ok", True, 3)
    assert checks.at == [1000.0, 1000.5, 1001.0]
    assert fake.sleeps == [0.5, 0.5]
    assert polled.elapsed_s == pytest.approx(1.0)


def test_a_poll_with_a_first_interval_starts_short_and_doubles_up_to_its_interval() -> None:
    fake = FakeClock()
    checks = Checks(fake, truthy_on=7)
    polled = poll(checks, timeout_s=10, interval_s=0.02, first_interval_s=0.002, clock=fake.clock)
    assert polled.met and polled.checks == 7
    assert fake.sleeps == pytest.approx([0.002, 0.004, 0.008, 0.016, 0.02, 0.02])


def test_in_background_hands_over_the_result_or_the_error() -> None:
    assert in_background(lambda a, b: a + b, 2, b=3).result(timeout=10) == 5

    def fails() -> None:
        raise ComponentStartError("never ready")

    with pytest.raises(ComponentStartError, match="never ready"):
        in_background(fails).result(timeout=10)


def test_poll_checks_once_even_with_no_time_left() -> None:
    fake = FakeClock()
    for timeout in (0.0, -5.0):
        checks = Checks(fake)
        polled = poll(checks, timeout_s=timeout, interval_s=0.5, clock=fake.clock)
        assert (polled.met, polled.checks, polled.value) == (False, 1, "")
    assert fake.sleeps == []
    assert poll(lambda: 7, timeout_s=-1, interval_s=1, clock=fake.clock).value == 7


def test_a_timed_out_poll_last_checks_at_the_deadline_not_past_it() -> None:
    fake = FakeClock()
    checks = Checks(fake)
    polled = poll(checks, timeout_s=1.0, interval_s=0.375, clock=fake.clock)
    assert not polled.met
    # 0, 3/8, 6/8, then the last sleep is cut to the deadline instead of overshooting it.
    assert checks.at == [1000.0, 1000.375, 1000.75, 1001.0]
    assert fake.sleeps == [0.375, 0.375, 0.25]
    assert polled.elapsed_s == 1.0


def test_a_slow_check_that_straddles_the_deadline_gets_one_more_look() -> None:
    # A check that began before the deadline is not the verdict: the condition gets a check
    # that starts at or after the deadline, and that one can still succeed.
    fake = FakeClock()
    checks = Checks(fake, truthy_on=2, takes_s=1.5)
    polled = poll(checks, timeout_s=1.0, interval_s=0.2, clock=fake.clock)
    assert polled.met and polled.checks == 2
    assert checks.at == [1000.0, 1001.5]
    assert fake.sleeps == [0.0]


def test_poll_lets_the_predicates_exception_through_at_once() -> None:
    fake = FakeClock()
    calls = []

    def broken() -> bool:
        calls.append(fake.t)
        if len(calls) == 2:
            raise ValueError("component died")
        return False

    with pytest.raises(ValueError, match="component died"):
        poll(broken, timeout_s=10, interval_s=1, clock=fake.clock)
    assert calls == [1000.0, 1001.0]


def test_wait_for_returns_the_value_or_raises_a_timeout_naming_what_and_the_last_state() -> None:
    fake = FakeClock()
    assert wait_for(Checks(fake, truthy_on=2), timeout_s=1, what="x", clock=fake.clock) == "ok"

    with pytest.raises(WaitTimeout) as raised:
        wait_for(
            Checks(fake),
            timeout_s=0.5,
            interval_s=0.125,
            what="the pin to show",
            describe=lambda: "3 pending",
            clock=fake.clock,
        )
    error = raised.value
    assert isinstance(error, AssertionError)
    assert error.headline == "Timed out waiting for the pin to show"
    assert error.facts["last seen"] == "3 pending"
    assert error.facts["checks"] == 5  # 0, 1/8, 2/8, 3/8 and the deadline itself


def test_observe_samples_across_the_whole_window() -> None:
    fake = FakeClock()
    seen = observe(fake.now, for_s=1.0, interval_s=0.25, clock=fake.clock)
    assert seen == [1000.0, 1000.25, 1000.5, 1000.75, 1001.0]
    assert fake.t == 1001.0


class FakeRuntime:
    """Only what wait_ready reads: an exit code and a state per name, logs, a log path."""

    def __init__(self, exit_codes: dict[str, int | None], gone: tuple[str, ...] = ()) -> None:
        self.exit_codes = exit_codes
        self.exit_code_calls = 0
        self.gone = gone

    def state(self, name: str) -> str:
        return "absent" if name in self.gone else "running"

    def exit_code(self, name: str) -> int | None:
        self.exit_code_calls += 1
        return self.exit_codes.get(name)

    def logs(self, name: str, tail: int = 40) -> str:
        return f"{name}: boom on line 3"

    def log_path(self, name: str) -> str | None:
        return f"/logs/{name}.log"


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A loopback port bound but never listening: every connection is refused, for sure."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _component(name: str, port: int) -> ComponentSpec:
    return ComponentSpec(
        name=name,
        role="prefill",
        argv=("stub", "--name", name),
        ready_url=f"http://127.0.0.1:{port}/health",
        ports=(port,),
    )


def test_wait_ready_reports_a_dead_component_at_once_with_its_exit_code_and_log(
    refusing_port: int,
) -> None:
    fake = FakeClock()
    runtime = FakeRuntime({"prefill-0": 3})
    with pytest.raises(ComponentStartError) as raised:
        wait_ready(
            runtime, [_component("prefill-0", refusing_port)], timeout_s=30, clock=fake.clock
        )  # type: ignore[arg-type]
    error = raised.value
    assert "exited during start-up with exit code 3" in error.headline
    assert error.facts["log"] == "/logs/prefill-0.log"
    assert "boom on line 3" in error.log_tail
    assert runtime.exit_code_calls == 1 and fake.sleeps == []  # never waited out


def test_wait_ready_ends_at_once_when_the_runtime_no_longer_runs_the_component(
    refusing_port: int,
) -> None:
    """A session closed while Toxiproxy's readiness is awaited in the background: the wait
    ends there, not at its deadline."""
    fake = FakeClock()
    runtime = FakeRuntime({}, gone=("toxiproxy",))
    with pytest.raises(ComponentStartError) as raised:
        wait_ready(
            runtime, [_component("toxiproxy", refusing_port)], timeout_s=30, clock=fake.clock
        )  # type: ignore[arg-type]
    assert (
        raised.value.headline
        == "toxiproxy is gone before it was ready: its runtime no longer runs it"
    )
    assert fake.sleeps == []


def test_wait_ready_times_out_on_its_one_deadline_naming_what_it_checked(
    refusing_port: int,
) -> None:
    fake = FakeClock()
    runtime = FakeRuntime({})
    with pytest.raises(ComponentStartError) as raised:
        wait_ready(
            runtime,
            [_component("decode-0", refusing_port)],
            timeout_s=1.0,
            poll_s=0.25,  # type: ignore[arg-type]
            clock=fake.clock,
        )
    error = raised.value
    assert error.headline == "decode-0 not ready after 1.0 s"
    assert error.facts["checked"] == f"http://127.0.0.1:{refusing_port}/health"
    assert "decode-0: ConnectError" in str(error.facts["last answer"])
    # 0, then after pauses of 2, 4, 8 ... 128 ms, then every .25 s up to the deadline (.254,
    # .504, .754, and 1.0 itself)
    assert runtime.exit_code_calls == 11
    assert fake.t == 1001.0


def test_wait_ready_with_nothing_to_wait_for_returns_at_once() -> None:
    fake = FakeClock()
    assert wait_ready(FakeRuntime({}), [], timeout_s=5, clock=fake.clock) == 0.0  # type: ignore[arg-type]
