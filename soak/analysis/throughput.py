"""`throughput.decay`: does the server deliver fewer output tokens per offered request over time?

Per judged window: output tokens divided by the requests offered in it (sends), so a planned change
of rate is not mistaken for decay; tokens per second when sends are unknown. The series is divided
by its median, so the threshold is a relative decline over the judged span.
"""

from __future__ import annotations

import numpy as np

from soak.analysis.evidence import detection_sentence, settle_step, trend_sentence
from soak.analysis.findings import FAIL, Finding, Trend, inconclusive, skipped
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData, WindowRequests
from soak.analysis.trend import assess_trend

CHECK = "throughput.decay"


def throughput_series(rows: list[WindowRequests]) -> tuple[np.ndarray, np.ndarray, str]:
    """(window mid times, per-window throughput, what it measures)."""
    t_s = np.array([0.5 * (w.start_s + w.end_s) for w in rows])
    if all(w.sends for w in rows):
        return t_s, np.array([w.output_tokens / w.sends for w in rows], dtype=float), "tokens per offered request"
    seconds = np.array([max(w.end_s - w.start_s, 1e-9) for w in rows])
    return t_s, np.array([w.output_tokens for w in rows], dtype=float) / seconds, "tokens/s"


def check_decay(run: RunData, gates: Gates) -> Finding:
    judged = run.judged_indices()
    rows = [w for w in run.request_windows if w.index in judged]
    if not rows or not any(w.output_tokens for w in rows):
        return skipped(CHECK, "No output-token counts in the judged windows.")
    if len(rows) < gates.min_windows:
        return inconclusive(CHECK, f"Only {len(rows)} judged windows (< {gates.min_windows} needed) "
                            "for a throughput trend.")
    t_s, values, measure = throughput_series(rows)
    median = float(np.median(values))
    if median <= 0:
        return inconclusive(CHECK, f"Median throughput is 0 {measure}: nothing to trend.")
    relative = values / median
    span_s = max(float(t_s[-1] - t_s[0]), 1.0)
    spec = gates.trend_spec(gates.throughput.decay_frac / span_s)
    # The test looks for a rise, so it is fed the decline: −relative throughput.
    result = assess_trend(t_s, -relative, spec)
    decline, low, high = (100 * s * result.span_s for s in (result.slope_per_s, *result.ci_per_s))
    evidence = trend_sentence(result, f"Throughput ({measure})", f"{abs(decline):.1f} % over the run",
                              f"decline {low:+.1f} to {high:+.1f} %",
                              f"{100 * gates.throughput.decay_frac:g} % decline", gates.confidence,
                              verbs=("falls", "grows"))
    sentence = detection_sentence(result, lambda s: f"{100 * s * result.span_s:.2g} %")
    if sentence and result.verdict != FAIL:
        evidence += f"; {sentence.replace('rises', 'declines')}"
    return Finding(check=CHECK, verdict=result.verdict, value=decline, unit="% decline over run",
                   ci=(low, high), threshold=100 * gates.throughput.decay_frac, evidence=evidence,
                   detection_limit=high, next_step=settle_step(result, lambda s: f"a {100 * s * result.span_s:.2g} % decline"),
                   trend=Trend(result.slope_per_s * -median, -result.intercept * median, result.t0_s),
                   details={"measure": measure, "median": median, "windows_used": result.n,
                            "mk_p": result.mk_p, "gates": result.gates})
