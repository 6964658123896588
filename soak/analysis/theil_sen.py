"""The Theil–Sen line alone (no interval), for the searches that fit one to every segment they try.

scipy's `theilslopes` also computes the slope's confidence interval (a normal quantile through scipy's distribution
machinery) and checks its arguments through scipy's nan-policy wrapper: several times the cost of the estimate on
the short segments the step and warm-up searches fit. A leaf module: `findings` imports `warmup`, which needs this.
"""

from __future__ import annotations

import numpy as np


def theil_sen_line(t_s: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of scipy's `theilslopes(y, t_s)`, by its very operations (so the same floats): the
    median of the pairwise slopes over pairs of distinct times, and median(y) − slope·median(t). Needs two
    distinct times."""
    t_s, y = np.array(t_s, dtype=float).ravel(), np.array(y, dtype=float).ravel()
    delta_t = t_s[:, np.newaxis] - t_s
    slopes = (y[:, np.newaxis] - y)[delta_t > 0] / delta_t[delta_t > 0]
    slope = np.median(slopes)
    return float(slope), float(np.median(y) - slope * np.median(t_s))
