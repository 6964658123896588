"""Goodput: `goodput.decay` and `goodput.floor`, judged on each window's share of requests that met every SLO target
(`--slo`; docs/gates.md, "Goodput").

A window's share is its requests that met every target (`slo_met`) ÷ its finished requests; cancelled requests are
left out and failed ones count as not good, as `vllm bench serve --goodput` and DistServe count them. Both checks
are SKIPPED on a run that set no SLO.

* `goodput.decay`: the trend of the share over the judged windows (trend.py, fed the share that missed, so that
  bad is up): FAIL when the share is projected to fall by at least `decay_abs` over the judged span, or falls by that
  much in one lasting step (steps.py, the late onset a straight line under-reads); PASS only when the CI's upper end
  rules a fall of `decay_abs` out. A server near its capacity misses more of its SLO at a higher load, so when the
  offered rate varies over the judged windows (a daily cycle, a `wave`) the fall is the time coefficient of a fit
  that takes the load out (load_model.py, as for latency creep), and the step gate runs on the share at equal load.
* `goodput.floor`: each judged window against `floor` as a binomial proportion, with exact (Clopper–Pearson) bounds
  simultaneous over the windows (Bonferroni): FAIL when some window is under the floor beyond doubt (its upper bound
  at p_value under it); PASS only when every window's lower bound at `confidence` is at or above it; SUSPECT when a
  window's own share is under the floor but not beyond doubt; else INCONCLUSIVE (windows too small to tell).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta

from soak.analysis.evidence import detection_sentence, settle_step, trend_caveats, trend_sentence
from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SUSPECT, Finding, Trend, inconclusive, skipped
from soak.analysis.fmt import duration_text, p_text, pct_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData, WindowRequests
from soak.analysis.load_model import LoadFit, LoadSeries, fit_with_load, offered_load
from soak.analysis.step_records import StepResult
from soak.analysis.steps import find_step
from soak.analysis.trend import TrendResult, TrendSpec, assess_trend, trend_verdict

DECAY, FLOOR = "goodput.decay", "goodput.floor"
LABELS = {"ttft": "TTFT", "itl": "mean ITL", "tpot": "TPOT", "e2e": "E2E"}
WHERE = "see the goodput chart beside the TTFT, ITL and E2E charts"


def slo_text(slo: Mapping[str, float] | None) -> str:
    """`TTFT ≤ 500 ms, E2E ≤ 20 s`, or `the SLO` when the targets are not known."""
    if not slo:
        return "the SLO"
    return ", ".join(f"{LABELS.get(key, key)} ≤ {ms / 1000:g} s" if ms >= 1000 else f"{LABELS.get(key, key)} ≤ {ms:g} ms"
                     for key, ms in slo.items())


@dataclass(frozen=True)
class GoodputWindow:
    """One judged window's goodput: `good` of `requests` met every target."""

    index: int
    start_s: float
    end_s: float
    requests: int
    good: int

    @property
    def share(self) -> float:
        return self.good / self.requests

    @property
    def mid_s(self) -> float:
        return 0.5 * (self.start_s + self.end_s)


def goodput_windows(run: RunData) -> list[GoodputWindow] | None:
    """The judged windows with finished requests and their SLO counts; None when the run counted none (no SLO)."""
    if not any(w.slo_met is not None for w in run.request_windows):
        return None
    judged = run.judged_indices()
    return [_window(w) for w in run.request_windows if w.index in judged and w.requests > 0 and w.slo_met is not None]


def _window(row: WindowRequests) -> GoodputWindow:
    return GoodputWindow(row.index, row.start_s, row.end_s, row.requests, min(int(row.slo_met or 0), row.requests))


def _no_slo(check: str) -> Finding:
    return skipped(check, "The run set no SLO (--slo ttft=…,itl=…,e2e=…), so no request was judged against one.",
                   slo_set=False)


# ---- goodput.decay ----------------------------------------------------------------------------------------

def check_decay(run: RunData, gates: Gates) -> Finding:
    """The share's trend over the run, and the step gate for a late, lasting fall."""
    windows = goodput_windows(run)
    if windows is None:
        return _no_slo(DECAY)
    if len(windows) < gates.min_windows:
        return inconclusive(DECAY, f"Only {len(windows)} judged windows with requests (< {gates.min_windows} "
                            "needed) for a goodput trend.", details={"slo_set": True, "windows_used": len(windows)})
    t_s = np.array([w.mid_s for w in windows])
    missed = np.array([1.0 - w.share for w in windows])
    spec = gates.trend_spec(gates.goodput.decay_abs / max(float(t_s[-1] - t_s[0]), 1.0))
    load = offered_load(run, [(w.index, w.start_s, w.end_s) for w in windows])
    if load is not None and load.varies():
        return _decay_at_load(run, windows, t_s, missed, load, spec, gates)
    result = assess_trend(t_s, missed, spec)
    subject = f"The share of requests meeting {slo_text(run.slo)}"
    evidence = trend_sentence(result, subject, f"{100 * result.slope_per_s * result.span_s:.2f} pp over the run",
                              _ci_text(result), f"{100 * gates.goodput.decay_abs:g} pp", gates.confidence,
                              verbs=("falls", "rises"))
    details = {"method": "trend over time", "mk_p": result.mk_p}
    return _decay_finding(run, windows, result, _step(t_s, missed, gates), evidence, details, gates)


def _step(t_s: np.ndarray, missed: np.ndarray, gates: Gates) -> StepResult | None:
    return find_step(t_s, missed, gates.step_spec(gates.goodput.decay_abs, min_points=gates.min_windows))


def _ci_text(result: TrendResult) -> str:
    low, high = (100 * s * result.span_s for s in result.ci_per_s)
    return f"{low:+.2f} to {high:+.2f} pp"


def _decay_at_load(run: RunData, windows: list[GoodputWindow], t_s: np.ndarray, missed: np.ndarray,
                   load: LoadSeries, spec: TrendSpec, gates: Gates) -> Finding:
    """Varying load: the time coefficient of the missed share on [t, log load, log load²]."""
    fit = fit_with_load(t_s, missed, load.values, gates.confidence)
    result = _load_result(fit, spec)
    details = {"method": "trend at equal load", "hac_p": fit.p_value, "load_source": load.source,
               "load_min": float(load.values.min()), "load_max": float(load.values.max()),
               "time_load_r2": fit.collinearity}
    load_text = f"at equal {load.source} ({load.range_text()})"
    if not fit.separable:
        return inconclusive(DECAY, f"The {load.source} moved with time ({load.range_text()}, R² {fit.collinearity:.2f} of "
                            "time on load), so a fall of goodput cannot be told from goodput following load; a run "
                            "with the load held (or moved up and down) can tell",
                            details={"slo_set": True, "slo_ms": dict(run.slo or {}), **details},
                            next_step="hold the load steady (or move it up and down) through a run")
    fall = 100 * fit.slope_per_s * fit.span_s
    verb = "falls" if fall > 0 else "rises" if fall < 0 else "is flat at"
    caveats = trend_caveats(result, f"{100 * gates.goodput.decay_abs:g} pp")
    evidence = (f"The share of requests meeting {slo_text(run.slo)} {load_text} {verb} {abs(fall):.2f} pp over the run "
                f"({100 * gates.confidence:g} % CI {_ci_text(result)}), HAC {p_text(fit.p_value)}; "
                + (caveats or f"threshold {100 * gates.goodput.decay_abs:g} pp"))
    return _decay_finding(run, windows, result, _step(t_s, fit.adjusted, gates), evidence, details, gates)


def _load_result(fit: LoadFit, spec: TrendSpec) -> TrendResult:
    """The load fit judged by the gates of `assess_trend`'s line (HAC p for Mann–Kendall's), as latency creep
    judges it."""
    low, high = fit.ci_per_s
    gates = {"significant": fit.p_value < spec.p_value, "ci_above_half": low > spec.min_slope_per_s / 2,
             "practical": fit.slope_per_s >= spec.min_slope_per_s}
    return TrendResult(verdict=trend_verdict(gates, fit.slope_per_s, high, spec.min_slope_per_s), n=fit.n,
                       t0_s=fit.t0_s, span_s=fit.span_s, slope_per_s=fit.slope_per_s, ci_per_s=fit.ci_per_s,
                       intercept=fit.intercept, mk_p=fit.p_value, min_slope_per_s=spec.min_slope_per_s, gates=gates)


def _decay_finding(run: RunData, windows: list[GoodputWindow], result: TrendResult, step: StepResult | None,
                   evidence: str, details: dict, gates: Gates) -> Finding:
    """The finding of either path: the trend's verdict, made a FAIL by a lasting step the trend fell short of."""
    span = result.span_s
    fall, low, high = (100 * s * span for s in (result.slope_per_s, *result.ci_per_s))
    threshold = 100 * gates.goodput.decay_abs
    details = {"slo_set": True, "slo_ms": dict(run.slo or {}), "windows_used": result.n, "gates": result.gates,
               "series_unit": "fraction", "share_mean": _pooled(windows), **details}
    verdict, value, ci = result.verdict, fall, (low, high)
    if step is not None:
        details["step"] = step.to_dict()
    if step is not None and step.found and verdict != FAIL:
        verdict, value, ci = FAIL, 100 * step.shift, None  # the step's size; the trend's CI stays in details
        details["trend_ci"] = [low, high]
        evidence += "; " + _step_text(step)
    sentence = detection_sentence(result, lambda s: f"{100 * s * span:.2f} pp")
    if sentence and verdict != FAIL:
        evidence += "; " + sentence.replace("rises above", "falls of more than")
    first_share, slope = 1.0 - result.intercept, -result.slope_per_s
    return Finding(check=DECAY, verdict=verdict, value=value, unit="pp fall over run", ci=ci, threshold=threshold,
                   evidence=evidence, trend=Trend(slope, first_share, result.t0_s),
                   detection_limit=high if ci else None, details=details,
                   next_step=WHERE if verdict == FAIL else settle_step(result, lambda s: f"a {100 * s * span:.2f} pp fall"))


def _pooled(windows: list[GoodputWindow]) -> float:
    return sum(w.good for w in windows) / sum(w.requests for w in windows)


def _step_text(step: StepResult) -> str:
    return (f"the share fell from {pct_text(1 - step.before)} to {pct_text(1 - step.after)} at "
            f"{duration_text(step.t_s)} and stayed (step gate {p_text(step.p_value)})")


# ---- goodput.floor ----------------------------------------------------------------------------------------

def clopper_pearson(good: int, requests: int, alpha: float) -> tuple[float, float]:
    """One-sided exact bounds at level `alpha` each: the lowest and highest share this count rules in."""
    low = 0.0 if good == 0 else float(beta.ppf(alpha, good, requests - good + 1))
    high = 1.0 if good == requests else float(beta.ppf(1 - alpha, good + 1, requests - good))
    return low, high


@dataclass(frozen=True)
class FloorWindow:
    """A window's share with its upper bound at the FAIL level and its lower bound at the PASS level."""

    window: GoodputWindow
    upper_fail: float
    lower_pass: float


def floor_windows(windows: list[GoodputWindow], gates: Gates) -> list[FloorWindow]:
    """Each window's bounds, Bonferroni over the windows: p_value for a FAIL, 1 − confidence for a PASS."""
    count = len(windows)
    fail_alpha, pass_alpha = gates.p_value / count, (1 - gates.confidence) / count
    return [FloorWindow(w, clopper_pearson(w.good, w.requests, fail_alpha)[1],
                        clopper_pearson(w.good, w.requests, pass_alpha)[0]) for w in windows]


def check_floor(run: RunData, gates: Gates) -> Finding:
    """Whether any judged window's share of good requests is under the floor."""
    windows = goodput_windows(run)
    if windows is None:
        return _no_slo(FLOOR)
    if not windows:
        return inconclusive(FLOOR, "No judged window had finished requests to hold against the floor.",
                            details={"slo_set": True})
    floor = gates.goodput.floor
    bounded = floor_windows(windows, gates)
    under = [b for b in bounded if b.upper_fail < floor]
    below = [b for b in bounded if b.window.share < floor]
    unsure = [b for b in bounded if b.lower_pass < floor]
    verdict = FAIL if under else SUSPECT if below else INCONCLUSIVE if unsure else PASS
    worst = _worst(bounded, verdict)
    details = {"slo_set": True, "slo_ms": dict(run.slo or {}), "floor": floor, "windows": len(bounded),
               "windows_under_beyond_doubt": len(under), "windows_under": len(below),
               "windows_not_shown_above": len(unsure), "worst_window": _window_dict(worst),
               "share_min": min(w.share for w in windows)}
    return Finding(check=FLOOR, verdict=verdict, value=100 * worst.window.share, unit="% of requests good",
                   ci=(100 * worst.lower_pass, 100 * worst.upper_fail), threshold=100 * floor,
                   evidence=_floor_text(verdict, worst, len(under), len(below), len(unsure), len(bounded),
                                        floor, run.slo),
                   details=details, next_step=_floor_next(verdict, worst, floor))


def _worst(bounded: list[FloorWindow], verdict: str) -> FloorWindow:
    """The window the verdict rests on: the one most surely under the floor, or (PASS, INCONCLUSIVE) the one least
    surely above it."""
    if verdict in (FAIL, SUSPECT):
        return min(bounded, key=lambda b: (b.upper_fail, b.window.share))
    return min(bounded, key=lambda b: b.lower_pass)


def _window_dict(b: FloorWindow) -> dict:
    w = b.window
    return {"index": w.index, "start_s": w.start_s, "end_s": w.end_s, "requests": w.requests, "good": w.good,
            "share": w.share, "lower": b.lower_pass, "upper": b.upper_fail}


def _where(b: FloorWindow) -> str:
    w = b.window
    return f"{pct_text(w.share)} of {w.requests} requests in the window at {duration_text(w.start_s)}"


def _floor_text(verdict: str, worst: FloorWindow, under: int, below: int, unsure: int, count: int, floor: float,
                slo: Mapping[str, float] | None) -> str:
    target = f"{pct_text(floor, 0)} of requests within {slo_text(slo)}"
    if verdict == FAIL:
        return (f"{under} of {count} judged windows fell under {target} beyond doubt; the worst: {_where(worst)} "
                f"(its upper bound {pct_text(worst.upper_fail)})")
    if verdict == SUSPECT:
        return (f"{below} of {count} judged windows are under {target}, none beyond doubt (lowest: {_where(worst)}, "
                f"its upper bound {pct_text(worst.upper_fail)})")
    if verdict == INCONCLUSIVE:
        return (f"No judged window is under {target}, but {unsure} of {count} hold too few requests to show they "
                f"are above it (weakest: {_where(worst)}, its lower bound {pct_text(worst.lower_pass)})")
    return (f"Every one of {count} judged windows kept ≥ {target}: the weakest, {_where(worst)}, has a lower bound of "
            f"{pct_text(worst.lower_pass)} (simultaneous over the windows)")


def _floor_next(verdict: str, worst: FloorWindow, floor: float) -> str | None:
    if verdict == PASS:
        return None
    if verdict == FAIL:
        return WHERE + f" at {duration_text(worst.window.start_s)}"
    return ("longer windows or a higher rate would settle it: a window needs more requests to tell "
            f"{pct_text(worst.window.share)} from the {pct_text(floor, 0)} floor")
