"""Error checks: `errors.rise` (trend), `errors.budget` (Wilson bound), `errors.bursts` (outliers)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom, nbinom, norm

from soak.analysis.evidence import trend_sentence
from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SUSPECT, Finding, inconclusive, skipped
from soak.analysis.fmt import duration_text, p_text, pct_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import RequestWindow, RunData
from soak.analysis.trend import assess_trend


def _judged_rows(run: RunData) -> list[RequestWindow]:
    judged = run.judged_indices()
    return [w for w in run.request_windows if w.index in judged and w.requests > 0]


def _class_counts(rows: list[RequestWindow]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        for name, n in row.errors.items():
            counts[name] = counts.get(name, 0) + int(n)
    return {k: v for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v}


def check_rise(run: RunData, gates: Gates) -> Finding:
    """Trend of window error rates; FAIL when the rate is projected to rise by ≥ rise_abs."""
    rows = _judged_rows(run)
    if not rows:
        return skipped("errors.rise", "No finished requests in the judged windows.")
    if len(rows) < gates.min_windows:
        return inconclusive("errors.rise", f"Only {len(rows)} judged windows with requests "
                            f"(< {gates.min_windows} needed) for a trend.")
    t_s = np.array([0.5 * (w.start_s + w.end_s) for w in rows])
    rates = np.array([w.error_count / w.requests for w in rows])
    span_s = max(float(t_s[-1] - t_s[0]), 1.0)
    spec = gates.trend_spec(gates.errors.rise_abs / span_s)
    result = assess_trend(t_s, rates, spec)
    change, low, high = (100 * s * result.span_s for s in (result.slope_per_s, *result.ci_per_s))
    evidence = trend_sentence(result, "The window error rate", f"{change:+.2f} pp over the run",
                              f"{low:+.2f} to {high:+.2f} pp", f"+{100 * gates.errors.rise_abs:g} pp",
                              gates.confidence)
    return Finding(check="errors.rise", verdict=result.verdict, value=change, unit="pp over run",
                   ci=(low, high), threshold=100 * gates.errors.rise_abs, evidence=evidence,
                   trend=result.line("linear"),
                   details={"windows_used": result.n, "mk_p": result.mk_p, "gates": result.gates,
                            "series_unit": "fraction"})


def wilson_interval(errors: int, n: int, confidence: float) -> tuple[float, float]:
    """Two-sided Wilson score interval of a binomial proportion."""
    z = float(norm.ppf(0.5 + confidence / 2))
    p_hat = errors / n
    denom = 1 + z * z / n
    centre = (p_hat + z * z / (2 * n)) / denom
    half = z * math.sqrt(p_hat * (1 - p_hat) / n + z * z / (4 * n * n)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def check_budget(run: RunData, gates: Gates) -> Finding:
    """Over the whole run after warm-up: FAIL when the observed rate exceeds the budget, PASS
    when the Wilson upper bound is within it, INCONCLUSIVE when too few requests to tell."""
    rows = [w for w in run.request_windows if w.start_s >= run.warmup_s - 1e-9]
    requests = sum(w.requests for w in rows)
    errors = sum(w.error_count for w in rows)
    if requests == 0:
        return skipped("errors.budget", "No finished requests after the warm-up.")
    budget = gates.errors.budget
    low, high = wilson_interval(errors, requests, gates.confidence)
    rate = errors / requests
    verdict = FAIL if rate > budget else (PASS if high <= budget else INCONCLUSIVE)
    return Finding(
        check="errors.budget", verdict=verdict, value=100 * rate, unit="%", ci=(100 * low, 100 * high),
        threshold=100 * budget, evidence=_budget_text(verdict, errors, requests, rate, high, budget, rows),
        details={"requests": requests, "errors": errors, "by_class": _class_counts(rows),
                 "cancelled": sum(w.cancelled for w in rows)})


def _budget_text(verdict: str, errors: int, requests: int, rate: float, high: float, budget: float,
                 rows: list[RequestWindow]) -> str:
    classes = ", ".join(f"{k} {v}" for k, v in _class_counts(rows).items())
    head = f"{errors} errors in {requests} requests ({pct_text(rate, 2)}"
    head += f": {classes})" if classes else ")"
    if verdict == FAIL:
        return f"{head} exceeds the {pct_text(budget, 2)} budget."
    if verdict == PASS:
        return f"{head}; 95 % upper bound {pct_text(high, 2)} is within the {pct_text(budget, 2)} budget."
    return (f"{head}; too few requests to show the rate is within the {pct_text(budget, 2)} budget "
            f"(95 % upper bound {pct_text(high, 2)}).")


@dataclass(frozen=True)
class ErrorBaseline:
    """The run's ordinary error level: pooled rate and negative-binomial overdispersion α
    (count variance = μ + α·μ²; α = 0 is plain binomial noise)."""

    rate: float
    alpha: float

    def tail_p(self, window: RequestWindow) -> float:
        """P(at least this many errors in the window) under the baseline."""
        mean = window.requests * min(self.rate, 1.0)
        if self.alpha <= 0:
            return float(binom.sf(window.error_count - 1, window.requests, min(self.rate, 1.0)))
        size = 1.0 / self.alpha
        return float(nbinom.sf(window.error_count - 1, size, size / (size + mean)))


def estimate_baseline(rows: list[RequestWindow]) -> ErrorBaseline:
    """Pooled rate and method-of-moments overdispersion of the given windows."""
    n = np.array([w.requests for w in rows], dtype=float)
    errors = np.array([w.error_count for w in rows], dtype=float)
    # A floor of half an error keeps a spotless baseline from making one error a "burst".
    rate = max(errors.sum(), 0.5) / max(n.sum(), 1.0)
    mean = n * rate
    excess = ((errors - mean) ** 2 - mean * (1 - rate)).sum()
    alpha = max(0.0, excess / (mean ** 2).sum()) if (mean ** 2).sum() > 0 else 0.0
    return ErrorBaseline(rate, alpha)


def find_bursts(rows: list[RequestWindow], gates: Gates) -> tuple[list[tuple[RequestWindow, float]], ErrorBaseline]:
    """Windows whose error count is far above the run's baseline: [(window, tail p)], baseline.

    Real error rates wander from window to window more than binomial noise allows, so the tail is
    negative-binomial with the overdispersion measured on the other windows. The baseline is
    re-estimated without the flagged windows (three passes), so a burst does not raise its own bar.
    """
    pooled = estimate_baseline(rows).rate
    # Start without the obvious candidates, or their excess would inflate the overdispersion.
    flagged = {w.index for w in rows if w.error_count >= gates.errors.burst_min_errors
               and w.error_count / w.requests >= gates.errors.burst_factor * pooled}
    baseline = ErrorBaseline(pooled, 0.0)
    for _ in range(3):
        baseline = estimate_baseline([w for w in rows if w.index not in flagged] or rows)
        flagged = {w.index for w in rows if _is_burst(w, baseline, gates)}
    return [(w, baseline.tail_p(w)) for w in rows if w.index in flagged], baseline


def _is_burst(window: RequestWindow, baseline: ErrorBaseline, gates: Gates) -> bool:
    errors = window.error_count
    if errors < gates.errors.burst_min_errors:
        return False
    if errors / window.requests < gates.errors.burst_factor * baseline.rate:
        return False
    return baseline.tail_p(window) < gates.errors.burst_p_value


def check_bursts(run: RunData, gates: Gates) -> Finding:
    """Windows whose error count stands out from the run's own error level; SUSPECT unless gated to FAIL."""
    rows = _judged_rows(run)
    if not rows:
        return skipped("errors.bursts", "No finished requests in the judged windows.")
    bursts, baseline = find_bursts(rows, gates)
    if not bursts:
        return Finding(check="errors.bursts", verdict=PASS, value=0, unit="windows", evidence=_calm_text(rows),
                       details={"baseline_rate": baseline.rate, "overdispersion": baseline.alpha})
    verdict = FAIL if gates.errors.fail_on_bursts else SUSPECT
    return Finding(check="errors.bursts", verdict=verdict, value=len(bursts), unit="windows",
                   threshold=gates.errors.burst_p_value,
                   evidence=_bursts_text(bursts, baseline.rate),
                   details={"baseline_rate": baseline.rate, "overdispersion": baseline.alpha,
                            "bursts": [_burst_dict(w, p) for w, p in bursts]})


def _calm_text(rows: list[RequestWindow]) -> str:
    errors, requests = sum(w.error_count for w in rows), sum(w.requests for w in rows)
    if not errors:
        return f"No errors in {requests} requests."
    return f"No window's error rate stands out from the run's {pct_text(errors / requests, 3)}."


def _bursts_text(bursts: list, baseline: float) -> str:
    worst, p = max(bursts, key=lambda wp: wp[0].error_count / wp[0].requests)
    return (f"{len(bursts)} window(s) with error bursts above the {pct_text(baseline, 3)} "
            f"baseline; worst {worst.error_count}/{worst.requests} "
            f"({pct_text(worst.error_count / worst.requests, 2)}) at "
            f"{duration_text(worst.start_s)}, binomial tail {p_text(p)}.")


def _burst_dict(window: RequestWindow, p: float) -> dict:
    return {"index": window.index, "start_s": window.start_s, "end_s": window.end_s,
            "errors": window.error_count, "requests": window.requests, "tail_p": p,
            "by_class": dict(window.errors)}
