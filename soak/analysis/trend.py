"""The trend test every trend check shares (docs/gates.md, "How a trend check decides").

A FAIL needs all of: significance (Mann–Kendall p < p_value, the (1 − 2·p_value) Theil–Sen
interval, widened as below, above 0, and the Mann–Kendall z shrunk as below still under p_value
unless that interval alone clears the threshold), the Theil–Sen CI lower bound above half the
threshold (the run shows a rise of a size that matters, not merely one above 0), a slope at least
the practical threshold and — for leaks — persistence (the second half alone still slopes ≥ half
the threshold). A PASS has to be earned: the upper end of the CI must stay under the threshold, so
the run has ruled out a trend of that size. Anything between is SUSPECT when the estimate itself
is at or over the threshold, else INCONCLUSIVE (the run could not tell). INCONCLUSIVE below
`min_points`. The series is oriented so that "bad" is upward; callers negate a series whose bad
direction is down.

The Theil–Sen CI and the Mann–Kendall test assume independent points; window series drift slowly.
So the CIs' half-widths are widened by sqrt((1 + φ)/(1 − φ)) — the AR(1) effective-sample-size
factor — with φ the lag-1 autocorrelation of the residuals around the line, bias-corrected for the
short series (φ̂ + (1 + 3φ̂)/n, Kendall's correction) and clamped to [0, 0.9]. The same factor
shrinks a third Mann–Kendall z. Without this a run would claim to rule out leaks it could not
have seen, and a short run's slow drift would read as a trend.

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
from scipy.stats import norm, theilslopes

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SUSPECT, Trend

# A PASS's bound is stricter where the judged span holds fewer than this many of the series' correlation times
# (`pass_bound`). Read from one run, a correlation time comes out at most about a fifth of the span however slow
# the drift (a half or a whole cycle of a wander over the run reads 0.13–0.18 of it), so eight is the bar.
MIN_CORRELATION_TIMES = 8.0
A_FALL, SLOW_DRIFT = "a fall", "slow drift"


@dataclass(frozen=True)
class TrendSpec:
    """What one trend must show to FAIL; `min_slope_per_s` is in series units per second."""

    min_slope_per_s: float
    p_value: float = 0.01
    confidence: float = 0.95
    min_points: int = 20
    persistence: bool = False
    min_change: float = 0.0  # the least change over the span that counts (a leak's `material` gate), if any
    # Memory wanders: its PASS bound is held to what the run can show (`pass_bound`). Latency, errors and
    # throughput keep the interval's upper end, their falls being the load's and the server's own good days.
    wanders: bool = False


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
    autocorrelation: float = 0.0
    pass_bound_per_s: float = math.nan  # the smallest rise this run rules out (`pass_bound`); nan: the CI's upper end
    bound_note: str | None = None  # why that bound is above the CI's upper end: "a fall", "slow drift"
    correlation_time_s: float = 0.0  # of the residuals around the line (`correlation_time_s`); 0 unless `wanders`

    @property
    def projected_change(self) -> float:
        """Slope times the judged span: how much the fitted line rises over the run."""
        return self.slope_per_s * self.span_s

    @property
    def detection_limit_per_s(self) -> float:
        """The smallest upward slope this run rules out (nan if untested): the upper end of the CI, or the
        stricter bound of `pass_bound` where the run's fall or slow drift leaves the CI claiming too much."""
        return self.pass_bound_per_s if math.isfinite(self.pass_bound_per_s) else self.ci_per_s[1]

    def span_needed_s(self) -> float | None:
        """About how long a run of the same shape must judge to rule out the threshold, or None
        when this one already does (or cannot say). With a fixed number of windows the interval's
        upper arm shrinks as 1/span — the conservative reading, since more windows shrink it faster."""
        low, high = self.ci_per_s[0], self.detection_limit_per_s
        if not (math.isfinite(low) and math.isfinite(high)) or self.span_s <= 0:
            return None
        if high < self.min_slope_per_s or self.min_slope_per_s <= 0:
            return None
        if self.bound_note:
            # A wander's apparent rate over a span shrinks as the span grows (its size over the run stays), as
            # does the arm: the whole bound as 1/span. Slow drift needs enough correlation times besides.
            needed = self.span_s * high / self.min_slope_per_s
            if self.bound_note == SLOW_DRIFT:
                needed = max(needed, MIN_CORRELATION_TIMES * self.correlation_time_s)
            return needed
        centre = max(self.slope_per_s, 0.0)
        room = self.min_slope_per_s - centre
        if room <= 0:
            return None
        # The upper arm (not the half-width): Theil–Sen intervals are asymmetric, and it is the
        # upper end that has to come under the threshold.
        return self.span_s * (high - centre) / room

    def line(self, space: str = "linear", series: str | None = None) -> Trend | None:
        """The fitted line for a chart; None when too few points were fitted (no line to draw: a finding that
        carried one with no start would not be a valid summary)."""
        if not math.isfinite(self.t0_s):
            return None
        return Trend(self.slope_per_s, self.intercept, self.t0_s, space, series)

    def failed_gates(self) -> list[str]:
        return [name for name, ok in self.gates.items() if not ok]


def assess_trend(t_s: np.ndarray, y: np.ndarray, spec: TrendSpec) -> TrendResult:
    """Judge whether y rises over t_s; nan points are dropped."""
    t_s, y = _finite_pairs(t_s, y)
    if len(y) < spec.min_points:
        return TrendResult(verdict=INCONCLUSIVE, n=len(y), min_slope_per_s=spec.min_slope_per_s)
    t0_s = float(t_s[0])
    slope, intercept, low, high = theil_sen(t_s - t0_s, y, spec.confidence)
    phi = residual_autocorrelation(t_s - t0_s, y, slope, intercept)
    low, high = widen(slope, low, high, phi)
    mk_p = mann_kendall_p(y)
    gates = {
        "significant": significant(t_s - t0_s, y, spec, phi, mk_p),
        "ci_above_half": low > spec.min_slope_per_s / 2,
        "practical": slope >= spec.min_slope_per_s,
    }
    half_slope = second_half_slope(t_s, y) if spec.persistence else None
    if spec.persistence:
        gates["persistent"] = (half_slope is not None and half_slope >= spec.min_slope_per_s / 2
                               and second_half_rises(t_s, y))
    bound, note, tau_s = high, None, 0.0
    if spec.wanders:
        tau_s = correlation_time_s(t_s, y - (intercept + slope * (t_s - t0_s)))
        fell = slope < 0 and proven_fall(t_s - t0_s, y, spec, phi, (mk_p, high))
        bound, note = pass_bound(t_s - t0_s, y, spec, (slope, high, phi), tau_s, fell)
    return TrendResult(
        verdict=trend_verdict(gates, slope, bound, spec.min_slope_per_s), n=len(y), t0_s=t0_s,
        span_s=float(t_s[-1] - t0_s), slope_per_s=slope, ci_per_s=(low, high), intercept=intercept,
        mk_p=mk_p, half_slope_per_s=half_slope, min_slope_per_s=spec.min_slope_per_s, gates=gates,
        autocorrelation=phi, pass_bound_per_s=bound if note else math.nan, bound_note=note,
        correlation_time_s=tau_s)


def proven_fall(t_s: np.ndarray, y: np.ndarray, spec: TrendSpec, phi: float, test: tuple[float, float]) -> bool:
    """Whether the series falls with the evidence a rise needs to FAIL: significant, the interval's upper end
    under minus half the threshold, a fall at that end of at least `min_change` over the span, and (where the spec
    asks persistence) a second half that still falls."""
    mk_p, high = test
    if not (high < -spec.min_slope_per_s / 2 and significant(t_s, -y, spec, phi, mk_p)):
        return False
    if -high * float(t_s[-1] - t_s[0]) < spec.min_change:  # as a rise that builds less than this cannot FAIL
        return False
    return not spec.persistence or second_half_rises(t_s, -y)


def pass_bound(t_s: np.ndarray, y: np.ndarray, spec: TrendSpec, fit: tuple[float, float, float],
               tau_s: float, fell: bool = False) -> tuple[float, str | None]:
    """The smallest rise this run rules out, and why it is more than the CI's upper end (None: it is that end).

    A run can rule out a rise only as surely as it could show one. Where the series falls without the evidence
    a rise would need to FAIL (`fell` says it has it), or drifts so slowly that its span holds fewer than
    `MIN_CORRELATION_TIMES` of its own correlation time, its interval says how well the line fits, not how far the
    memory wanders: a wander that fell over this run would rise as readily over the next. So the bound is
    mirrored: the size of the slope, up or down, plus the upper arm of the strict (1 − 2·p_value) interval that a
    FAIL reads; and with slow drift, never below the slope the series' own spread makes over the span
    (`drift_floor_per_s`)."""
    slope, high, phi = fit
    span_s = float(t_s[-1] - t_s[0])
    slow = span_s < MIN_CORRELATION_TIMES * tau_s
    if (slope >= 0 or fell) and not slow:
        return high, None
    strict_high = strict_interval(t_s, y, spec.p_value, phi)[1]
    bound = abs(slope) + max(strict_high, high) - slope
    if slow:
        return max(bound, drift_floor_per_s(y, span_s, tau_s)), SLOW_DRIFT
    return bound, A_FALL


def trend_verdict(gates: dict[str, bool], slope: float, ci_high: float, threshold: float) -> str:
    """FAIL when every gate holds; PASS only when the CI's upper end is under the threshold;
    otherwise SUSPECT if the estimate itself reaches the threshold, else INCONCLUSIVE."""
    if all(gates.values()):
        return FAIL
    if ci_high < threshold:
        return PASS
    return SUSPECT if slope >= threshold else INCONCLUSIVE


def residual_autocorrelation(t_s: np.ndarray, y: np.ndarray, slope: float, intercept: float) -> float:
    """Lag-1 autocorrelation of the residuals around the fitted line, bias-corrected, in [0, 0.9]."""
    return lag1_autocorrelation(y - (intercept + slope * t_s))


def lag1_autocorrelation(residuals: np.ndarray) -> float:
    """φ̂ + (1 + 3φ̂)/n — the plain estimate reads low on short series — clamped to [0, 0.9]."""
    if residuals.size < 4 or np.ptp(residuals) == 0:
        return 0.0
    centred = residuals - residuals.mean()
    phi = float(np.dot(centred[:-1], centred[1:]) / np.dot(centred, centred))
    return float(np.clip(phi + (1 + 3 * phi) / residuals.size, 0.0, 0.9))


def ar1_factor(phi: float) -> float:
    """sqrt((1 + φ)/(1 − φ)): how much wider an AR(1) series' uncertainty is than independent points'."""
    return math.sqrt((1 + phi) / (1 - phi))


def significant(t_s: np.ndarray, y: np.ndarray, spec: TrendSpec, phi: float, mk_p: float) -> bool:
    """Mann–Kendall p < p_value and the strict interval above 0 — and, unless that interval already
    clears the threshold itself, the Mann–Kendall z shrunk by the AR(1) factor must agree too."""
    strict_low = strict_lower_bound(t_s, y, spec.p_value, phi)
    if mk_p >= spec.p_value or strict_low <= 0:
        return False
    return strict_low >= spec.min_slope_per_s or ar1_mann_kendall_p(y, phi) < spec.p_value


def ar1_mann_kendall_p(y: np.ndarray, phi: float) -> float:
    """Two-sided Mann–Kendall p with z shrunk by the AR(1) factor. Its ranks saturate on a clean
    trend, which is why `significant` does not ask it when the interval alone is decisive."""
    if len(y) < 3 or np.ptp(y) == 0:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        z = float(mk.original_test(y).z)
    return float(2 * norm.sf(abs(z) / ar1_factor(phi)))


def strict_lower_bound(t_s: np.ndarray, y: np.ndarray, p_value: float, phi: float) -> float:
    """The lower end of the (1 − 2·p_value) Theil–Sen interval, widened for AR(1)."""
    return strict_interval(t_s, y, p_value, phi)[0]


def strict_interval(t_s: np.ndarray, y: np.ndarray, p_value: float, phi: float) -> tuple[float, float]:
    """The (1 − 2·p_value) Theil–Sen interval, widened for AR(1): what a FAIL's significance reads."""
    slope, _, low, high = theil_sen(t_s, y, 1 - 2 * p_value)
    return widen(slope, low, high, phi)


def correlation_time_s(t_s: np.ndarray, residuals: np.ndarray) -> float:
    """How long a series (a fit's residuals) takes to forget its level: the first lag at which its autocorrelation
    falls below 1/e of its value at the first lag (white noise's share taken out), times the median spacing (the
    whole span when it never does within half of it). Around the line, so a trend is no drift; a wander slower
    than the run leaves a bend the line cannot take, which keeps its level for a large part of the span."""
    n = residuals.size
    if n < 4 or np.ptp(residuals) == 0:
        return 0.0
    centred = residuals - residuals.mean()
    spectrum = np.fft.rfft(centred, 2 * n)
    acf = np.fft.irfft(spectrum * np.conj(spectrum))[:n // 2] / (n - np.arange(n // 2))  # per pair: unbiased
    # White noise on top of a drift drops the autocorrelation at the first lag and no further: the drift's own
    # decay is read from there on, once there is a drift to read (a first-lag correlation beyond what white noise
    # reaches by chance, 2/√n, and at least 0.1).
    reference = acf[1] if acf[1] >= max(0.1, 2 / math.sqrt(n)) * acf[0] else acf[0]
    below = np.nonzero(acf / reference < 1 / math.e)[0]
    spacing_s = float(np.median(np.diff(t_s)))
    return float(below[0]) * spacing_s if below.size else float(t_s[-1] - t_s[0])


def drift_floor_per_s(y: np.ndarray, span_s: float, tau_s: float) -> float:
    """The slope a series' own spread makes over `span_s` when only span/τ of its points are independent:
    about twice the standard error of a line through that many, 2·σ·√(12·τ/span)/span."""
    return 2.0 * float(np.std(y)) * math.sqrt(12.0 * tau_s / span_s) / span_s if span_s > 0 else math.inf


def widen(slope: float, low: float, high: float, phi: float) -> tuple[float, float]:
    """The CI widened around the slope by the AR(1) factor sqrt((1 + φ)/(1 − φ))."""
    factor = ar1_factor(phi)
    return slope - factor * (slope - low), slope + factor * (high - slope)


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


def second_half_rises(t_s: np.ndarray, y: np.ndarray) -> bool:
    """Whether the second half alone rises: its 90 % Theil–Sen interval, widened for AR(1), lies
    above 0 (one-sided 5 %) — or its ranks rise beyond doubt (Mann–Kendall p < 0.01), for a leak
    that grows in bursts with the load leaves residuals that look autocorrelated although every
    point rises. A warm-up tail or an early step leaves a flat second half."""
    later = t_s >= np.median(t_s)
    if later.sum() < 4:
        return False
    t_later, y_later = t_s[later] - t_s[later][0], y[later]
    slope, intercept, low, high = theil_sen(t_later, y_later, 0.90)
    if slope <= 0:
        return False
    widened_low = widen(slope, low, high, residual_autocorrelation(t_later, y_later, slope, intercept))[0]
    return widened_low > 0 or mann_kendall_p(y_later) < 0.01


def second_half_slope(t_s: np.ndarray, y: np.ndarray) -> float | None:
    """Theil–Sen slope of the points at or after the median time (None if fewer than 3)."""
    later = t_s >= np.median(t_s)
    if later.sum() < 3:
        return None
    return theil_sen(t_s[later] - t_s[later][0], y[later], 0.95)[0]
