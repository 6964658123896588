"""Monte Carlo proof of the trend detectors on synthetic series with known truth (docs/gates.md,
"How good are the detectors?").

`detector_rates(check, trials, seed, multiple)` draws `trials` synthetic runs, plants a fault of
`multiple` × the check's practical threshold (0 = healthy) and counts the verdicts. The false
positive rate is the FAIL rate at multiple 0; the power the FAIL rate at multiple 2. Used by
tests/unit/test_analysis_power.py and bench/detector_power.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from soak.analysis import error_checks, latency, memory, throughput
from soak.analysis.findings import FAIL, Finding
from soak.analysis.gates import Gates
from soak.analysis.inputs import (
    GpuProcessSeries,
    LatencyWindow,
    ProcessSeries,
    RequestWindow,
    RunData,
    WindowInfo,
)
from soak.analysis.windows import plan_windows

from .synthetic import (
    MIB,
    ErrorModel,
    LatencyModel,
    ar1,
    bare_run,
    error_counts,
    latency_series,
    memory_series,
    scaled_memory_model,
)


@dataclass(frozen=True)
class Scenario:
    """The shape of a synthetic run: its length, sampling and load."""

    name: str
    run_s: float
    sample_s: float
    rate_per_s: float
    memory_noise_frac: float = 0.004


SCENARIOS = {
    "24h": Scenario("24h", 86400.0, 10.0, 2.0),
    "24h-noisy": Scenario("24h-noisy", 86400.0, 10.0, 2.0, memory_noise_frac=0.01),
    "1h": Scenario("1h", 3600.0, 2.0, 10.0),
    "5m": Scenario("5m", 300.0, 1.0, 60.0),
}
TREE_FLOORS_BYTES = (600 * MIB, 1400 * MIB)


def _run(scenario: Scenario, **fields) -> RunData:
    return bare_run(scenario.run_s, **fields)


def _judged_span_h(scenario: Scenario) -> float:
    windows = plan_windows(scenario.run_s)
    mids = [w.mid_s for w in windows if w.excluded is None]
    return (mids[-1] - mids[0]) / 3600.0


def leak_threshold_bytes_per_h(scenario: Scenario, gates: Gates, floor_bytes: float) -> float:
    """The effective practical threshold of leak.rss for a tree of `floor_bytes`."""
    gate = gates.leak.rss
    growth = max(gate.growth_frac * floor_bytes, gate.min_growth_bytes)
    return max(gate.slope_bytes_per_h, growth / _judged_span_h(scenario))


def trial_rss(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """A two-process tree; the leak, if any, is planted in the larger process."""
    slope = multiple * leak_threshold_bytes_per_h(scenario, gates, sum(TREE_FLOORS_BYTES))
    processes = []
    for i, floor in enumerate(TREE_FLOORS_BYTES):
        model = scaled_memory_model(scenario.run_s, floor_bytes=floor,
                                    noise_frac=scenario.memory_noise_frac,
                                    slope_bytes_per_h=slope if i == 1 else 0.0)
        t_s, rss = memory_series(rng, model, scenario.run_s, scenario.sample_s)
        processes.append(ProcessSeries(pid=100 + i, name=f"proc{i}", t_s=t_s, rss_bytes=rss))
    return memory.check_rss(_run(scenario, processes=tuple(processes)), gates)


def trial_vram(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """A preallocated 60 GiB plateau: flat by design, with small NVML noise and rare steps."""
    gate = gates.leak.vram
    floor = 60 * 2**30
    threshold = max(gate.slope_bytes_per_h,
                    max(gate.growth_frac * floor, gate.min_growth_bytes) / _judged_span_h(scenario))
    model = replace(scaled_memory_model(scenario.run_s, floor_bytes=floor), warmup_gain_frac=0.0,
                    sawtooth_frac=0.0, noise_frac=2 * MIB / floor, ratchets_per_run=1.0,
                    ratchet_frac=2 * MIB / floor, slope_bytes_per_h=multiple * threshold)
    t_s, used = memory_series(rng, model, scenario.run_s, scenario.sample_s)
    run = _run(scenario, gpu_seen=True, gpu_processes=(GpuProcessSeries(1, t_s, used, "engine"),))
    return memory.check_vram(run, gates)


def trial_fds(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """40 fds at rest plus transient sockets; the leak adds whole descriptors over time."""
    gate = gates.leak.fds
    threshold = max(gate.slope_fds_per_h,
                    max(gate.growth_frac * 40, gate.min_growth_fds) / _judged_span_h(scenario))
    t_s = np.arange(0.0, scenario.run_s, scenario.sample_s)
    fds = 40 + rng.poisson(2.0, t_s.size) + np.floor(multiple * threshold * t_s / 3600)
    process = ProcessSeries(pid=1, name="server", t_s=t_s, rss_bytes=np.full(t_s.size, 1e9), fds=fds)
    return memory.check_fds(_run(scenario, processes=(process,)), gates)


def trial_creep(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """TTFT per window from lognormal requests, window drift and stalls; creep planted as a
    relative rise of `multiple` × rise_frac over the judged span."""
    run = _run(scenario)
    model = LatencyModel(median_ms=150.0, creep_frac=multiple * gates.creep.ttft_p99.rise_frac)
    stats = latency_series(rng, model, run.windows, scenario.rate_per_s, run.warmup_s)
    rows = tuple(LatencyWindow(w.index, w.start_s, w.end_s, ttft=s) for w, s in zip(run.windows, stats))
    return latency.check_ttft(replace(run, latency_windows=rows), gates)


def _request_rows(windows: tuple[WindowInfo, ...], counts: list[tuple[int, int]]) -> tuple[RequestWindow, ...]:
    return tuple(RequestWindow(w.index, w.start_s, w.end_s, requests=n, errors={"http_5xx": e}, sends=n)
                 for w, (n, e) in zip(windows, counts))


def trial_error_rise(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Overdispersed base rate plus random bursts; rise planted as `multiple` × rise_abs."""
    run = _run(scenario)
    model = ErrorModel(rise_abs=multiple * gates.errors.rise_abs)
    counts = error_counts(rng, model, run.windows, scenario.rate_per_s, run.warmup_s)
    return error_checks.check_rise(replace(run, request_windows=_request_rows(run.windows, counts)), gates)


def trial_bursts(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Overdispersed base rate, no bursts; one window's rate raised to `multiple` × burst_factor ×
    the base rate when planted."""
    run = _run(scenario)
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
    run = _run(scenario)
    drift = ar1(rng, len(run.windows), 0.5, 0.03)
    rows = []
    for w, level in zip(run.windows, drift):
        n = int(rng.poisson(scenario.rate_per_s * (w.end_s - w.start_s)))
        share = max(w.mid_s - run.warmup_s, 0.0) / (run.windows[-1].end_s - run.warmup_s)
        per_request = 200 * np.exp(level) * (1 - multiple * gates.throughput.decay_frac * share)
        tokens = rng.lognormal(np.log(per_request) - 0.5, 1.0, n).sum()  # cv ≈ 1.3 per request
        rows.append(RequestWindow(w.index, w.start_s, w.end_s, requests=n, output_tokens=int(tokens), sends=n))
    return throughput.check_decay(replace(run, request_windows=tuple(rows)), gates)


Trial = Callable[[np.random.Generator, Scenario, float, Gates], Finding]
TRIALS: dict[str, Trial] = {
    "leak.rss": trial_rss, "leak.vram": trial_vram, "leak.fds": trial_fds,
    "creep.ttft_p99": trial_creep, "errors.rise": trial_error_rise, "errors.bursts": trial_bursts,
    "throughput.decay": trial_throughput,
}


@dataclass(frozen=True)
class Rates:
    check: str
    scenario: str
    multiple: float
    trials: int
    verdicts: dict[str, int]

    @property
    def fail_rate(self) -> float:
        return self.verdicts.get(FAIL, 0) / self.trials

    def rate(self, verdict: str) -> float:
        return self.verdicts.get(verdict, 0) / self.trials


def detector_rates(check: str, trials: int, seed: int, multiple: float, scenario: str = "24h",
                   gates: Gates | None = None) -> Rates:
    """Verdict counts of `check` over `trials` synthetic runs (fixed seed)."""
    gates = gates or Gates()
    rng = np.random.default_rng(seed)
    verdicts = Counter(TRIALS[check](rng, SCENARIOS[scenario], multiple, gates).verdict
                       for _ in range(trials))
    return Rates(check, scenario, multiple, trials, dict(verdicts))
