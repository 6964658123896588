"""Latency creep: `creep.ttft_p99`, `creep.itl_p99`, `creep.e2e_p99`.

The series is log(window percentile), so a creep is judged as a relative rise and one stall window
cannot dominate. A window supports P99 with ≥ 1000 samples, P95 with ≥ 200, P90 with ≥ 100
(docs/gates.md); one level is used for the whole series — the highest that a majority of judged windows
and at least `min_windows` of them support — and windows below it are left out.

Latency follows load, so when the offered rate varies over the judged windows (a diurnal pattern, a
`ramp` or `wave` phase) or moves with time at all, the creep is the time coefficient of a fit that takes the load out
(load_model.py): a server is only degrading if it is slower at the same load. With flat load the
Theil–Sen / Mann–Kendall trend of trend.py decides, as for every other trend check. Either way the
step gate (steps.py) runs on the same series (load-adjusted when the load varies), so a lasting jump
of at least the threshold late in the run FAILs even where a straight line under-reads it.

Each percentile series judges from the end of its own warm-up, found from the data (warmup.py, on the
series at the mean load when the load varies), never before the configured one; the cut is in
`details["warmup"]` under the series' name ("P99 TTFT"), drawn on its chart. A series still settling
at the end of the run is INCONCLUSIVE, never FAIL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from soak.analysis.evidence import detection_sentence, settle_step, trend_caveats, trend_sentence
from soak.analysis.findings import FAIL, INCONCLUSIVE, Finding, inconclusive, skipped
from soak.analysis.fmt import duration_text, ms_text, p_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData
from soak.analysis.load_model import LoadFit, LoadSeries, decelerates, fit_with_load, offered_load
from soak.analysis.step_records import StepResult
from soak.analysis.steps import find_step
from soak.analysis.trend import TrendResult, TrendSpec, assess_trend, trend_verdict
from soak.analysis.warmup import WarmupCut, settle_index

PERCENTILE_LEVELS = (("p99", 1000), ("p95", 200), ("p90", 100))
METRIC_LABELS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E latency", "server_itl": "ITL at the server"}


def check_ttft(run: RunData, gates: Gates) -> Finding:
    return check_creep(run, gates, "ttft", gates.creep.ttft_p99.rise_frac)


def check_itl(run: RunData, gates: Gates) -> Finding:
    return check_creep(run, gates, "itl", gates.creep.itl_p99.rise_frac)


def check_e2e(run: RunData, gates: Gates) -> Finding:
    return check_creep(run, gates, "e2e", gates.creep.e2e_p99.rise_frac)


def choose_level(counts: list[int], min_windows: int) -> tuple[str, int]:
    """The percentile level for the whole series and how many windows support it."""
    for level, need in PERCENTILE_LEVELS:
        usable = sum(count >= need for count in counts)
        if usable >= min_windows and usable > len(counts) / 2:
            return level, usable
    level, need = PERCENTILE_LEVELS[-1]
    return level, sum(count >= need for count in counts)


@dataclass(frozen=True)
class CreepSeries:
    """What one creep check judges: log(percentile) per kept window and how it was chosen."""

    check: str
    metric: str
    level: str
    rise_frac: float
    judged: int
    t_s: np.ndarray
    log_ms: np.ndarray
    spans: list[tuple[int, float, float]]
    run_span_s: float  # the judged span before any warm-up cut: a rise "over the run" is the rate over it

    @property
    def level_label(self) -> str:
        """How a sentence names the level: "P99" for a percentile, "Mean" for a server's mean."""
        return self.level.upper() if self.level.startswith("p") else self.level.capitalize()

    @property
    def subject(self) -> str:
        return f"{self.level_label} {METRIC_LABELS[self.metric]}"

    def from_index(self, first: int) -> CreepSeries:
        """The series from its `first` point on (the warm-up found from the data dropped)."""
        return replace(self, t_s=self.t_s[first:], log_ms=self.log_ms[first:], spans=self.spans[first:])


def check_creep(run: RunData, gates: Gates, metric: str, rise_frac: float) -> Finding:
    check = f"creep.{metric}_p99"
    judged = run.judged_indices()
    rows = [(w, w.stats(metric)) for w in run.latency_windows if w.index in judged]
    rows = [(w, s) for w, s in rows if s is not None and s.count > 0]
    if not rows:
        return skipped(check, f"No {METRIC_LABELS[metric]} samples in the judged windows.")
    level, usable = choose_level([s.count for _, s in rows], gates.min_windows)
    if usable < gates.min_windows:
        return inconclusive(check, _too_few_text(metric, rows, usable, gates.min_windows),
                            percentile_used=level, details={"usable_windows": usable})
    need = dict(PERCENTILE_LEVELS)[level]
    kept = [(w, s.percentile_ms(level)) for w, s in rows if s.count >= need]
    t_s = np.array([w.end_s * 0.5 + w.start_s * 0.5 for w, _ in kept])
    series = CreepSeries(
        check, metric, level, rise_frac, len(rows), t_s=t_s,
        log_ms=np.log(np.maximum([v for _, v in kept], 1e-9)),
        spans=[(w.index, w.start_s, w.end_s) for w, _ in kept],
        run_span_s=max(float(t_s.max() - t_s.min()), 1.0))
    return judge_creep(run, series, gates)


def judge_creep(run: RunData, series: CreepSeries, gates: Gates) -> Finding:
    """The creep finding of a log-latency series: from the end of its warm-up (found from the data), the trend at
    equal offered load when the load varies, else over time, with the step gate beside either."""
    load = offered_load(run, series.spans)
    cut = warmup_cut(series, load, run.warmup_s, gates)
    if cut.still_settling:
        return _settling_finding(series, cut)
    if series.t_s.size - cut.index < gates.min_windows:
        return _short_after_warmup_finding(series, cut, gates.min_windows)
    if cut.index > 0:
        series = series.from_index(cut.index)
        load = offered_load(run, series.spans)
    finding = _creep_at_load(series, load, gates) if load is not None and load.matters() else \
        _creep_over_time(series, gates)
    finding.details["warmup"] = {series.subject: cut.to_dict()}
    return finding


def warmup_cut(series: CreepSeries, load: LoadSeries | None, floor_s: float, gates: Gates) -> WarmupCut:
    """Where the series' warm-up ends, from the data (warmup.py), never before the configured one.
    Under a varying load it is found on the series at the mean load, so a run that starts at the
    day's peak is not taken for one still settling."""
    values = series.log_ms
    if load is not None and load.matters() and series.t_s.size > 4:
        values = fit_with_load(series.t_s, series.log_ms, load.values, gates.confidence).adjusted
    cut = settle_index(series.t_s, values, floor_s)
    if cut.still_settling and not decelerates(series.t_s, values, gates.p_value):
        # A window percentile is noisier than memory: the thirds of a straight creep slow down by
        # chance in about one run in ten; "still settling" needs the bend itself to be significant.
        return WarmupCut(float(series.t_s[0]), 0, floor_s=floor_s)
    return cut


def _settling_finding(series: CreepSeries, cut: WarmupCut) -> Finding:
    """A percentile still settling at the end of the run: no creep can be told from its warm-up."""
    longer = duration_text(_longer_s(series, cut))
    return _warmup_inconclusive(
        series, cut, f"{series.subject} was still warming up at the end of the run: it moved fastest early and "
        "still moves in the second half, so this run cannot tell where it settles or whether it then creeps; "
        f"run ≥ {longer} longer.",
        f"run ≥ {longer} longer, so the {series.subject} warm-up ends in the first half of what is judged")


def _short_after_warmup_finding(series: CreepSeries, cut: WarmupCut, min_windows: int) -> Finding:
    """A warm-up found from the data that leaves too few windows to judge: on a short run a creep that rises
    fastest early looks like an approach, and a warm-up like a creep; only a longer run tells them apart."""
    kept = series.t_s.size - cut.index
    longer = duration_text(_longer_s(series, cut))
    return _warmup_inconclusive(
        series, cut, f"{series.subject} moved fastest early and settled only at {duration_text(cut.t_s)} (warm-up "
        f"found from the data), which leaves {kept} judged windows (< {min_windows} needed) to tell a creep from "
        f"the warm-up; run ≥ {longer} longer.",
        f"run ≥ {longer} longer, so {min_windows} windows or more follow the {series.subject} warm-up")


def _longer_s(series: CreepSeries, cut: WarmupCut) -> float:
    """How much longer to run: as long again as the series so far, from the configured warm-up."""
    return max(float(series.t_s[-1]) - cut.floor_s, 0.0)


def _warmup_inconclusive(series: CreepSeries, cut: WarmupCut, evidence: str, next_step: str) -> Finding:
    """INCONCLUSIVE for a warm-up this run cannot see past, with the cut in the details."""
    return inconclusive(
        series.check, evidence, percentile_used=series.level, threshold=100 * series.rise_frac, unit="% over run",
        next_step=next_step,
        details={"warmup": {series.subject: cut.to_dict()}, "windows_judged": series.judged, "series_unit": "ms"})


def _too_few_text(metric: str, rows: list, usable: int, min_windows: int) -> str:
    return (f"Only {usable} of {len(rows)} judged windows have ≥ 100 {METRIC_LABELS[metric]} "
            f"samples (P90 or better needs them; < {min_windows} usable windows).")


def _rise_pct(log_change: float) -> float:
    return 100.0 * math.expm1(log_change)


def _spec(series: CreepSeries, gates: Gates) -> TrendSpec:
    return gates.trend_spec(math.log1p(series.rise_frac) / series.run_span_s)


def _step(t_s: np.ndarray, log_ms: np.ndarray, series: CreepSeries, gates: Gates) -> StepResult | None:
    """The step gate on the log series: a lasting jump of at least log(1 + rise_frac), the
    change the threshold trend would make over the whole run."""
    return find_step(t_s, log_ms, gates.step_spec(math.log1p(series.rise_frac), min_points=gates.min_windows))


def _creep_over_time(series: CreepSeries, gates: Gates) -> Finding:
    """Flat load: the shared Theil–Sen / Mann–Kendall trend, plus the step gate."""
    result = assess_trend(series.t_s, series.log_ms, _spec(series, gates))
    span = series.run_span_s
    rise = _rise_pct(result.slope_per_s * span)
    low, high = (_rise_pct(c * span) for c in result.ci_per_s)
    evidence = trend_sentence(result, series.subject, f"{rise:+.1f} % over the run",
                              f"{low:+.1f} to {high:+.1f} %", f"+{100 * series.rise_frac:g} %", gates.confidence)
    details = {"windows_used": result.n, "mk_p": result.mk_p, "gates": result.gates, "method": "trend over time"}
    step = _step(series.t_s, series.log_ms, series, gates)
    return _creep_finding(series, result, evidence, details, step)


def _creep_at_load(series: CreepSeries, load: LoadSeries, gates: Gates) -> Finding:
    """Varying load: the time coefficient of log(percentile) on [t, log load, log load²]."""
    fit = fit_with_load(series.t_s, series.log_ms, load.values, gates.confidence)
    result = _fit_result(fit, _spec(series, gates))
    load_text = (f"at equal {load.source}: {load.range_text()}, "
                 f"{series.level_label} ∝ load^{fit.elasticity:.2f} taken out")
    details = {"windows_used": fit.n, "hac_p": fit.p_value, "gates": result.gates, "method": "trend at equal load",
               "load_source": load.source, "load_min": float(load.values.min()),
               "load_max": float(load.values.max()), "load_elasticity": fit.elasticity,
               "time_load_r2": fit.collinearity}
    if not fit.separable:
        return _collinear_finding(series, result, load, details, fit)
    evidence = _at_load_sentence(series, result, gates.confidence) + f"; {load_text}"
    step = _step(series.t_s, fit.adjusted, series, gates)
    return _creep_finding(series, result, evidence, details, step)


def _fit_result(fit: LoadFit, spec: TrendSpec) -> TrendResult:
    """The load fit in the shape every trend finding shares (mk_p holds the HAC t-test p), judged by
    the same gates as `assess_trend`'s line: p under the spec's share of p_value, the CI's lower end
    above half the threshold, the estimate at least the threshold."""
    low, high = fit.ci_per_s
    gates = {"significant": fit.p_value < spec.p_value, "ci_above_half": low > spec.min_slope_per_s / 2,
             "practical": fit.slope_per_s >= spec.min_slope_per_s}
    return TrendResult(verdict=trend_verdict(gates, fit.slope_per_s, high, spec.min_slope_per_s), n=fit.n,
                       t0_s=fit.t0_s, span_s=fit.span_s, slope_per_s=fit.slope_per_s, ci_per_s=fit.ci_per_s,
                       intercept=fit.intercept, mk_p=fit.p_value, min_slope_per_s=spec.min_slope_per_s,
                       gates=gates)


def _at_load_sentence(series: CreepSeries, result: TrendResult, confidence: float) -> str:
    span = series.run_span_s
    rise = _rise_pct(result.slope_per_s * span)
    low, high = (_rise_pct(c * span) for c in result.ci_per_s)
    verb = "rises" if rise > 0 else ("falls" if rise < 0 else "is flat at")
    text = (f"{series.subject} at equal load {verb} {abs(rise):.1f} % over the run "
            f"({100 * confidence:g} % CI {low:+.1f} to {high:+.1f} %), HAC {p_text(result.mk_p)}")
    threshold = f"+{100 * series.rise_frac:g} %"
    caveats = trend_caveats(result, threshold)
    return f"{text}; {caveats}" if caveats else f"{text}; threshold {threshold}"


def _collinear_finding(series: CreepSeries, result: TrendResult, load: LoadSeries, details: dict,
                       fit: LoadFit) -> Finding:
    """Time and load moved together (a pure ramp): a creep cannot be told from latency following
    load, so no fitted rise is quoted as if it were one."""
    span = series.run_span_s
    low, high = (_rise_pct(c * span) for c in result.ci_per_s)
    evidence = (f"The {load.source} moved with time ({load.range_text()}, R² {fit.collinearity:.2f} of time "
                f"on load), so a {series.subject} creep cannot be told from latency following load; "
                "a run with the load held (or varied back and forth) can tell")
    details.update({"windows_judged": series.judged, "span_s": result.span_s, "series_unit": "ms"})
    return Finding(check=series.check, verdict=INCONCLUSIVE, value=_rise_pct(result.slope_per_s * span),
                   unit="% over run", ci=(low, high), threshold=100 * series.rise_frac, evidence=evidence,
                   percentile_used=series.level, detection_limit=high, details=details,
                   next_step="hold the load steady (or move it up and down) through a run: during a ramp a creep "
                   "cannot be told from latency following load")


def _creep_finding(series: CreepSeries, result: TrendResult, evidence: str, details: dict,
                   step: StepResult | None) -> Finding:
    """The finding of either path: the trend's verdict; a found step makes a trend short of FAIL a
    FAIL, with the step's size as the value (a steady creep also shows a "step" at its best split,
    so a trend that FAILs on its own keeps its fitted rise)."""
    span = series.run_span_s
    rise = _rise_pct(result.slope_per_s * span)
    low, high = (_rise_pct(c * span) for c in result.ci_per_s)
    start_ms = math.exp(result.intercept)
    end_ms = math.exp(result.intercept + result.slope_per_s * result.span_s)
    verdict, value, ci = result.verdict, rise, (low, high)
    if step is not None:
        details["step"] = step.to_dict()
    if step is not None and step.found and verdict != FAIL:
        # The value is now the step's size: the trend's CI is not its CI, so the row shows none (details keep it).
        verdict, value, ci = FAIL, _rise_pct(step.shift), None
        details["trend_ci"] = [low, high]
        evidence += "; " + _step_sentence(series, step)
    else:
        evidence += f"; fitted {ms_text(start_ms)} → {ms_text(end_ms)}"
    sentence = detection_sentence(result, lambda s: f"+{_rise_pct(s * span):.1f} %")
    if sentence and verdict != FAIL:
        evidence += f"; {sentence}"
    details.update({"windows_judged": series.judged, "span_s": result.span_s, "series_unit": "ms",
                    "fitted_start_ms": start_ms, "fitted_end_ms": end_ms})
    return Finding(check=series.check, verdict=verdict, value=value, unit="% over run", ci=ci,
                   threshold=100 * series.rise_frac, evidence=evidence, percentile_used=series.level,
                   trend=result.line("log"), detection_limit=high if ci else None, details=details,
                   next_step=settle_step(result, lambda s: f"+{_rise_pct(s * span):.1f} %"))


def _step_sentence(series: CreepSeries, step: StepResult) -> str:
    return (f"{series.subject} stepped up {_rise_pct(step.shift):.0f} % at {duration_text(step.t_s)} "
            f"({ms_text(math.exp(step.before))} → {ms_text(math.exp(step.after))}) and stayed "
            f"(step gate {p_text(step.p_value)}, threshold +{100 * series.rise_frac:g} %)")
