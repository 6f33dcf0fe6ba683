"""The router's own health check and breaker as watchdogs: their timing comes from the router's
flags, they act (the router's removal), and a scenario file names the case a row must show."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pytest_wedge.errors import ConfigError
from pytest_wedge.scenarios.catalog import load_scenario
from pytest_wedge.watchdogs import RouterCircuitBreaker, RouterHealthCheck


def scene(*router_args: str) -> SimpleNamespace:
    return SimpleNamespace(topology=SimpleNamespace(spec=SimpleNamespace(router_args=router_args)))


@pytest.mark.parametrize(
    ("args", "least_s"),
    [
        (("--health-check-interval-secs", "1", "--health-check-timeout-secs", "1"), 3.0),
        (("--health-failure-threshold", "2", "--health-check-timeout-secs", "1"), 61.0),
        ((), 125.0),  # the routers' defaults: 5 s timeout + 2 x 60 s
    ],
)
def test_a_health_check_cannot_fire_before_its_flags_allow(args, least_s) -> None:
    dog = RouterHealthCheck("decode-0", interval_s=30)
    dog.arm(scene(*args))  # type: ignore[arg-type]
    try:
        assert dog.fires_after_s() == least_s
    finally:
        dog.disarm(scene())  # type: ignore[arg-type]
    assert dog.acts and "takes decode-0 out of rotation" in dog.describe()
    assert dog.signal == "the router's /workers entry of decode-0 (is_healthy)"


def test_a_breaker_acts_and_says_vllm_router_has_none() -> None:
    dog = RouterCircuitBreaker("prefill-0")
    assert dog.acts and "none on vllm-router" in dog.signal


def test_a_scenario_names_the_case_a_watchdog_row_must_show(tmp_path) -> None:
    text = """
name = "x"
summary = "y"
[[watchdogs]]
kind = "RouterHealthCheck"
expect_case = "acted, wedge stayed"
[expect]
located_at = "decode-0"
cleared_within_s = 6
"""
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert load_scenario(path).watchdogs[0].expect_case == "acted, wedge stayed"
    path.write_text(text.replace("acted, wedge stayed", "acted"))
    with pytest.raises(ConfigError) as bad:
        load_scenario(path)
    assert "watchdogs[0].expect_case" in str(bad.value) and "never saw the signal" in str(bad.value)
