"""Statistics of returns shared by evaluation, learning curves and sweeps."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["confidence_interval"]


def confidence_interval(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95% Student-t confidence interval (half-width ``nan`` for n < 2).

    Example:
        >>> mean, half = confidence_interval([1.0, 2.0, 3.0])
        >>> mean, round(half, 3)
        (2.0, 2.484)
    """
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = float(values.mean())
    if n < 2:
        return mean, math.nan
    from scipy import stats

    half = float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n))
    return mean, half
