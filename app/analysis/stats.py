"""Goodness-of-fit statistics for the exactness check, without scipy in the app.

The G-test's statistic is chi-square distributed under the null; its p-value is the regularised
upper incomplete gamma function Q(df/2, G/2), computed here by its series or continued fraction
(Numerical Recipes, "gammq"), which is accurate to ~1e-12 over the range a test needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_EPS = 1e-15
_MAX_ITER = 10_000
_TINY = 1e-300


def _lower_series(a: float, x: float) -> float:
    """P(a, x) by its power series (converges fast for x < a + 1)."""
    term = total = 1.0 / a
    ap = a
    for _ in range(_MAX_ITER):
        ap += 1.0
        term *= x / ap
        total += term
        if abs(term) < abs(total) * _EPS:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _upper_fraction(a: float, x: float) -> float:
    """Q(a, x) by Lentz's continued fraction (converges fast for x >= a + 1)."""
    b = x + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, _MAX_ITER):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + an / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chi2_sf(statistic: float, df: int) -> float:
    """P(X >= statistic) for X ~ chi-square with df degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive (got {df})")
    if statistic <= 0.0:
        return 1.0
    a, x = df / 2.0, statistic / 2.0
    if x < a + 1.0:
        return max(0.0, 1.0 - _lower_series(a, x))
    return min(1.0, _upper_fraction(a, x))


@dataclass
class GoodnessOfFit:
    statistic: float
    df: int
    p_value: float
    samples: int


def g_test(samples: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> GoodnessOfFit:
    """G-test of token samples against a distribution over token ids.

    A sample on a token of probability 0 is an outright failure (p-value 0). Cells expected
    fewer than `min_expected` times are pooled, so the chi-square approximation holds.
    """
    samples = np.asarray(samples, dtype=np.int64)
    if samples.size == 0:
        raise ValueError("no samples to test")
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs / probs.sum()
    counts = np.bincount(samples, minlength=probs.shape[0])
    support = probs > 0
    if counts[~support].any():
        return GoodnessOfFit(float("inf"), 0, 0.0, int(samples.size))
    observed = counts[support].astype(np.float64)
    expected = probs[support] * samples.size
    small = expected < min_expected
    if small.any():
        observed = np.append(observed[~small], observed[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    if observed.size < 2:
        return GoodnessOfFit(0.0, 0, 1.0, int(samples.size))
    seen = observed > 0
    statistic = float(2.0 * np.sum(observed[seen] * np.log(observed[seen] / expected[seen])))
    df = int(observed.size - 1)
    return GoodnessOfFit(statistic, df, chi2_sf(statistic, df), int(samples.size))
