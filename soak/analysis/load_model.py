"""The offered load as a covariate: judge latency at comparable load, not against the clock.

Latency follows load. A healthy server under a diurnal load, or a planned `ramp` or `wave`, has a
P99 that rises and falls with the offered rate; trending it against time alone reads that as creep.
When the offered rate really varies over the judged windows, or moves with time at all (a slice of
the day's rise: a queue near saturation makes a small rise of load a large one of latency),
`fit_with_load` fits

    log(window percentile) = a + b·(t − t0) + c·x + d·x²,   x = log(rate) − mean log(rate)

robustly (Huber, so one stall window cannot tilt it): `b` is the creep at equal load, `c` the load
elasticity (P ∝ load^c at the mean load) and `d` lets a queue's convex response bend. `b`'s standard
error is Newey–West (HAC), because window series drift slowly, but never smaller than the one for
independent points widened for lag-1 autocorrelation (as trend.py widens Theil–Sen's CI): like the
Mann–Kendall p in trend.py, a correction that would shrink the variance is not trusted with ~50
windows. When time and load move together (a pure ramp) `b` cannot be told from `c`;
`collinearity` (R² of t on the load terms) says so and the caller gives up.

The offered rate of a window is its planned arrivals (`sends`) over its length; without sends, the
mean in-flight gauge (`running`) of the server over the window stands in for it. That stand-in is
weaker: by Little's law in-flight requests grow with latency itself, so part of a real creep can
be taken out with the load; the evidence names which measure was used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import kendalltau
from scipy.stats import t as student_t

from soak.analysis.inputs import RunData

# The 5th–95th percentile spread of the rate must exceed this factor beyond counting noise.
VARIES_RATIO = 1.05
# A load that moves with time (Kendall's tau of log load on time below this p) is taken out even
# when it moves less than VARIES_RATIO: a queue near saturation turns a 15 % rise of load over a
# 2-hour slice of the day into a 40 % rise of P99, which the clock alone would read as creep.
DRIFT_P = 0.01
# Above this R² of time on the load terms (VIF 5), time and load are too entangled to separate: the
# creep estimate's spread grows as 1/sqrt(1 − R²), and a healthy ramp's would reach the threshold.
# A day-long diurnal cycle sits at 0.65–0.78.
MAX_COLLINEARITY = 0.8
CUBIC_FROM_R2 = 0.2  # time–load R² from which the cubic fit is made too (`fit_with_load`)
HUBER_C = 1.345  # 95 % efficiency under normal noise
MAX_ITERATIONS = 50
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class LoadSeries:
    """Per-window load: `values` (> 0) measured as `source`, in `unit`; `counts` the arrivals
    behind each value when they are counts (for the counting-noise allowance), else None; `t_s`
    the windows' mid times when a drift with time can be trusted to be the load's own."""

    values: np.ndarray
    source: str
    unit: str
    counts: np.ndarray | None = None
    t_s: np.ndarray | None = None

    def matters(self) -> bool:
        """Whether latency must be judged at equal load: the load varied, or it drifted with time."""
        return self.varies() or self.drifts()

    def drifts(self) -> bool:
        """Whether the load moved with time (Kendall's tau, p < DRIFT_P), however little: only a
        load that moves with time can pass for a creep; one that only scatters cannot."""
        if self.t_s is None or self.values.size < 4 or np.ptp(self.values) == 0:
            return False
        return bool(kendalltau(self.t_s, np.log(self.values)).pvalue < DRIFT_P)

    def varies(self) -> bool:
        """Whether the load changed by more than VARIES_RATIO (5th to 95th percentile) beyond
        what Poisson counting noise alone would spread it by."""
        logs = np.log(self.values)
        spread = float(np.percentile(logs, 95) - np.percentile(logs, 5))
        noise = 0.0
        if self.counts is not None:
            noise = 2 * 1.645 / math.sqrt(max(float(np.median(self.counts)), 1.0))
        return spread > math.log(VARIES_RATIO) + noise

    def range_text(self) -> str:
        return f"{_num(self.values.min())}–{_num(self.values.max())} {self.unit}"


def _num(value: float) -> str:
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"


def offered_load(run: RunData, spans: list[tuple[int, float, float]]) -> LoadSeries | None:
    """The load of each (index, start_s, end_s) window: offered rate from sends, else mean
    in-flight requests from the server's gauge; None when neither covers every window."""
    by_index = {w.index: w for w in run.request_windows}
    sends = [by_index[i].sends if i in by_index else None for i, _, _ in spans]
    if spans and all(s is not None and s > 0 for s in sends):
        seconds = np.array([max(b - a, 1e-9) for _, a, b in spans])
        counts = np.array(sends, dtype=float)
        return LoadSeries(counts / seconds, "offered rate", "req/s", counts, _mid_times(spans))
    return _running_load(run, spans)


def _mid_times(spans: list[tuple[int, float, float]]) -> np.ndarray:
    return np.array([(a + b) / 2 for _, a, b in spans])


def _running_load(run: RunData, spans: list[tuple[int, float, float]]) -> LoadSeries | None:
    server = run.server
    if server is None or server.running is None or not spans:
        return None
    means = []
    for _, start_s, end_s in spans:
        inside = (server.t_s >= start_s) & (server.t_s < end_s) & np.isfinite(server.running)
        if not inside.any():
            return None
        means.append(float(server.running[inside].mean()))
    values = np.array(means)
    # No times: in-flight requests grow with latency (Little's law), so a creep would make this
    # stand-in drift with time, and a drift alone must not send a creep to the load fit.
    return LoadSeries(values, "mean in-flight requests", "in flight") if (values > 0).all() else None


@dataclass(frozen=True)
class LoadFit:
    """`fit_with_load`'s answer; slopes per second of the log series, at equal load."""

    n: int
    t0_s: float
    span_s: float
    slope_per_s: float
    se_per_s: float
    ci_per_s: tuple[float, float]
    p_value: float
    intercept: float
    elasticity: float
    collinearity: float
    adjusted: np.ndarray

    @property
    def separable(self) -> bool:
        return self.collinearity <= MAX_COLLINEARITY


def fit_with_load(t_s: np.ndarray, y: np.ndarray, load: np.ndarray, confidence: float) -> LoadFit:
    """Robust fit of y on [1, t − t0, x, x²] (x the centred log load) with a HAC standard error on t; the time
    coefficient's interval and p are the wider and the larger of that fit's and one with x³ too, where time explains
    more than `CUBIC_FROM_R2` of the load terms (else the two agree, and the second fit is not made).

    Where load moves with time (a run that starts on the evening's decline sees load fall all run), the time
    coefficient takes whatever of the load's effect the load terms cannot: a queue's latency steepens towards its
    peak faster than a quadratic in log load follows. A creep at equal load must stand under the cubic as well.
    `adjusted` is y with the load terms taken out (the series at the mean load), for the step gate.
    """
    t0_s = float(t_s[0])
    x = np.log(load) - np.log(load).mean()
    design = np.column_stack([np.ones_like(y), t_s - t0_s, x, x * x - (x * x).mean()])
    coef, slope, se, ci, p_value = _time_coefficient(design, y, confidence)
    collinearity = _r_squared(design[:, 1], design[:, [0, 2, 3]])
    if collinearity > CUBIC_FROM_R2:
        _, _, cubic_se, cubic_ci, cubic_p = _time_coefficient(np.column_stack([design, x ** 3 - (x ** 3).mean()]),
                                                               y, confidence)
        se, ci, p_value = max(se, cubic_se), (min(ci[0], cubic_ci[0]), max(ci[1], cubic_ci[1])), max(p_value, cubic_p)
    return LoadFit(n=int(y.size), t0_s=t0_s, span_s=float(t_s[-1] - t0_s), slope_per_s=slope,
                   se_per_s=se, ci_per_s=ci, p_value=p_value, intercept=float(coef[0]), elasticity=float(coef[2]),
                   collinearity=collinearity, adjusted=y - design[:, 2:] @ coef[2:])


def _time_coefficient(design: np.ndarray, y: np.ndarray, confidence: float
                      ) -> tuple[np.ndarray, float, float, tuple[float, float], float]:
    """Huber fit of y on `design` (time in column 1): (coefficients, slope, its standard error, CI, p)."""
    coef, psi, slope_of_psi = huber_fit(design, y)
    se = max(_hac_se(design, psi, slope_of_psi, 1), _ar1_se(design, psi, slope_of_psi, 1))
    df = max(y.size - design.shape[1], 1)
    z = float(student_t.ppf(0.5 + confidence / 2, df))
    slope = float(coef[1])
    p_value = float(2 * student_t.sf(abs(slope) / se, df)) if se > 0 else (0.0 if slope else 1.0)
    return coef, slope, se, (slope - z * se, slope + z * se), p_value


def huber_fit(design: np.ndarray, y: np.ndarray, tuning: float = HUBER_C) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Huber M-estimate by iteratively reweighted least squares: (coefficients, ψ(residuals),
    ψ'(residuals)). A stall window's P99 can sit ten times above its neighbours; least squares
    would let it tilt the fit, Huber's ψ caps its pull at `tuning` robust standard deviations."""
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    cap = 0.0
    for _ in range(MAX_ITERATIONS):
        residuals = y - design @ coef
        scale = MAD_TO_SD * float(np.median(np.abs(residuals - np.median(residuals))))
        cap = tuning * max(scale, 1e-12)
        weights = np.minimum(1.0, cap / np.maximum(np.abs(residuals), 1e-300))
        root = np.sqrt(weights)
        new, *_ = np.linalg.lstsq(design * root[:, None], y * root, rcond=None)
        done = np.allclose(new, coef, rtol=0, atol=1e-10)
        coef = new
        if done:
            break
    residuals = y - design @ coef
    return coef, np.clip(residuals, -cap, cap), (np.abs(residuals) <= cap).astype(float)


def _ar1_se(design: np.ndarray, psi: np.ndarray, slope_of_psi: np.ndarray, column: int) -> float:
    """The M-estimator's standard error for independent points, (Σψ²/(n−k))/(mean ψ')²·(X'X)⁻¹,
    widened by sqrt((1 + φ)/(1 − φ)) for the lag-1 autocorrelation φ of ψ, as trend.widen does."""
    n, k = design.shape
    mean_slope = max(float(slope_of_psi.mean()), 1.0 / n)
    variance = float(psi @ psi) / max(n - k, 1) / mean_slope ** 2
    bread = np.linalg.pinv(design.T @ design)
    phi = _lag1(psi, k)
    return float(math.sqrt(max(bread[column, column] * variance, 0.0) * (1 + phi) / (1 - phi)))


def _lag1(residuals: np.ndarray, k: int) -> float:
    """Lag-1 autocorrelation of regression residuals, corrected for its small-sample bias and
    clamped to [0, 0.9]. With ~50 windows the raw estimate reads φ = 0.5 as ~0.37 (Kendall's
    −(1 + 3φ)/n, and −k/n for the k fitted coefficients), which would make the CI ~20 % too narrow."""
    n = residuals.size
    centred = residuals - residuals.mean()
    denominator = float(centred @ centred)
    if n < 4 or denominator <= 0:
        return 0.0
    raw = float(centred[:-1] @ centred[1:]) / denominator
    return float(np.clip(raw + (1 + 3 * raw) / n + k / n, 0.0, 0.9))


def _hac_se(design: np.ndarray, psi: np.ndarray, slope_of_psi: np.ndarray, column: int) -> float:
    """Newey–West sandwich (Bartlett weights, lag ⌊4(n/100)^(2/9)⌋, small-sample n/(n−k)) of the
    M-estimator: bread (X'·diag ψ'·X)⁻¹, meat the autocovariances of the scores x·ψ."""
    n, k = design.shape
    lags = max(1, int(4 * (n / 100) ** (2 / 9)))
    scores = design * psi[:, None]
    meat = scores.T @ scores
    for lag in range(1, lags + 1):
        weight = 1 - lag / (lags + 1)
        cross = scores[lag:].T @ scores[:-lag]
        meat += weight * (cross + cross.T)
    bread = np.linalg.pinv(design.T @ (design * slope_of_psi[:, None]))
    cov = bread @ meat @ bread * n / max(n - k, 1)
    return float(math.sqrt(max(cov[column, column], 0.0)))


def _r_squared(target: np.ndarray, others: np.ndarray) -> float:
    """R² of target regressed on the other columns (which include the constant)."""
    coef, *_ = np.linalg.lstsq(others, target, rcond=None)
    residual = target - others @ coef
    total = float(((target - target.mean()) ** 2).sum())
    return 1.0 - float(residual @ residual) / total if total > 0 else 1.0


def decelerates(t_s: np.ndarray, y: np.ndarray, p_value: float) -> bool:
    """Whether y bends towards a level: in a robust fit of y on [1, τ, τ²] (τ the time scaled to
    0–1) the curvature opposes the slope, significant at `p_value` with the AR(1)-widened error."""
    tau = (t_s - t_s[0]) / max(float(t_s[-1] - t_s[0]), 1e-9)
    design = np.column_stack([np.ones_like(y), tau, tau * tau - (tau * tau).mean()])
    coef, psi, slope_of_psi = huber_fit(design, y)
    se = _ar1_se(design, psi, slope_of_psi, 2)
    df = max(y.size - design.shape[1], 1)
    bends_back = coef[1] * coef[2] < 0
    return bool(bends_back and se > 0 and 2 * student_t.sf(abs(coef[2]) / se, df) < p_value)
