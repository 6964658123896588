"""Synthetic series with known truth, to prove the detectors (see proof.py beside this module).

memory  = warm-up exponential + GC sawtooth + AR(1) noise + ratchet steps (+ planted slope)
latency = lognormal per request + window-level AR(1) drift + stalls (+ planted creep)
errors  = base rate with overdispersion + bursts (+ planted rise)

Healthy defaults describe a 24 h run. All generators take a `numpy.random.Generator`, so a fixed
seed gives a fixed series. `synthetic_run` assembles a whole `RunData` with optional planted faults
for end-to-end tests and report demos.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.signal import lfilter

from soak.analysis.inputs import (
    ClientSeries,
    Event,
    GpuProcessSeries,
    LatencyStats,
    ProbeReading,
    ProcessReading,
    ProcessSeries,
    RunData,
    ServerSeries,
    WindowInfo,
    WindowLatency,
    WindowRequests,
)
from soak.analysis.windows import default_warmup_s, default_window_s

MIB = 2**20
HOUR_S = 3600.0


def plan_windows(run_s: float, warmup_s: float | None = None, window_s: float | None = None,
                 probe_spans_s: tuple[tuple[float, float], ...] = ()) -> tuple[WindowInfo, ...]:
    """Window 0 is the warm-up; then windows of `window_s` up to `run_s`.

    A window overlapping any (start_s, end_s) of `probe_spans_s` is excluded as "probe".
    The analysis takes windows as given (the loader builds them from the stored run); this planner builds
    them for synthetic runs.
    """
    warmup_s = default_warmup_s(run_s) if warmup_s is None else warmup_s
    window_s = default_window_s(run_s, warmup_s) if window_s is None else window_s
    windows = [WindowInfo(0, 0.0, warmup_s, "warmup")]
    start_s = warmup_s
    while start_s + 0.5 * window_s <= run_s:
        end_s = min(start_s + window_s, run_s)
        in_probe = any(a < end_s and b > start_s for a, b in probe_spans_s)
        windows.append(WindowInfo(len(windows), start_s, end_s, "probe" if in_probe else None))
        start_s = end_s
    return tuple(windows)


def ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """A stationary AR(1) series with lag-1 correlation `phi` and marginal standard deviation `sd`."""
    shocks = rng.standard_normal(n) * sd * np.sqrt(1 - phi * phi)
    shocks[0] = rng.standard_normal() * sd  # start from the stationary distribution
    return lfilter([1.0], [1.0, -phi], shocks)


# ---------------------------------------------------------------------------------------------
# Memory


@dataclass(frozen=True)
class MemoryModel:
    """A process's resident memory; fractions are of `floor_bytes`."""

    floor_bytes: float = 2048 * MIB
    warmup_gain_frac: float = 0.10     # how far below the plateau it starts
    warmup_tau_s: float = 900.0        # climb to the plateau: a quarter of a 24 h run's 60 min warm-up
    sawtooth_frac: float = 0.05        # GC / allocator sawtooth amplitude
    sawtooth_period_s: float = 240.0
    noise_frac: float = 0.004          # AR(1) noise standard deviation
    noise_tau_s: float = 3600.0        # AR(1) correlation time: slow drift (≈ 2 windows of 24 h)
    ratchets_per_run: float = 3.0      # mean number of permanent step-ups (allocator arenas)
    ratchet_frac: float = 0.0025       # size of each step
    slope_bytes_per_h: float = 0.0     # the planted leak


def memory_series(rng: np.random.Generator, model: MemoryModel, run_s: float = 86400.0,
                  sample_s: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    """(t_s, bytes) sampled every `sample_s` over `run_s`."""
    t_s = np.arange(0.0, run_s, sample_s)
    floor = model.floor_bytes
    warmup = -model.warmup_gain_frac * floor * np.exp(-t_s / model.warmup_tau_s)
    period = model.sawtooth_period_s * rng.uniform(0.8, 1.2)
    sawtooth = model.sawtooth_frac * floor * ((t_s / period + rng.uniform()) % 1.0)
    noise = ar1(rng, t_s.size, np.exp(-sample_s / model.noise_tau_s), model.noise_frac * floor)
    steps = rng.uniform(0, run_s, rng.poisson(model.ratchets_per_run))
    ratchet = model.ratchet_frac * floor * (t_s[:, None] >= steps[None, :]).sum(axis=1)
    leak = model.slope_bytes_per_h * t_s / HOUR_S
    return t_s, floor + warmup + sawtooth + noise + ratchet + leak


def warmup_tail(t_s: np.ndarray, gain_bytes: float, tau_s: float) -> np.ndarray:
    """A warm-up that outlasts the configured one (caches filling): −gain·exp(−t/τ), added to a series."""
    return -gain_bytes * np.exp(-t_s / tau_s)


def slow_wander(rng: np.random.Generator, t_s: np.ndarray, sd_bytes: float, tau_s: float) -> np.ndarray:
    """Memory that wanders on a timescale τ comparable to a short run: AR(1) with correlation time τ."""
    step_s = float(t_s[1] - t_s[0]) if t_s.size > 1 else 1.0
    return ar1(rng, t_s.size, float(np.exp(-step_s / tau_s)), sd_bytes)


def stairs(t_s: np.ndarray, at_s: np.ndarray, sizes_bytes: np.ndarray) -> np.ndarray:
    """Lasting steps: `sizes_bytes[i]` from `at_s[i]` on, none ever returned."""
    return (np.asarray(sizes_bytes)[None, :] * (t_s[:, None] >= np.asarray(at_s)[None, :])).sum(axis=1)


# ---------------------------------------------------------------------------------------------
# Latency


@dataclass(frozen=True)
class LatencyModel:
    """Per-request latency of one metric; creep is the planted relative rise over the judged span."""

    median_ms: float = 800.0
    sigma: float = 0.5                 # lognormal shape per request
    window_sigma: float = 0.05         # window-level drift of the median (log units)
    window_phi: float = 0.5            # its window-to-window correlation
    stalls_per_h: float = 1.0
    stall_max_s: float = 8.0           # a stall delays requests arriving in it by up to this much
    creep_frac: float = 0.0


def latency_samples(rng: np.random.Generator, model: LatencyModel, n: int, rate_per_s: float,
                    level: float, multiplier: float, window_s: float) -> np.ndarray:
    """Latencies (ms) of the n requests of one window."""
    values = model.median_ms * np.exp(model.sigma * rng.standard_normal(n) + level) * multiplier
    for _ in range(rng.poisson(model.stalls_per_h * window_s / HOUR_S)):
        stall_s = rng.uniform(0.25, 1.0) * model.stall_max_s
        hit = rng.choice(n, size=min(n, rng.poisson(rate_per_s * stall_s)), replace=False)
        values[hit] += rng.uniform(0, stall_s, hit.size) * 1000
    return values


def stats_of(samples_ms: np.ndarray) -> LatencyStats:
    p50, p90, p95, p99 = np.percentile(samples_ms, [50, 90, 95, 99])
    return LatencyStats(count=int(samples_ms.size), p50_ms=p50, p90_ms=p90, p95_ms=p95, p99_ms=p99)


def latency_series(rng: np.random.Generator, model: LatencyModel, windows: tuple[WindowInfo, ...],
                   rate_per_s: float, warmup_s: float) -> list[LatencyStats | None]:
    """Stats per window (None where the window had no request)."""
    levels = ar1(rng, len(windows), model.window_phi, model.window_sigma)
    end_s = windows[-1].end_s
    out: list[LatencyStats | None] = []
    for window, level in zip(windows, levels):
        share = max(window.mid_s - warmup_s, 0.0) / max(end_s - warmup_s, 1.0)
        n = rng.poisson(rate_per_s * (window.end_s - window.start_s))
        if n == 0:
            out.append(None)
            continue
        samples = latency_samples(rng, model, n, rate_per_s, level, (1 + model.creep_frac) ** share,
                                  window.end_s - window.start_s)
        out.append(stats_of(samples))
    return out


def latency_series_shaped(rng: np.random.Generator, model: LatencyModel, windows: tuple[WindowInfo, ...],
                          counts: np.ndarray, multipliers: np.ndarray) -> list[LatencyStats | None]:
    """Like `latency_series`, with the number of requests and a latency multiplier per window (a
    varying load that latency follows, a step…) instead of a constant rate and the planted creep."""
    levels = ar1(rng, len(windows), model.window_phi, model.window_sigma)
    out: list[LatencyStats | None] = []
    for window, level, n, multiplier in zip(windows, levels, counts, multipliers):
        rate = n / max(window.end_s - window.start_s, 1e-9)
        if n == 0:
            out.append(None)
            continue
        samples = latency_samples(rng, model, n, rate, level, multiplier, window.end_s - window.start_s)
        out.append(stats_of(samples))
    return out


# ---------------------------------------------------------------------------------------------
# Errors


@dataclass(frozen=True)
class ErrorModel:
    """Window error counts; `rise_abs` is the planted rise of the error rate over the judged span."""

    base_rate: float = 0.002
    overdispersion_sigma: float = 0.3   # window-to-window lognormal spread of the rate
    bursts_per_h: float = 0.5
    burst_s: float = 30.0
    burst_error_frac: float = 0.5       # share of requests failing during a burst
    rise_abs: float = 0.0


def error_counts(rng: np.random.Generator, model: ErrorModel, windows: tuple[WindowInfo, ...],
                 rate_per_s: float, warmup_s: float) -> list[tuple[int, int]]:
    """(requests, errors) per window."""
    end_s = windows[-1].end_s
    out = []
    for window in windows:
        window_s = window.end_s - window.start_s
        n = int(rng.poisson(rate_per_s * window_s))
        share = max(window.mid_s - warmup_s, 0.0) / max(end_s - warmup_s, 1.0)
        rate = model.base_rate * np.exp(model.overdispersion_sigma * rng.standard_normal()
                                        - model.overdispersion_sigma ** 2 / 2) + model.rise_abs * share
        errors = rng.binomial(n, min(rate, 1.0))
        for _ in range(rng.poisson(model.bursts_per_h * window_s / HOUR_S)):
            errors += rng.binomial(rng.poisson(rate_per_s * model.burst_s), model.burst_error_frac)
        out.append((n, int(min(errors, n))))
    return out


def error_counts_shaped(rng: np.random.Generator, model: ErrorModel, windows: tuple[WindowInfo, ...],
                        rate_per_s: float, extra_rate: np.ndarray) -> list[tuple[int, int]]:
    """Like `error_counts`, with `extra_rate[i]` added to window i's error rate instead of the
    linear `rise_abs` (a late ramp, a step…)."""
    out = []
    for window, extra in zip(windows, extra_rate):
        window_s = window.end_s - window.start_s
        n = int(rng.poisson(rate_per_s * window_s))
        rate = model.base_rate * np.exp(model.overdispersion_sigma * rng.standard_normal()
                                        - model.overdispersion_sigma ** 2 / 2) + extra
        errors = rng.binomial(n, min(rate, 1.0))
        for _ in range(rng.poisson(model.bursts_per_h * window_s / HOUR_S)):
            errors += rng.binomial(rng.poisson(rate_per_s * model.burst_s), model.burst_error_frac)
        out.append((n, int(min(errors, n))))
    return out


# ---------------------------------------------------------------------------------------------
# A whole run


@dataclass(frozen=True)
class RunModel:
    """A whole synthetic run; the planted-fault fields default to a healthy run."""

    run_s: float = 86400.0
    rate_per_s: float = 2.0
    sample_s: float = 10.0
    probe_every_s: float = 0.0          # 0: no idle probes
    probe_hold_s: float = 30.0
    processes: tuple[tuple[str, float], ...] = (("api_server", 600 * MIB), ("EngineCore", 1400 * MIB))
    gpu: bool = True
    leak_bytes_per_h: float = 0.0       # planted in the last process
    vram_leak_bytes_per_h: float = 0.0
    creep_frac: float = 0.0
    error_rise_abs: float = 0.0
    kv_residue: float = 0.0             # KV usage left after drains, from the middle of the run on
    hang_at_s: float | None = None
    hang_for_s: float = 300.0
    crash_at_s: float | None = None
    lag_p99_ms: float = 2.0
    late_frac: float = 0.0


def synthetic_run(seed: int, model: RunModel = RunModel()) -> RunData:
    """A complete RunData drawn from `model` with a fixed seed."""
    rng = np.random.default_rng(seed)
    warmup_s = default_warmup_s(model.run_s)
    probe_spans = _probe_spans(model, warmup_s)
    windows = plan_windows(model.run_s, warmup_s, probe_spans_s=probe_spans)
    processes = _processes(rng, model)
    return RunData(
        planned_duration_s=model.run_s, actual_duration_s=model.run_s, warmup_s=warmup_s,
        window_s=windows[1].end_s - windows[1].start_s, windows=windows, gpu_seen=model.gpu,
        probes_ran=bool(probe_spans), processes=processes, gpu_processes=_gpu(rng, model),
        probes=_probes(model, probe_spans, processes),
        latency_windows=_latency_windows(rng, model, windows, warmup_s),
        request_windows=_request_windows(rng, model, windows, warmup_s),
        server=_server(rng, model), client=_client(rng, model), events=_events(model),
        total_requests=int(model.rate_per_s * model.run_s))


def _probe_spans(model: RunModel, warmup_s: float) -> tuple[tuple[float, float], ...]:
    if model.probe_every_s <= 0:
        return ()
    starts = np.arange(warmup_s + model.probe_every_s, model.run_s, model.probe_every_s)
    return tuple((float(s), float(s) + model.probe_hold_s + 10.0) for s in starts)


def scaled_memory_model(run_s: float, **fields) -> MemoryModel:
    """The healthy memory model with its time constants scaled to a run of `run_s`: the warm-up
    climb mostly done by the end of the warm-up, the sawtooth shorter than a window."""
    warmup_s = default_warmup_s(run_s)
    window_s = default_window_s(run_s, warmup_s)
    return MemoryModel(warmup_tau_s=warmup_s / 4, sawtooth_period_s=min(240.0, window_s / 2),
                       noise_tau_s=min(3600.0, run_s / 24), **fields)


def _processes(rng: np.random.Generator, model: RunModel) -> tuple[ProcessSeries, ...]:
    out = []
    for i, (name, floor) in enumerate(model.processes):
        leak = model.leak_bytes_per_h if i == len(model.processes) - 1 else 0.0
        mem = scaled_memory_model(model.run_s, floor_bytes=floor, slope_bytes_per_h=leak)
        t_s, rss = memory_series(rng, mem, model.run_s, model.sample_s)
        fds = np.full(t_s.size, 40.0 + 10 * i) + rng.integers(0, 3, t_s.size)
        out.append(ProcessSeries(pid=1000 + i, name=name, t_s=t_s, rss_bytes=rss, fds=fds,
                                 threads=np.full(t_s.size, 8.0)))
    return tuple(out)


def _gpu(rng: np.random.Generator, model: RunModel) -> tuple[GpuProcessSeries, ...]:
    if not model.gpu:
        return ()
    # vLLM preallocates: the plateau is flat by design, only small noise and the planted leak move.
    mem = MemoryModel(floor_bytes=60 * 2**30, warmup_gain_frac=0.0, sawtooth_frac=0.0,
                      noise_frac=1e-5, ratchets_per_run=0.0, slope_bytes_per_h=model.vram_leak_bytes_per_h)
    t_s, used = memory_series(rng, mem, model.run_s, model.sample_s)
    return (GpuProcessSeries(pid=1000 + len(model.processes) - 1, t_s=t_s, used_bytes=used,
                             name=model.processes[-1][0]),)


def _probes(model: RunModel, spans: tuple, processes: tuple[ProcessSeries, ...]) -> tuple[ProbeReading, ...]:
    out = []
    for start_s, end_s in spans:
        residue = model.kv_residue if start_s >= model.run_s / 2 else 0.0
        readings = tuple(ProcessReading(p.pid, p.name, float(np.interp(end_s, p.t_s, p.rss_bytes)),
                                        fds=float(np.interp(end_s, p.t_s, p.fds))) for p in processes)
        out.append(ProbeReading(t_s=end_s, kv_usage=residue, running=1.0 if residue else 0.0,
                                waiting=0.0, drained=True, processes=readings))
    return tuple(out)


def _latency_windows(rng: np.random.Generator, model: RunModel, windows: tuple[WindowInfo, ...],
                     warmup_s: float) -> tuple[WindowLatency, ...]:
    metrics = {"ttft": LatencyModel(median_ms=150, creep_frac=model.creep_frac),
               "itl": LatencyModel(median_ms=25, sigma=0.3, creep_frac=model.creep_frac),
               "e2e": LatencyModel(median_ms=4000, sigma=0.6, creep_frac=model.creep_frac)}
    # ITL has one sample per chunk gap: ~50 per request.
    rates = {"ttft": model.rate_per_s, "itl": 50 * model.rate_per_s, "e2e": model.rate_per_s}
    series = {m: latency_series(rng, lm, windows, rates[m], warmup_s) for m, lm in metrics.items()}
    return tuple(WindowLatency(w.index, w.start_s, w.end_s, *(series[m][i] for m in metrics))
                 for i, w in enumerate(windows))


def _request_windows(rng: np.random.Generator, model: RunModel, windows: tuple[WindowInfo, ...],
                     warmup_s: float) -> tuple[WindowRequests, ...]:
    counts = error_counts(rng, ErrorModel(rise_abs=model.error_rise_abs), windows, model.rate_per_s, warmup_s)
    out = []
    for window, (n, errors) in zip(windows, counts):
        tokens = int(rng.normal(200, 10) * (n - errors)) if n > errors else 0
        out.append(WindowRequests(window.index, window.start_s, window.end_s, requests=n,
                                 errors={"http_5xx": errors}, output_tokens=max(tokens, 0), sends=n,
                                 late_sends_1s=int(round(model.late_frac * n)),
                                 lag_p99_ms=model.lag_p99_ms))
    return tuple(out)


def _server(rng: np.random.Generator, model: RunModel) -> ServerSeries:
    t_s = np.arange(0.0, model.run_s, 5.0)
    running = rng.poisson(model.rate_per_s * 4.0, t_s.size).astype(float) + 1
    tokens_step = rng.poisson(model.rate_per_s * 5 * 200, t_s.size).astype(float)
    if model.hang_at_s is not None:
        stuck = (t_s >= model.hang_at_s) & (t_s < model.hang_at_s + model.hang_for_s)
        tokens_step[stuck] = 0.0
    health = np.ones(t_s.size)
    if model.crash_at_s is not None:
        health[(t_s >= model.crash_at_s) & (t_s < model.crash_at_s + 30)] = 0.0
    return ServerSeries(t_s=t_s, running=running, waiting=np.zeros(t_s.size),
                        kv_usage=np.clip(running / 64, 0, 1), generation_tokens_total=np.cumsum(tokens_step),
                        preemptions_total=np.zeros(t_s.size), health_ok=health)


def _client(rng: np.random.Generator, model: RunModel) -> ClientSeries:
    t_s = np.arange(0.0, model.run_s, 10.0)
    sends = int(model.rate_per_s * model.run_s)
    return ClientSeries(t_s=t_s, cpu_percent=rng.normal(8, 1, t_s.size),
                        rss_bytes=np.full(t_s.size, 200.0 * MIB), sends=sends,
                        late_sends_1s=int(round(model.late_frac * sends)), lag_p99_ms=model.lag_p99_ms)


def _events(model: RunModel) -> tuple[Event, ...]:
    events = [Event(0.0, "server_start", "server ready")]
    if model.crash_at_s is not None:
        events += [Event(model.crash_at_s, "crash", "EngineCore died",
                         {"exit_code": -9, "log_tail": "RuntimeError: CUDA error: out of memory"}),
                   Event(model.crash_at_s + 30, "restart", "server restarted")]
    return tuple(events)


def bare_run(run_s: float, warmup_s: float | None = None, window_s: float | None = None,
             probe_spans_s: tuple[tuple[float, float], ...] = (), **fields) -> RunData:
    """A RunData with planned windows and only the series given in `fields`."""
    warmup_s = default_warmup_s(run_s) if warmup_s is None else warmup_s
    windows = plan_windows(run_s, warmup_s, window_s, probe_spans_s)
    return RunData(planned_duration_s=run_s, actual_duration_s=fields.pop("actual_duration_s", run_s),
                   warmup_s=warmup_s, window_s=windows[1].end_s - windows[1].start_s,
                   windows=windows, **fields)


def with_changes(model: RunModel, **changes) -> RunModel:
    """A copy of `model` with some fields changed (a planted fault, a shorter run)."""
    return replace(model, **changes)


def kv_usage_series(rng: np.random.Generator, run_s: float, sample_s: float,
                    rate_per_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(t_s, running, kv_usage) of a healthy server under steady load, no idle probes: each running
    request holds 1/64 of the cache, so the KV floor of a window is where the fewest ran."""
    t_s = np.arange(0.0, run_s, sample_s)
    running = rng.poisson(rate_per_s * 4.0, t_s.size).astype(float) + 1
    return t_s, running, np.clip(running / 64, 0, 1)
