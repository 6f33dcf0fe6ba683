"""A probe's slow samples come once a second whatever its interval, unless told otherwise."""

from __future__ import annotations

import pytest

from pytest_wedge.evidence.probe import SLOW_INTERVAL_S, Probe


@pytest.mark.parametrize(("interval_s", "slow_every"), [(0.1, 10), (0.25, 4), (0.5, 2), (2.0, 1)])
def test_slow_samples_come_about_once_a_second(interval_s: float, slow_every: int) -> None:
    probe = Probe(object(), interval_s=interval_s)  # type: ignore[arg-type]
    assert probe.slow_every == slow_every
    assert SLOW_INTERVAL_S == 1.0


def test_slow_every_overrides_the_cadence() -> None:
    assert Probe(object(), interval_s=0.1, slow_every=3).slow_every == 3  # type: ignore[arg-type]
    assert Probe(object(), interval_s=0.1, slow_every=0).slow_every == 1  # type: ignore[arg-type]
