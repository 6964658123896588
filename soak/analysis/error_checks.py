"""Error checks: `errors.rise` (trend), `errors.budget` (Wilson bound), `errors.bursts` (outliers)."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom, norm

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
    z = norm.ppf(0.5 + confidence / 2)
    p_hat = errors / n
    denom = 1 + z * z / n
    centre = (p_hat + z * z / (2 * n)) / denom
    half = z * math.sqrt(p_hat * (1 - p_hat) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


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


def find_bursts(rows: list[RequestWindow], gates: Gates) -> tuple[list[tuple[RequestWindow, float]], float]:
    """Windows whose error count is far above the run's baseline rate: [(window, tail p)], baseline.

    The baseline is the pooled rate of the other windows, re-estimated without the flagged ones
    (two passes), so a burst does not raise its own bar.
    """
    flagged: set[int] = set()
    baseline = 0.0
    for _ in range(3):
        rest = [w for w in rows if w.index not in flagged]
        n_rest = sum(w.requests for w in rest)
        # A floor of half an error keeps a spotless baseline from making one error a "burst".
        baseline = max(sum(w.error_count for w in rest), 0.5) / max(n_rest, 1)
        flagged = {w.index for w in rows if _is_burst(w, baseline, gates)}
    return [(w, _tail_p(w, baseline)) for w in rows if w.index in flagged], baseline


def _tail_p(window: RequestWindow, baseline: float) -> float:
    return float(binom.sf(window.error_count - 1, window.requests, min(baseline, 1.0)))


def _is_burst(window: RequestWindow, baseline: float, gates: Gates) -> bool:
    errors = window.error_count
    if errors < gates.errors.burst_min_errors:
        return False
    if errors / window.requests < gates.errors.burst_factor * baseline:
        return False
    return _tail_p(window, baseline) < gates.errors.burst_p_value


def check_bursts(run: RunData, gates: Gates) -> Finding:
    rows = _judged_rows(run)
    burst_events = [e for e in run.events if e.kind == "error_burst"]
    if not rows and not burst_events:
        return skipped("errors.bursts", "No finished requests in the judged windows.")
    bursts, baseline = find_bursts(rows, gates) if rows else ([], 0.0)
    if not bursts and not burst_events:
        return Finding(check="errors.bursts", verdict=PASS, value=0, unit="windows",
                       evidence=f"No window's error rate stands out from the {pct_text(baseline, 3)} baseline.",
                       details={"baseline_rate": baseline})
    verdict = FAIL if gates.errors.fail_on_bursts else SUSPECT
    return Finding(check="errors.bursts", verdict=verdict, value=len(bursts), unit="windows",
                   threshold=gates.errors.burst_p_value,
                   evidence=_bursts_text(bursts, burst_events, baseline),
                   details={"baseline_rate": baseline,
                            "bursts": [_burst_dict(w, p) for w, p in bursts],
                            "events": [{"t_s": e.t_s, "message": e.message} for e in burst_events]})


def _bursts_text(bursts: list, burst_events: list, baseline: float) -> str:
    parts = []
    if bursts:
        worst, p = max(bursts, key=lambda wp: wp[0].error_count / wp[0].requests)
        parts.append(f"{len(bursts)} window(s) with error bursts above the {pct_text(baseline, 3)} "
                     f"baseline; worst {worst.error_count}/{worst.requests} "
                     f"({pct_text(worst.error_count / worst.requests, 2)}) at "
                     f"{duration_text(worst.start_s)}, binomial tail {p_text(p)}")
    if burst_events:
        parts.append(f"{len(burst_events)} error-burst event(s) recorded, first at "
                     f"{duration_text(burst_events[0].t_s)}")
    return "; ".join(parts) + "."


def _burst_dict(window: RequestWindow, p: float) -> dict:
    return {"index": window.index, "start_s": window.start_s, "end_s": window.end_s,
            "errors": window.error_count, "requests": window.requests, "tail_p": p,
            "by_class": dict(window.errors)}
