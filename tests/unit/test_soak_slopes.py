"""The soak's slope per hour and its interval (bench/slopes.py): the t quantile against the
table, a known slope recovered, group offsets taken out, autocorrelation widening the interval."""

from __future__ import annotations

import math
import random

import pytest

from bench.slopes import slope_per_hour, t_quantile


@pytest.mark.parametrize(
    "df,table",
    [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042), (120, 1.980)],
)
def test_t_quantile_matches_the_table(df: int, table: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(table, rel=2e-3)


def test_a_non_integer_df_below_three_rounds_down_to_the_wider_interval() -> None:
    assert t_quantile(0.975, 2.7) == t_quantile(0.975, 2)


def test_a_known_slope_is_recovered_within_its_interval() -> None:
    rng = random.Random(7)
    times = [60.0 * i for i in range(60)]  # an hour, a sample a minute
    values = [10 + 5.0 * t / 3600 + rng.gauss(0, 1) for t in times]
    slope = slope_per_hour(times, values)
    assert slope is not None
    assert slope.low < 5.0 < slope.high and slope.half_width < 2.0 and slope.n == 60


def test_a_flat_noisy_series_has_an_interval_around_zero() -> None:
    rng = random.Random(3)
    times = [15.0 * i for i in range(80)]
    slope = slope_per_hour(times, [rng.gauss(20, 8) for _ in times])
    assert slope is not None and slope.low < 0 < slope.high


def test_group_offsets_read_as_neither_slope_nor_noise() -> None:
    # Three faults in turn, each leaving its own level behind; no growth at all.
    levels = {"a": 0.0, "b": 30.0, "c": 5.0}
    groups = [("a", "b", "c")[i % 3] for i in range(30)]
    times = [20.0 * i for i in range(30)]
    values = [levels[g] for g in groups]
    slope = slope_per_hour(times, values, groups)
    assert slope is not None and slope.per_hour == pytest.approx(0, abs=1e-9)
    assert slope.half_width == pytest.approx(0, abs=1e-9)
    pooled = slope_per_hour(times, values)
    assert pooled is not None and pooled.half_width > 10


def test_too_few_samples_per_group_fall_back_to_one_intercept() -> None:
    times = [10.0 * i for i in range(6)]
    slope = slope_per_hour(times, [1, 2, 3, 4, 5, 6.5], ["a", "b", "c", "a", "b", "c"])
    assert slope is not None and slope.n == 6 and slope.per_hour > 0


def test_autocorrelated_residuals_widen_the_interval() -> None:
    rng = random.Random(11)
    times = [30.0 * i for i in range(100)]
    walk, values = 0.0, []
    for _ in times:  # AR(1) noise with r = 0.8: successive samples share most of their error
        walk = 0.8 * walk + rng.gauss(0, 1)
        values.append(walk)
    slope = slope_per_hour(times, values)
    assert slope is not None and slope.lag1 > 0.5
    assert slope.n_effective < slope.n / 3


def test_nan_samples_are_left_out_and_too_few_give_none() -> None:
    assert slope_per_hour([0.0, 1.0], [1.0, 2.0]) is None
    slope = slope_per_hour([0.0, 10.0, 20.0, 30.0], [1.0, math.nan, 3.0, 4.0])
    assert slope is not None and slope.n == 3
