"""Power cases of the traffic detectors (creep, errors, throughput): see proof.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from soak.analysis import error_checks, latency, throughput
from soak.analysis.findings import Finding
from soak.analysis.gates import Gates
from soak.analysis.inputs import WindowInfo, WindowLatency, WindowRequests

from .proof import Case, Scenario, Trial, bare_scenario_run
from .synthetic import (
    HOUR_S,
    ErrorModel,
    LatencyModel,
    ar1,
    error_counts,
    error_counts_shaped,
    latency_series,
    latency_series_shaped,
)


def trial_creep(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """TTFT per window from lognormal requests, window drift and stalls; creep planted as a
    relative rise of `multiple` × rise_frac over the judged span."""
    run = bare_scenario_run(scenario)
    model = LatencyModel(median_ms=150.0, creep_frac=multiple * gates.creep.ttft_p99.rise_frac)
    stats = latency_series(rng, model, run.windows, scenario.rate_per_s, run.warmup_s)
    rows = tuple(WindowLatency(w.index, w.start_s, w.end_s, ttft=s) for w, s in zip(run.windows, stats))
    return latency.check_ttft(replace(run, latency_windows=rows), gates)


def _request_rows(windows: tuple[WindowInfo, ...], counts: list[tuple[int, int]]) -> tuple[WindowRequests, ...]:
    return tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=n, errors={"http_5xx": e}, sends=n)
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
        rows.append(WindowRequests(w.index, w.start_s, w.end_s, requests=n, output_tokens=int(tokens), sends=n))
    return throughput.check_decay(replace(run, request_windows=tuple(rows)), gates)


# ---------------------------------------------------------------------------------------------
# Latency under a varying load, and a late step


def _shares(run, windows: tuple[WindowInfo, ...]) -> np.ndarray:
    """Each window's position in the judged span: 0 at the end of the warm-up, 1 at the end."""
    end_s = windows[-1].end_s
    return np.array([max(w.mid_s - run.warmup_s, 0.0) / max(end_s - run.warmup_s, 1.0) for w in windows])


def diurnal_shape(phase: float) -> Callable[[np.random.Generator, np.ndarray], np.ndarray]:
    """Offered rate relative to its geometric mean: ×3 from trough to peak over one cycle per run
    (a day in a 24 h run); phase 0 starts on the rise, π while load is falling."""
    return lambda rng, x: 3.0 ** (0.5 * np.sin(2 * np.pi * x + phase + rng.uniform(-0.3, 0.3)))


def ramp_shape(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """A soak `ramp` phase: 1× → 3× over a random 30–100 % of the run, then held."""
    return 1.0 + 2.0 * np.clip(x / rng.uniform(0.3, 1.0), 0.0, 1.0)


def wave_shape(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """A soak `wave` phase: rate × (1 + 0.5·sin), two to six cycles per run."""
    return 1.0 + 0.5 * np.sin(2 * np.pi * x * rng.uniform(2.0, 6.0) + rng.uniform(0, 2 * np.pi))


def _latency_run(run, windows, stats) -> Finding:
    rows = tuple(WindowLatency(w.index, w.start_s, w.end_s, ttft=s) for w, s in zip(windows, stats))
    sends = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=s.count if s else 0, sends=s.count if s else 0)
                  for w, s in zip(windows, stats))
    return replace(run, latency_windows=rows, request_windows=sends)


def _counts(rng: np.random.Generator, windows: tuple[WindowInfo, ...], rates_per_s: np.ndarray) -> np.ndarray:
    return rng.poisson(rates_per_s * np.array([w.end_s - w.start_s for w in windows]))


def trial_creep_under_load(shape) -> Trial:
    """TTFT that follows a varying offered rate (∝ rate^k, k 0.2–0.8, healthy); a creep of
    `multiple` × rise_frac at equal load planted over the judged span. Latency follows the
    arrivals a window really got (Poisson around the plan), which are what `sends` counts."""
    def trial(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
        run = bare_scenario_run(scenario)
        x = np.array([w.mid_s / scenario.run_s for w in run.windows])
        counts = _counts(rng, run.windows, scenario.rate_per_s * shape(rng, x))
        seconds = np.array([w.end_s - w.start_s for w in run.windows])
        relative = np.maximum(counts, 1) / seconds / scenario.rate_per_s
        creep = (1 + multiple * gates.creep.ttft_p99.rise_frac) ** _shares(run, run.windows)
        multipliers = relative ** rng.uniform(0.2, 0.8) * creep
        stats = latency_series_shaped(rng, LatencyModel(median_ms=150.0), run.windows, counts, multipliers)
        return latency.check_ttft(_latency_run(run, run.windows, stats), gates)
    return trial


def trial_creep_step(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Flat load; TTFT steps up by `multiple` × rise_frac at 14/24 of the run (hour 14 of a day) and stays."""
    run = bare_scenario_run(scenario)
    after = np.array([w.mid_s >= scenario.run_s * 14 / 24 for w in run.windows])
    multipliers = np.where(after, 1 + multiple * gates.creep.ttft_p99.rise_frac, 1.0)
    counts = _counts(rng, run.windows, np.full(len(run.windows), scenario.rate_per_s))
    stats = latency_series_shaped(rng, LatencyModel(median_ms=150.0), run.windows, counts, multipliers)
    return latency.check_ttft(_latency_run(run, run.windows, stats), gates)


# ---------------------------------------------------------------------------------------------
# A day of load, the run starting at any hour; latency that follows a queue


DAY_S = 86400.0
PEAK_HOUR = 14.0    # the day's load peaks at 14:00 and bottoms out at 02:00
START_HOURS = tuple(range(0, 24, 3))  # eight starts: 15h, 18h, 21h and 0h fall into the falling half


def day_load(start_h: float, t_s: np.ndarray) -> np.ndarray:
    """Offered rate relative to the day's geometric mean, ×3 trough to peak, at `t_s` seconds into a
    run that starts at `start_h` o'clock."""
    hours = start_h + t_s / HOUR_S
    return 3.0 ** (0.5 * np.cos(2 * np.pi * (hours - PEAK_HOUR) / 24.0))


def load_response(rng: np.random.Generator, relative: np.ndarray) -> np.ndarray:
    """A healthy server's latency multiplier at `relative` load: half the runs a power law (∝ load^k,
    k 0.2–0.8), half a queue (∝ 1/(1 − ρ), ρ 0.5–0.9 at the day's peak of √3 × the mean), whose
    elasticity grows towards the peak beyond what the check's quadratic in log load models."""
    if rng.random() < 0.5:
        return relative ** rng.uniform(0.2, 0.8)
    utilisation = np.minimum(rng.uniform(0.5, 0.9) * relative / np.sqrt(3.0), 0.95)
    return 1.0 / (1.0 - utilisation)


def trial_creep_daily(start_h: float | None) -> Trial:
    """TTFT under a day's ×3 load from `start_h` o'clock (None: any hour, drawn per run), on a run of
    any length (a 2 h run sees a slice of the day, a 72 h run three days); latency follows each
    window's arrivals through `load_response`; a creep of `multiple` × rise_frac at equal load planted
    over the judged span."""
    def trial(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
        run = bare_scenario_run(scenario)
        hour = rng.uniform(0.0, 24.0) if start_h is None else start_h + rng.uniform(-0.75, 0.75)
        mids = np.array([w.mid_s for w in run.windows])
        counts = _counts(rng, run.windows, scenario.rate_per_s * day_load(hour, mids))
        seconds = np.array([w.end_s - w.start_s for w in run.windows])
        relative = np.maximum(counts, 1) / seconds / scenario.rate_per_s
        creep = (1 + multiple * gates.creep.ttft_p99.rise_frac) ** _shares(run, run.windows)
        multipliers = load_response(rng, relative) * creep
        stats = latency_series_shaped(rng, LatencyModel(median_ms=150.0), run.windows, counts, multipliers)
        return latency.check_ttft(_latency_run(run, run.windows, stats), gates)
    return trial


def trial_creep_warmup_tail(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Flat load; TTFT settles from 20–100 % above or below its steady level (a cache filling, a batch
    growing to its steady size) with a time constant of 2–12 % of the run, so the tail reaches well
    past the configured warm-up; a creep of `multiple` × rise_frac planted over the judged span."""
    run = bare_scenario_run(scenario)
    mids = np.array([w.mid_s for w in run.windows])
    direction = rng.choice([-1.0, 1.0])
    tail = direction * rng.uniform(0.2, 0.7) * np.exp(-mids / (rng.uniform(0.02, 0.12) * scenario.run_s))
    creep = (1 + multiple * gates.creep.ttft_p99.rise_frac) ** _shares(run, run.windows)
    counts = _counts(rng, run.windows, np.full(len(run.windows), scenario.rate_per_s))
    stats = latency_series_shaped(rng, LatencyModel(median_ms=150.0), run.windows, counts, np.exp(tail) * creep)
    return latency.check_ttft(_latency_run(run, run.windows, stats), gates)


# ---------------------------------------------------------------------------------------------
# Errors: a late ramp, a late step


def _late_ramp(run, scenario: Scenario, size: float) -> np.ndarray:
    """Extra error rate per window: 0 until 18/24 of the run, then rising linearly to `size`."""
    start_s = scenario.run_s * 18 / 24
    return np.array([size * max(w.mid_s - start_s, 0.0) / (scenario.run_s - start_s) for w in run.windows])


def _error_run(run, counts) -> Finding:
    return replace(run, request_windows=_request_rows(run.windows, counts))


def trial_error_late_ramp(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """0.1 % errors (overdispersed, with bursts) for 18 h of 24, then a linear rise of
    `multiple` × rise_abs by the end (0.1 % → 3 % is 5.8×)."""
    run = bare_scenario_run(scenario)
    extra = _late_ramp(run, scenario, multiple * gates.errors.rise_abs)
    counts = error_counts_shaped(rng, ErrorModel(base_rate=0.001), run.windows, scenario.rate_per_s, extra)
    return error_checks.check_rise(_error_run(run, counts), gates)


def trial_budget_late_step(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """0.1 % errors (overdispersed, no bursts: a 30 s burst at 50 % errors is itself over budget in
    a short run), then from 18/24 of the run on `multiple` × the budget; the whole-run rate stays
    under the budget up to ~4×, so only the last segment can tell."""
    run = bare_scenario_run(scenario)
    late = np.array([w.mid_s >= scenario.run_s * 18 / 24 for w in run.windows])
    extra = np.where(late, max(multiple * gates.errors.budget - 0.001, 0.0), 0.0)
    model = ErrorModel(base_rate=0.001, bursts_per_h=0.0)
    counts = error_counts_shaped(rng, model, run.windows, scenario.rate_per_s, extra)
    return error_checks.check_budget(_error_run(run, counts), gates)


def trial_bursts_late_ramp(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """0.2 % errors rising to 3.1 % over the last quarter (no random bursts); when planted, one
    window's rate is `multiple` × burst_factor × its own expected rate."""
    run = bare_scenario_run(scenario)
    model = ErrorModel(bursts_per_h=0.0)
    expected = model.base_rate + _late_ramp(run, scenario, 0.029)
    counts = error_counts_shaped(rng, model, run.windows, scenario.rate_per_s, expected - model.base_rate)
    if multiple > 0:
        i = int(rng.integers(1, len(counts)))
        n = counts[i][0]
        counts[i] = (n, int(rng.binomial(n, min(1.0, multiple * gates.errors.burst_factor * expected[i]))))
    return error_checks.check_bursts(_error_run(run, counts), gates)


SHORT = ("24h", "1h", "5m")
CASES = [Case("creep.ttft_p99", "steady", trial_creep),
         Case("errors.rise", "steady", trial_error_rise, ("24h", "24h-noisy", "1h")),
         # 5 minutes at 0.2 % errors is ~0.7 errors a window: with the interval widened for the
         # windows' autocorrelation, power at 2× measures 83 %, not claimed.
         Case("errors.rise", "steady-short", trial_error_rise, ("5m",), power=False),
         Case("errors.bursts", "steady", trial_bursts, ("24h", "24h-noisy")),
         # A burst window in a short run holds a few hundred requests: only gross bursts stand out.
         Case("errors.bursts", "steady-short", trial_bursts, ("1h", "5m"), power=False),
         Case("throughput.decay", "steady", trial_throughput),
         # Over one daily cycle time and load share ~70 % of their variance, which doubles the
         # spread of the creep-at-equal-load estimate: power at 2× measures 87–92 %, not claimed.
         Case("creep.ttft_p99", "diurnal-rising", trial_creep_under_load(diurnal_shape(0.0)), SHORT, power=False),
         Case("creep.ttft_p99", "diurnal-falling", trial_creep_under_load(diurnal_shape(np.pi)), SHORT, power=False),
         Case("creep.ttft_p99", "wave", trial_creep_under_load(wave_shape), SHORT),
         # A ramp moves load with time: a creep during it cannot be told from load; no power claimed.
         Case("creep.ttft_p99", "ramp", trial_creep_under_load(ramp_shape), SHORT, power=False),
         Case("creep.ttft_p99", "step-14h", trial_creep_step, SHORT),
         # A ramp reaching 2 × rise_abs only in its last window is barely a rise_abs-sized lasting
         # rise: power at 2× is 70–90 %, not claimed; the measured 0.1 % → 3 % (5.8×) FAILs ~100 %.
         Case("errors.rise", "late-ramp", trial_error_late_ramp, SHORT, power=False),
         Case("errors.budget", "late-step", trial_budget_late_step, SHORT),
         Case("errors.bursts", "late-ramp", trial_bursts_late_ramp, ("24h",))]
# A day of load from every start hour: a 2 h run sees a slice of the day (the load moves with time, so
# most are INCONCLUSIVE), a 24 h run one whole day. At equal load the creep estimate's spread doubles
# over one cycle (see diurnal-rising), so no power is claimed; the goal is no FAIL on a healthy server.
CASES += [Case("creep.ttft_p99", f"diurnal-from-{hour:02d}h", trial_creep_daily(hour), ("2h", "24h"), power=False)
          for hour in START_HOURS]
# Any start over 12 hours: a run that starts on the evening's decline sees load fall all run long.
CASES += [Case("creep.ttft_p99", "diurnal-any-hour", trial_creep_daily(None), ("30m", "12h", "72h"), power=False),
          # A tail still moving through the first third of the run and a creep on top read as a warm-up
          # still under way (INCONCLUSIVE, "run longer") in 6–10 % of runs: power at 2× is 85–91 %, not claimed.
          Case("creep.ttft_p99", "warmup-tail", trial_creep_warmup_tail, ("30m", "1h", "2h"), power=False)]
