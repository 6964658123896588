"""Error checks: `errors.rise` (trend and step), `errors.budget` (Wilson bound), `errors.bursts` (outliers).

A late onset — errors at 0.1 % for 18 h, then climbing to 3 % — bends a straight line: the
Theil–Sen slope reads a fraction of the rise and Mann–Kendall's autocorrelation correction reads the
one late monotone block as drift. So the window error-rate series also goes through the step gate
(steps.py): `errors.rise` FAILs on a lasting rise of at least `rise_abs`, `errors.budget` judges the
segment after it (else the last quarter) on its own, and `errors.bursts` then judges each window
against its neighbours with the overdispersion measured before the rise, so the rise neither hides
in the run's average nor inflates the overdispersion until no burst stands out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import binom, nbinom, norm, poisson

from soak.analysis.evidence import detection_sentence, settle_step, trend_sentence
from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SUSPECT, Finding, inconclusive, skipped
from soak.analysis.fmt import duration_text, p_text, pct_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData, WindowRequests
from soak.analysis.step_records import StepResult
from soak.analysis.steps import find_step
from soak.analysis.trend import assess_trend

NORMAL_MIN_ERRORS = 30


def _judged_rows(run: RunData) -> list[WindowRequests]:
    judged = run.judged_indices()
    return [w for w in run.request_windows if w.index in judged and w.requests > 0]


def _class_counts(rows: list[WindowRequests]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        for name, n in row.errors.items():
            counts[name] = counts.get(name, 0) + int(n)
    return {k: v for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v}


def _rates(rows: list[WindowRequests]) -> tuple[np.ndarray, np.ndarray]:
    """(window mid times, window error rates)."""
    return (np.array([0.5 * (w.start_s + w.end_s) for w in rows]),
            np.array([w.error_count / w.requests for w in rows]))


def rate_step(rows: list[WindowRequests], gates: Gates) -> StepResult | None:
    """The step gate on the window error rates: a lasting rise of at least rise_abs.

    find_step picks the split and judges persistence on the rates after a running median of 3 (an
    isolated burst window vanishes: bursts are `errors.bursts`' business). Three things change for
    error counts:

    * **size** is the level reached — the median of the last third after the split — over the
      level before it (`after` and `shift` are rewritten to say so): a late ramp's median after the
      split is about half of how far it climbed, and "rose from 0.1 % to 2.5 %" is what happened;
    * **significance** is a count test (`_excess_p`, Bonferroni over the split positions, at the
      step gate's half of p_value): the errors after the split against the rate and overdispersion
      of the ordinary windows before it. find_step's own test reads the spread inside
      each segment, and a ramp after the split is all spread, so it would never call a ramp real;
    * **most_windows**: at least two thirds of the windows after the split (their own rates) sit
      above the level before it plus half the shift, so a few bursts that happen to cluster near the end of
      a long run (which can have one in a fifth of its windows) are no lasting rise.
    """
    t_s, rates = _rates(rows)
    smoothed = _running_median3(rates)
    min_size = max(3, len(rows) // 6)
    spec = gates.step_spec(gates.errors.rise_abs, min_size=min_size, min_points=gates.min_windows)
    step = find_step(t_s, smoothed, spec)
    if step is None:
        return None
    p_value = min(1.0, _excess_p(rows, step.index, gates) * max(len(rows) - 2 * min_size + 1, 1))
    later = smoothed[step.index:]
    reached = float(np.median(later[-max(1, later.size // 3):]))
    # Raw rates, not smoothed: the running median turns every other window bursting into a raised run.
    raised = rates[step.index:] >= step.before + step.shift / 2
    return replace(step, p_value=p_value, after=reached, shift=reached - step.before,
                   gates={**step.gates, "size": reached - step.before >= spec.min_shift,
                          "significant": p_value < spec.p_value, "most_windows": bool(raised.mean() >= 2 / 3)})


def _excess_p(rows: list[WindowRequests], index: int, gates: Gates) -> float:
    """One-sided p of the errors after `index` given the rate and negative-binomial overdispersion
    of the ordinary windows before it: the sum's tail from a negative binomial of the same mean and
    variance while a handful of errors is expected (a normal approximation is too bold there; from
NORMAL_MIN_ERRORS expected errors on it is close, and less timid than the moment-matched skew that
burst-heavy long runs would give). Burst windows
    are left out of that baseline: in a short run one burst can hold more errors than all the other
    windows together, and the overdispersion it implies would hide any rise."""
    baseline = _bursts_in(rows[:index], gates)[1]
    mean = np.array([w.requests for w in rows[index:]], dtype=float) * baseline.rate
    total, extra = float(mean.sum()), float(baseline.alpha * (mean ** 2).sum())
    observed = sum(w.error_count for w in rows[index:])
    if total >= NORMAL_MIN_ERRORS:
        variance = total + extra
        return float(norm.sf((observed - total) / math.sqrt(variance))) if variance > 0 else float(observed <= total)
    if extra <= 0:
        return float(poisson.sf(observed - 1, total))
    size = total * total / extra
    return float(nbinom.sf(observed - 1, size, size / (size + total)))


def _running_median3(values: np.ndarray) -> np.ndarray:
    """Median of each point and its two neighbours; an end point takes the median of the three
    nearest points (padding with itself would let a burst in the last window through)."""
    if values.size < 3:
        return values.copy()
    out = np.median(np.stack([values[:-2], values[1:-1], values[2:]]), axis=0)
    return np.concatenate([[np.median(values[:3])], out, [np.median(values[-3:])]])


def check_rise(run: RunData, gates: Gates) -> Finding:
    """Trend of window error rates, FAIL when the rate is projected to rise by ≥ rise_abs, or
    when the step gate finds a lasting rise of at least that much."""
    rows = _judged_rows(run)
    if not rows:
        return skipped("errors.rise", "No finished requests in the judged windows.")
    if len(rows) < gates.min_windows:
        return inconclusive("errors.rise", f"Only {len(rows)} judged windows with requests "
                            f"(< {gates.min_windows} needed) for a trend.")
    t_s, rates = _rates(rows)
    span_s = max(float(t_s[-1] - t_s[0]), 1.0)
    result = assess_trend(t_s, rates, gates.trend_spec(gates.errors.rise_abs / span_s))
    change, low, high = (100 * s * result.span_s for s in (result.slope_per_s, *result.ci_per_s))
    evidence = trend_sentence(result, "The window error rate", f"{change:+.2f} pp over the run",
                              f"{low:+.2f} to {high:+.2f} pp", f"+{100 * gates.errors.rise_abs:g} pp",
                              gates.confidence)
    details = {"windows_used": result.n, "mk_p": result.mk_p, "gates": result.gates, "series_unit": "fraction"}
    verdict, value, ci = result.verdict, change, (low, high)
    step = rate_step(rows, gates)
    if step is not None:
        details["step"] = step.to_dict()
    if step is not None and step.found and verdict != FAIL:
        # The value is now the step's size: the trend's CI is not its CI, so the row shows none (details keep it).
        verdict, value, ci = FAIL, 100 * step.shift, None
        details["trend_ci"] = [low, high]
        evidence += "; " + _step_text(step)
    sentence = detection_sentence(result, lambda s: f"+{100 * s * result.span_s:.2f} pp")
    if sentence and verdict != FAIL:
        evidence += f"; {sentence}"
    return Finding(check="errors.rise", verdict=verdict, value=value, unit="pp over run",
                   ci=ci, threshold=100 * gates.errors.rise_abs, evidence=evidence,
                   trend=result.line("linear"), detection_limit=high if ci else None, details=details,
                   next_step=settle_step(result, lambda s: f"+{100 * s * result.span_s:.2f} pp"))


def _step_text(step: StepResult) -> str:
    return (f"the error rate rose from {pct_text(step.before, 2)} to {pct_text(step.after, 2)} at "
            f"{duration_text(step.t_s)} and stayed (step gate {p_text(step.p_value)})")


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
    when the Wilson upper bound is within it, INCONCLUSIVE when too few requests to tell. The late
    segment (see `late_segment`) is judged on its own too: a run that ends over budget FAILs even
    when its average is within it. Windows a network outage overlaps are left out: what failed in them failed on
    the lost route, not at the server (a server outage's windows count: those errors are the server's)."""
    network = {w.index for w in run.windows if w.excluded == "network"}
    rows = [w for w in run.request_windows if w.start_s >= run.warmup_s - 1e-9 and w.index not in network]
    requests = sum(w.requests for w in rows)
    errors = sum(w.error_count for w in rows)
    if requests == 0:
        return skipped("errors.budget", "No finished requests after the warm-up.")
    budget = gates.errors.budget
    low, high = wilson_interval(errors, requests, gates.confidence)
    rate = errors / requests
    verdict = FAIL if rate > budget else (PASS if high <= budget else INCONCLUSIVE)
    evidence = _budget_text(verdict, errors, requests, rate, high, budget, rows)
    details = {"requests": requests, "errors": errors, "by_class": _class_counts(rows),
               "cancelled": sum(w.cancelled for w in rows)}
    late = late_segment(_judged_rows(run), gates)
    if late is not None:
        if late["step"] is not None:
            details["step"] = late["step"]
        details["late_segment"] = {k: v for k, v in late.items() if k != "step"}
        if late["over_budget"] and verdict != FAIL:
            verdict, evidence = FAIL, evidence.rstrip(".") + "; but " + _late_text(late, budget)
    if network:
        details["network_windows"] = sorted(network)
    return Finding(check="errors.budget", verdict=verdict, value=100 * rate, unit="%", ci=(100 * low, 100 * high),
                   threshold=100 * budget, evidence=evidence + _network_text(network), details=details)


def late_segment(rows: list[WindowRequests], gates: Gates) -> dict | None:
    """The end of the run judged on its own: the windows after a step found by the step gate,
    else the last quarter. `over_budget` when its Wilson lower bound exceeds the budget and most of
    its windows are over budget each (one burst window is not the run ending over budget)."""
    if len(rows) < 4:
        return None
    step = rate_step(rows, gates) if len(rows) >= gates.min_windows else None
    found = step is not None and step.found
    segment = rows[step.index:] if found else rows[-(len(rows) // 4):]
    requests = sum(w.requests for w in segment)
    errors = sum(w.error_count for w in segment)
    low, _ = wilson_interval(errors, requests, gates.confidence)
    over = sum(w.error_count > gates.errors.budget * w.requests for w in segment)
    return {"step": step.to_dict() if step is not None else None,
            "basis": "after the step" if found else "last quarter", "start_s": segment[0].start_s,
            "windows": len(segment), "windows_over": over, "requests": requests, "errors": errors,
            "rate": errors / requests, "wilson_low": low, "confidence": gates.confidence,
            "over_budget": low > gates.errors.budget and over > len(segment) / 2}


def _late_text(late: dict, budget: float) -> str:
    where = "after the rise" if late["basis"] == "after the step" else "in the last quarter"
    return (f"{where} (from {duration_text(late['start_s'])}, {late['windows']} windows) "
            f"{late['errors']} errors in {late['requests']} requests ({pct_text(late['rate'], 2)}): "
            f"its {100 * late['confidence']:g} % lower bound {pct_text(late['wilson_low'], 2)} "
            f"exceeds the {pct_text(budget, 2)} budget.")


def _network_text(network: set[int]) -> str:
    if not network:
        return ""
    return (f" {len(network)} window(s) over a network outage left out: the server was out of reach, and what failed "
            "then is not the server's.")


def _budget_text(verdict: str, errors: int, requests: int, rate: float, high: float, budget: float,
                 rows: list[WindowRequests]) -> str:
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

    def tail_p(self, window: WindowRequests) -> float:
        """P(at least this many errors in the window) under the baseline."""
        mean = window.requests * min(self.rate, 1.0)
        if self.alpha <= 0:
            return float(binom.sf(window.error_count - 1, window.requests, min(self.rate, 1.0)))
        size = 1.0 / self.alpha
        return float(nbinom.sf(window.error_count - 1, size, size / (size + mean)))


def estimate_baseline(rows: list[WindowRequests]) -> ErrorBaseline:
    """Pooled rate and method-of-moments overdispersion of the given windows."""
    n = np.array([w.requests for w in rows], dtype=float)
    errors = np.array([w.error_count for w in rows], dtype=float)
    # A floor of half an error keeps a spotless baseline from making one error a "burst".
    rate = max(errors.sum(), 0.5) / max(n.sum(), 1.0)
    mean = n * rate
    excess = ((errors - mean) ** 2 - mean * (1 - rate)).sum()
    alpha = max(0.0, excess / (mean ** 2).sum()) if (mean ** 2).sum() > 0 else 0.0
    return ErrorBaseline(rate, alpha)


def find_bursts(rows: list[WindowRequests], gates: Gates) -> tuple[list[tuple[WindowRequests, float]], ErrorBaseline,
                                                                  StepResult | None]:
    """Windows whose error count is far above the run's baseline: [(window, tail p)], baseline, step.

    Real error rates wander from window to window more than binomial noise allows, so the tail is
    negative-binomial with the overdispersion measured on the other windows. When the step gate
    finds a lasting rise, one pooled rate fits neither side of it and the windows of the rise would
    inflate the overdispersion until no burst stands out, so each window is judged against its
    neighbours instead (`_bursts_local`); the baseline returned is then the rate before the step.
    """
    step = rate_step(rows, gates) if len(rows) >= gates.min_windows else None
    if step is None or not step.found:
        return *_bursts_in(rows, gates), step
    bursts, alpha = _bursts_local(rows, step.index, gates)
    return bursts, ErrorBaseline(estimate_baseline(rows[:step.index]).rate, alpha), step


def _bursts_in(rows: list[WindowRequests], gates: Gates) -> tuple[list[tuple[WindowRequests, float]], ErrorBaseline]:
    """Bursts against one pooled baseline, re-estimated without the flagged windows (three
    passes), so a burst does not raise its own bar."""
    pooled = estimate_baseline(rows).rate
    # Start without the obvious candidates, or their excess would inflate the overdispersion.
    flagged = {w.index for w in rows if w.error_count >= gates.errors.burst_min_errors
               and w.error_count / w.requests >= gates.errors.burst_factor * pooled}
    baseline = ErrorBaseline(pooled, 0.0)
    for _ in range(3):
        baseline = estimate_baseline([w for w in rows if w.index not in flagged] or rows)
        flagged = {w.index for w in rows if _is_burst(w, baseline, gates)}
    return [(w, baseline.tail_p(w)) for w in rows if w.index in flagged], baseline


def _bursts_local(rows: list[WindowRequests], split: int, gates: Gates) -> tuple[list[tuple[WindowRequests, float]], float]:
    """Bursts where the rate moves (a step, a ramp): each window's expected rate is the median of
    its two neighbours on either side (not itself, so a burst does not raise its own bar; across
    the split, so a ramp's windows next to it are not judged against one side only), at least the
    median window rate before the split. The
    overdispersion is measured around those local rates before the split, without the flagged
    windows (three passes): where the rate climbs, the counts are large and say little about how
    the ordinary rate wanders. Returns the bursts and the overdispersion."""
    # A median of four small counts is noisy; the median window rate before the split is the floor
    # (a median, so neither a burst nor the first windows of the rise raise it).
    floor = float(np.median([w.error_count / w.requests for w in rows[:split]]))
    expected = np.maximum(_neighbour_rates(rows), floor)
    # Start without the obvious candidates, or their excess would inflate the overdispersion.
    flagged = {w.index for w, rate in zip(rows, expected) if w.error_count >= gates.errors.burst_min_errors
               and w.error_count / w.requests >= gates.errors.burst_factor * rate}
    alpha = 0.0
    for _ in range(3):
        keep = [k for k in range(split) if rows[k].index not in flagged] or list(range(split))
        alpha = _local_alpha([rows[k] for k in keep], expected[keep])
        flagged = {w.index for w, rate in zip(rows, expected) if _is_burst(w, ErrorBaseline(rate, alpha), gates)}
    return [(w, ErrorBaseline(rate, alpha).tail_p(w)) for w, rate in zip(rows, expected) if w.index in flagged], alpha


def _neighbour_rates(rows: list[WindowRequests]) -> np.ndarray:
    """Median error rate of each window's two neighbours on either side, floored at half an error
    over those neighbours (as `estimate_baseline` floors a spotless baseline)."""
    rates = np.array([w.error_count / w.requests for w in rows])
    out = np.empty(len(rows))
    for i in range(len(rows)):
        near = [j for j in range(max(0, i - 2), min(len(rows), i + 3)) if j != i] or [i]
        out[i] = max(float(np.median(rates[near])), 0.5 / sum(rows[j].requests for j in near))
    return out


def _local_alpha(rows: list[WindowRequests], rates: np.ndarray) -> float:
    """Method-of-moments overdispersion around per-window expected rates."""
    n = np.array([w.requests for w in rows], dtype=float)
    errors = np.array([w.error_count for w in rows], dtype=float)
    mean = n * rates
    excess = ((errors - mean) ** 2 - mean * (1 - rates)).sum()
    return max(0.0, float(excess / (mean ** 2).sum())) if (mean ** 2).sum() > 0 else 0.0


def _is_burst(window: WindowRequests, baseline: ErrorBaseline, gates: Gates) -> bool:
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
    bursts, baseline, step = find_bursts(rows, gates)
    details: dict = {"baseline_rate": baseline.rate, "overdispersion": baseline.alpha}
    if step is not None:
        details["step"] = step.to_dict()
    after_step = step is not None and step.found
    if not bursts:
        return Finding(check="errors.bursts", verdict=PASS, value=0, unit="windows",
                       evidence=_calm_text(rows, step if after_step else None), details=details)
    verdict = FAIL if gates.errors.fail_on_bursts else SUSPECT
    details["bursts"] = [_burst_dict(w, p) for w, p in bursts]
    evidence = _bursts_text(bursts, baseline.rate)
    if after_step:
        evidence += (f" The rate rose lastingly at {duration_text(step.t_s)}, so each window was judged "
                     "against its neighbours.")
    # The threshold shares the value's unit (windows): any burst window counts. The p-value a window must beat is
    # a different quantity, kept in details rather than shown as "3e-06 windows".
    details["burst_p_value"] = gates.errors.burst_p_value
    return Finding(check="errors.bursts", verdict=verdict, value=len(bursts), unit="windows",
                   threshold=0, evidence=evidence, details=details)


def _calm_text(rows: list[WindowRequests], step: StepResult | None) -> str:
    errors, requests = sum(w.error_count for w in rows), sum(w.requests for w in rows)
    if not errors:
        return f"No errors in {requests} requests."
    if step is not None:
        return (f"No window's error rate stands out from its neighbours' (the rate rose lastingly at "
                f"{duration_text(step.t_s)}, so each window is judged against the windows around it).")
    return f"No window's error rate stands out from the run's {pct_text(errors / requests, 3)}."


def _bursts_text(bursts: list, baseline: float) -> str:
    worst, p = max(bursts, key=lambda wp: wp[0].error_count / wp[0].requests)
    return (f"{len(bursts)} window(s) with error bursts above the {pct_text(baseline, 3)} "
            f"baseline; worst {worst.error_count}/{worst.requests} "
            f"({pct_text(worst.error_count / worst.requests, 2)}) at "
            f"{duration_text(worst.start_s)}, binomial tail {p_text(p)}.")


def _burst_dict(window: WindowRequests, p: float) -> dict:
    return {"index": window.index, "start_s": window.start_s, "end_s": window.end_s,
            "errors": window.error_count, "requests": window.requests, "tail_p": p,
            "by_class": dict(window.errors)}


# -- errors.invalid_output -----------------------------------------------------------------------------------
INVALID_OUTPUT = "invalid_output"
# The built-in scenarios that validate every answer: a clean run of one of them earns a PASS.
VALIDATING_SCENARIOS = ("structured", "tools")


def _invalid_count(rows: tuple[WindowRequests, ...] | list[WindowRequests]) -> int:
    return sum(int(w.errors.get(INVALID_OUTPUT, 0)) for w in rows)


def first_invalid_answer(run: RunData) -> tuple[float, str] | None:
    """(time, message) of the first answer that failed validation, from the outcome ledger's events."""
    hits = [e for e in run.events if e.kind == "error_message" and e.data.get("error_class") == INVALID_OUTPUT]
    if not hits:
        return None
    first = min(hits, key=lambda e: e.t_s)
    return first.t_s, str(first.data.get("message") or first.message)


def check_invalid_output(run: RunData, gates: Gates) -> Finding:
    """FAIL on any answer that failed its scenario's validation (JSON that does not parse or match its schema, a
    tool call naming no tool offered): guided decoding promises valid output, so one broken answer is a broken
    server. The first bad answer is quoted. PASS when a validating scenario ran clean; SKIPPED when none ran."""
    # Without per-scenario counts (an older run), all scenarios together under "*".
    by_scenario = {name: rows for name, rows in run.scenario_windows.items() if name != "*"} \
        or {"*": run.request_windows}
    invalid = {name: n for name, n in ((name, _invalid_count(rows)) for name, rows in by_scenario.items()) if n}
    if invalid:
        return _invalid_finding(run, invalid, by_scenario)
    checked = {name: sum(w.requests for w in rows) for name, rows in by_scenario.items()
               if name in VALIDATING_SCENARIOS}
    checked = {name: n for name, n in checked.items() if n}
    if not checked:
        return skipped("errors.invalid_output", "No scenario of this run validates its answers (the structured and "
                       "tools scenarios do).")
    names = ", ".join(sorted(checked))
    return Finding(check="errors.invalid_output", verdict=PASS, value=0, unit="answers", threshold=0,
                   evidence=f"Every answer of {names} was valid ({sum(checked.values())} requests).",
                   details={"validated_requests": checked})


def _invalid_finding(run: RunData, invalid: dict[str, int], by_scenario: dict) -> Finding:
    total = sum(invalid.values())
    requests = sum(w.requests for name in invalid for w in by_scenario[name])
    windows = [w for w in run.request_windows if w.errors.get(INVALID_OUTPUT)]
    since = min((w.start_s for w in windows), default=None)
    first = first_invalid_answer(run)
    where = ", ".join(f"{name} {n}" for name, n in sorted(invalid.items(), key=lambda kv: -kv[1]))
    evidence = f"{total} invalid answer(s) in {requests} requests ({where})"
    if since is not None:
        evidence += f", from the window at {duration_text(max(since, 0.0))}"
    evidence += f"; first: {first[1]}" if first else "."
    details = {"invalid": total, "requests": requests, "by_scenario": invalid, "first_window_s": since}
    if first:
        details["first_answer"] = {"t_s": first[0], "message": first[1]}
    return Finding(check="errors.invalid_output", verdict=FAIL, value=total, unit="answers", threshold=0,
                   evidence=evidence, details=details)
