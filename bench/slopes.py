"""The slope of a sampled series, per hour, with a t interval that allows for autocorrelation.

Least squares with one intercept per group (the fault whose recovery the sample closes), so a
fault that leaves more in flight than another adds no slope and no noise: the slope is fitted on
time and value centred within each group (one intercept for all when a group has fewer than
``MIN_PER_GROUP`` samples). Successive samples of a long-lived process are not
independent (memory grows in steps, a queue drains over two samples), which would make the
plain interval too narrow; the residuals' lag-1 autocorrelation r shrinks the sample count to
an effective n' = n (1 - r) / (1 + r) (AR(1), as climate trend tests do: Santer et al. 2000),
which widens the standard error by sqrt(n / n') and lowers the degrees of freedom. No SciPy (not
a dependency): the t quantile is exact for 1 and 2 degrees of freedom and a Cornish-Fisher
expansion above, within 0.3 % of the table from 3 up.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

HOUR_S = 3600.0
MIN_PER_GROUP = 4


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``df >= 1``)."""
    if not 0.0 < p < 1.0 or df < 1.0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1; got p={p}, df={df}")
    if df < 3.0:  # rounded down, the wider interval: the expansion is poor below 3
        df = math.floor(df)
    if df == 1.0:
        return math.tan(math.pi * (p - 0.5))
    if df == 2.0:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = statistics.NormalDist().inv_cdf(p)
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / df ** (i + 1) for i, term in enumerate(terms))


@dataclass(frozen=True)
class Slope:
    per_hour: float
    low: float  # the interval's ends, per hour
    high: float
    n: int  # samples used
    n_effective: float  # after the autocorrelation
    lag1: float  # the residuals' lag-1 autocorrelation (0 when negative)

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def slope_per_hour(
    times_s: Sequence[float],
    values: Sequence[float],
    groups: Sequence[Hashable] | None = None,
    confidence: float = 0.95,
) -> Slope | None:
    """The fitted slope of ``values`` over ``times_s`` (seconds), per hour, with its two-sided
    ``confidence`` interval; samples that are NaN are left out. None when too few samples are
    left to fit a slope and an interval (at least one degree of freedom)."""
    kept = [
        (t, v, g)
        for t, v, g in zip(times_s, values, groups or [None] * len(values), strict=True)
        if not math.isnan(v)
    ]
    # An intercept per group only where each has samples to spare: else it eats the degrees
    # of freedom (a short run samples each fault once or twice).
    sizes = Counter(g for _, _, g in kept)
    pooled = min(sizes.values(), default=0) < MIN_PER_GROUP
    by_group: dict[Hashable, list[tuple[float, float]]] = defaultdict(list)
    for t, v, g in kept:
        by_group[None if pooled else g].append((t / HOUR_S, v))
    centred: list[tuple[float, float, float]] = []  # (time of the sample, dt, dv)
    for members in by_group.values():
        mean_t = statistics.fmean(t for t, _ in members)
        mean_v = statistics.fmean(v for _, v in members)
        centred += [(t, t - mean_t, v - mean_v) for t, v in members]
    df = len(centred) - len(by_group) - 1
    sxx = sum(dt * dt for _, dt, _ in centred)
    if df < 1 or sxx <= 0:
        return None
    slope = sum(dt * dv for _, dt, dv in centred) / sxx
    residuals = [dv - slope * dt for _, dt, dv in sorted(centred)]
    sse = sum(r * r for r in residuals)
    lag1 = _lag1(residuals)
    n = len(residuals)
    inflation = (1 + lag1) / (1 - lag1)
    n_effective = n / inflation
    df_effective = max(1.0, n_effective - len(by_group) - 1)
    stderr = math.sqrt(sse / df / sxx * inflation)
    half = t_quantile(0.5 + confidence / 2, df_effective) * stderr
    return Slope(slope, slope - half, slope + half, n, n_effective, lag1)


def _lag1(residuals: Sequence[float]) -> float:
    """Lag-1 autocorrelation, clipped to [0, 0.95]: a negative one would narrow the interval,
    and one near 1 leaves no information to estimate anything with."""
    sse = sum(r * r for r in residuals)
    if sse <= 0 or len(residuals) < 3:
        return 0.0
    r = sum(a * b for a, b in itertools.pairwise(residuals)) / sse
    return min(0.95, max(0.0, r))
