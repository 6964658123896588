"""Power cases of the traffic detectors (creep, errors, throughput): see proof.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from soak.analysis import error_checks, latency, throughput
from soak.analysis.findings import Finding
from soak.analysis.gates import Gates
from soak.analysis.inputs import LatencyWindow, RequestWindow, WindowInfo

from .proof import Case, Scenario, bare_scenario_run
from .synthetic import ErrorModel, LatencyModel, ar1, error_counts, latency_series


def trial_creep(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """TTFT per window from lognormal requests, window drift and stalls; creep planted as a
    relative rise of `multiple` × rise_frac over the judged span."""
    run = bare_scenario_run(scenario)
    model = LatencyModel(median_ms=150.0, creep_frac=multiple * gates.creep.ttft_p99.rise_frac)
    stats = latency_series(rng, model, run.windows, scenario.rate_per_s, run.warmup_s)
    rows = tuple(LatencyWindow(w.index, w.start_s, w.end_s, ttft=s) for w, s in zip(run.windows, stats))
    return latency.check_ttft(replace(run, latency_windows=rows), gates)


def _request_rows(windows: tuple[WindowInfo, ...], counts: list[tuple[int, int]]) -> tuple[RequestWindow, ...]:
    return tuple(RequestWindow(w.index, w.start_s, w.end_s, requests=n, errors={"http_5xx": e}, sends=n)
                 for w, (n, e) in zip(windows, counts))


def trial_error_rise(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Overdispersed base rate plus random bursts; rise planted as `multiple` × rise_abs."""
    run = bare_scenario_run(scenario)
    model = ErrorModel(rise_abs=multiple * gates.errors.rise_abs)
    counts = error_counts(rng, model, run.windows, scenario.rate_per_s, run.warmup_s)
    return error_checks.check_rise(replace(run, request_windows=_request_rows(run.windows, counts)), gates)


def trial_bursts(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Overdispersed base rate, no bursts; one window's rate raised to `multiple` × burst_factor ×
    the base rate when planted."""
    run = bare_scenario_run(scenario)
    model = ErrorModel(bursts_per_h=0.0)
    counts = error_counts(rng, model, run.windows, scenario.rate_per_s, run.warmup_s)
    if multiple > 0:
        i = int(rng.integers(1, len(counts)))
        n = counts[i][0]
        counts[i] = (n, int(rng.binomial(n, min(1.0, multiple * gates.errors.burst_factor * model.base_rate))))
    return error_checks.check_bursts(replace(run, request_windows=_request_rows(run.windows, counts)), gates)


def trial_throughput(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Tokens per offered request: ~200 with long-tail request lengths and slow drift; a linear
    decline of `multiple` × decay_frac planted over the judged span."""
    run = bare_scenario_run(scenario)
    drift = ar1(rng, len(run.windows), 0.5, 0.03)
    rows = []
    for w, level in zip(run.windows, drift):
        n = int(rng.poisson(scenario.rate_per_s * (w.end_s - w.start_s)))
        share = max(w.mid_s - run.warmup_s, 0.0) / (run.windows[-1].end_s - run.warmup_s)
        per_request = 200 * np.exp(level) * (1 - multiple * gates.throughput.decay_frac * share)
        tokens = rng.lognormal(np.log(per_request) - 0.5, 1.0, n).sum()  # cv ≈ 1.3 per request
        rows.append(RequestWindow(w.index, w.start_s, w.end_s, requests=n, output_tokens=int(tokens), sends=n))
    return throughput.check_decay(replace(run, request_windows=tuple(rows)), gates)



CASES = [Case("creep.ttft_p99", "steady", trial_creep), Case("errors.rise", "steady", trial_error_rise),
         Case("errors.bursts", "steady", trial_bursts), Case("throughput.decay", "steady", trial_throughput)]
