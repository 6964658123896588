"""Latency creep: `creep.ttft_p99`, `creep.itl_p99`, `creep.e2e_p99`.

The series is log(window percentile), so a creep is judged as a relative rise and one stall window
cannot dominate. A window supports P99 with ≥ 1000 samples, P95 with ≥ 200, P90 with ≥ 100
(docs/gates.md); one level is used for the whole series — the highest that a majority of judged windows
and at least `min_windows` of them support — and windows below it are left out.
"""

from __future__ import annotations

import math

import numpy as np

from soak.analysis.evidence import trend_sentence
from soak.analysis.findings import Finding, inconclusive, skipped
from soak.analysis.fmt import ms_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData
from soak.analysis.trend import TrendResult, assess_trend

PERCENTILE_LEVELS = (("p99", 1000), ("p95", 200), ("p90", 100))
METRIC_LABELS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E latency"}


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
    log_ms = np.log(np.maximum([v for _, v in kept], 1e-9))
    span_s = max(float(t_s.max() - t_s.min()), 1.0)
    spec = gates.trend_spec(math.log1p(rise_frac) / span_s)
    result = assess_trend(t_s, log_ms, spec)
    return _creep_finding(check, metric, level, result, rise_frac, len(rows), gates.confidence)


def _too_few_text(metric: str, rows: list, usable: int, min_windows: int) -> str:
    return (f"Only {usable} of {len(rows)} judged windows have ≥ 100 {METRIC_LABELS[metric]} "
            f"samples (P90 or better needs them; < {min_windows} usable windows).")


def _rise_pct(log_change: float) -> float:
    return 100.0 * math.expm1(log_change)


def _creep_finding(check: str, metric: str, level: str, result: TrendResult, rise_frac: float,
                   judged: int, confidence: float) -> Finding:
    span = result.span_s
    rise = _rise_pct(result.slope_per_s * span)
    low, high = (_rise_pct(c * span) for c in result.ci_per_s)
    start_ms = math.exp(result.intercept)
    end_ms = math.exp(result.intercept + result.slope_per_s * span)
    subject = f"{level.upper()} {METRIC_LABELS[metric]}"
    evidence = trend_sentence(result, subject, f"{rise:+.1f} % over the run",
                              f"{low:+.1f} to {high:+.1f} %", f"+{100 * rise_frac:g} %", confidence)
    evidence += f"; fitted {ms_text(start_ms)} → {ms_text(end_ms)}"
    return Finding(
        check=check, verdict=result.verdict, value=rise, unit="% over run", ci=(low, high),
        threshold=100 * rise_frac, evidence=evidence, percentile_used=level,
        trend=result.line("log"),
        details={"windows_used": result.n, "windows_judged": judged, "mk_p": result.mk_p,
                 "gates": result.gates, "span_s": span, "series_unit": "ms",
                 "fitted_start_ms": start_ms, "fitted_end_ms": end_ms})
