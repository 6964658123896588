"""The trend test every trend check shares (docs/gates.md, "How a trend check decides").

A FAIL needs all of: Mann–Kendall p < p_value, the Theil–Sen CI lower bound > 0, a slope at least
the practical threshold and — for leaks — persistence (the second half alone still slopes ≥ half
the threshold). SUSPECT when at least two of those hold but not all and the slope is at least
`suspect_min_fraction` of the practical threshold (a significant but negligible drift stays PASS,
its evidence still saying so); PASS otherwise; INCONCLUSIVE below `min_points`.
The series is oriented so that "bad" is upward; callers negate a series whose bad direction is down.

Mann–Kendall p is the larger of the original test and the Hamed–Rao autocorrelation-corrected one:
window series are autocorrelated (slow drift), which makes the original test liberal, and
Hamed–Rao alone turns liberal on negatively correlated or near-perfect series (its variance can
even go negative). Taking the larger p never trusts a correction that shrinks the variance.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pymannkendall as mk
from scipy.stats import theilslopes

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SUSPECT


@dataclass(frozen=True)
class TrendSpec:
    """What one trend must show to FAIL; `min_slope_per_s` is in series units per second."""

    min_slope_per_s: float
    p_value: float = 0.01
    confidence: float = 0.95
    min_points: int = 20
    persistence: bool = False
    suspect_min_fraction: float = 0.25


@dataclass(frozen=True)
class TrendResult:
    """The outcome of `assess_trend`; slope and intercept describe y = intercept + slope·(t − t0_s)."""

    verdict: str
    n: int
    t0_s: float = math.nan
    span_s: float = 0.0
    slope_per_s: float = math.nan
    ci_per_s: tuple[float, float] = (math.nan, math.nan)
    intercept: float = math.nan
    mk_p: float = math.nan
    half_slope_per_s: float | None = None
    min_slope_per_s: float = math.nan
    gates: dict[str, bool] = field(default_factory=dict)

    @property
    def projected_change(self) -> float:
        """Slope times the judged span: how much the fitted line rises over the run."""
        return self.slope_per_s * self.span_s

    def line(self, space: str = "linear") -> dict:
        """The fitted line for a chart."""
        return {"slope_per_s": self.slope_per_s, "intercept": self.intercept,
                "t0_s": self.t0_s, "space": space}

    def failed_gates(self) -> list[str]:
        return [name for name, ok in self.gates.items() if not ok]


def assess_trend(t_s: np.ndarray, y: np.ndarray, spec: TrendSpec) -> TrendResult:
    """Judge whether y rises over t_s; nan points are dropped."""
    t_s, y = _finite_pairs(t_s, y)
    if len(y) < spec.min_points:
        return TrendResult(verdict=INCONCLUSIVE, n=len(y), min_slope_per_s=spec.min_slope_per_s)
    t0_s = float(t_s[0])
    slope, intercept, low, high = theil_sen(t_s - t0_s, y, spec.confidence)
    mk_p = mann_kendall_p(y)
    gates = {
        "significant": mk_p < spec.p_value,
        "ci_above_zero": low > 0,
        "practical": slope >= spec.min_slope_per_s,
    }
    half_slope = second_half_slope(t_s, y) if spec.persistence else None
    if spec.persistence:
        gates["persistent"] = half_slope is not None and half_slope >= spec.min_slope_per_s / 2
    big_enough = slope >= spec.suspect_min_fraction * spec.min_slope_per_s
    return TrendResult(
        verdict=_verdict(gates, big_enough), n=len(y), t0_s=t0_s, span_s=float(t_s[-1] - t0_s),
        slope_per_s=slope, ci_per_s=(low, high), intercept=intercept, mk_p=mk_p,
        half_slope_per_s=half_slope, min_slope_per_s=spec.min_slope_per_s, gates=gates)


def _verdict(gates: dict[str, bool], big_enough: bool) -> str:
    """FAIL when every gate holds; SUSPECT when two or more do and the slope is not negligible."""
    held = sum(gates.values())
    if held == len(gates):
        return FAIL
    return SUSPECT if held >= 2 and big_enough else PASS


def _finite_pairs(t_s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t_s = np.asarray(t_s, dtype=float)
    y = np.asarray(y, dtype=float)
    keep = np.isfinite(t_s) & np.isfinite(y)
    order = np.argsort(t_s[keep], kind="stable")
    return t_s[keep][order], y[keep][order]


def theil_sen(t_s: np.ndarray, y: np.ndarray, confidence: float) -> tuple[float, float, float, float]:
    """(slope, intercept, ci_low, ci_high); scipy's `alpha` argument is the confidence level."""
    if np.ptp(y) == 0:
        return 0.0, float(y[0]), 0.0, 0.0
    result = theilslopes(y, t_s, alpha=confidence)
    return (float(result.slope), float(result.intercept),
            float(result.low_slope), float(result.high_slope))


def mann_kendall_p(y: np.ndarray) -> float:
    """Two-sided p: max of the original and the Hamed–Rao-corrected Mann–Kendall test."""
    if len(y) < 3 or np.ptp(y) == 0:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # Hamed–Rao's sqrt of a negative variance
        p_original = float(mk.original_test(y).p)
        p_corrected = float(mk.hamed_rao_modification_test(y).p)
    return p_original if not math.isfinite(p_corrected) else max(p_original, p_corrected)


def second_half_slope(t_s: np.ndarray, y: np.ndarray) -> float | None:
    """Theil–Sen slope of the points at or after the median time (None if fewer than 3)."""
    later = t_s >= np.median(t_s)
    if later.sum() < 3:
        return None
    return theil_sen(t_s[later] - t_s[later][0], y[later], 0.95)[0]
