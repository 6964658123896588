"""Power cases of the leak detectors (leak.rss, leak.vram, leak.fds, leak.kv): see proof.py.

Thresholds are absolute (16 MiB/h for memory without a host series, 4 fds/h), so a short run has
less power, not a laxer gate: the short scenarios claim no power, they show how often a short run
still earns a PASS. `multiple` scales the planted fault against the practical threshold; for a step
the fault is a step of `multiple` × the step gate's minimum shift (threshold × judged span).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from soak.analysis import kv, memory
from soak.analysis.findings import Finding
from soak.analysis.gates import Gates
from soak.analysis.inputs import (
    GpuProcessSeries,
    ProbeReading,
    ProcessReading,
    ProcessSeries,
    RunData,
    ServerSeries,
)

from .proof import Case, Scenario, bare_scenario_run, judged_span_h
from .synthetic import (
    MIB,
    MemoryModel,
    kv_usage_series,
    memory_series,
    scaled_memory_model,
    slow_wander,
    stairs,
    warmup_tail,
)

TREE_FLOORS_BYTES = (600 * MIB, 1400 * MIB)
HORIZON_S = 7 * 86400.0
Planted = Callable[[np.ndarray], np.ndarray]


def rss_threshold_bytes_per_h(gates: Gates) -> float:
    """leak.rss's threshold on a run without a host series (headroom unknown)."""
    return gates.leak.rss.threshold_bytes_per_h(None, HORIZON_S)


def healthy_model(scenario: Scenario, floor_bytes: float) -> MemoryModel:
    """The healthy memory model scaled to the scenario, with allocator ratchets at the 24 h model's
    rate (3 a day) rather than 3 per run: 3 ratchets in 5 minutes would be a climb of hundreds of
    MiB/h, a leak by any absolute standard (identical to `scaled_memory_model` for 24 h runs), and
    no sawtooth where the windows are too short to show one (see below)."""
    model = scaled_memory_model(scenario.run_s, floor_bytes=floor_bytes, noise_frac=scenario.memory_noise_frac)
    model = replace(model, ratchets_per_run=model.ratchets_per_run * scenario.run_s / 86400.0)
    if model.sawtooth_period_s < 5 * scenario.sample_s:
        # A sawtooth must be shorter than half a window (so a window's floor sees its trough) and
        # longer than a few samples (else it aliases into a slow wander of the floors that no real
        # GC cycle makes). A 5-minute run's windows are too short for both, so it gets none.
        model = replace(model, sawtooth_frac=0.0)
    return model


def tree_run(rng: np.random.Generator, scenario: Scenario, planted: Planted | None = None):
    """A healthy two-process tree; `planted(t_s)` bytes are added to the larger process."""
    processes = []
    for i, floor in enumerate(TREE_FLOORS_BYTES):
        model = healthy_model(scenario, floor)
        t_s, rss = memory_series(rng, model, scenario.run_s, scenario.sample_s)
        if planted is not None and i == 1:
            rss = rss + planted(t_s)
        processes.append(ProcessSeries(pid=100 + i, name=f"proc{i}", t_s=t_s, rss_bytes=rss))
    return bare_scenario_run(scenario, processes=tuple(processes))


def trial_rss(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """A two-process tree; the leak, if any, is a straight slope in the larger process."""
    slope = multiple * rss_threshold_bytes_per_h(gates)
    return memory.check_rss(tree_run(rng, scenario, lambda t: slope * t / 3600), gates)


def trial_rss_below(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """A leak under the threshold: `multiple` / 4 × threshold (0.5× at 2×). It should not FAIL
    often, and should not PASS often either when the run cannot rule it out."""
    return trial_rss(rng, scenario, multiple / 4, gates)


def trial_rss_step(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """One lasting step at 14/24 of the run (hour 14 of 24) of `multiple` × the step gate's minimum."""
    size = multiple * rss_threshold_bytes_per_h(gates) * judged_span_h(scenario)
    at_s = scenario.run_s * 14 / 24
    return memory.check_rss(tree_run(rng, scenario, lambda t: size * (t >= at_s)), gates)


def trial_rss_staircase(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """A leak in eight stairs (every 3 h of 24 h) whose average slope is `multiple` × threshold."""
    slope_per_s = multiple * rss_threshold_bytes_per_h(gates) / 3600
    stair_s = scenario.run_s / 8
    offset = rng.uniform(0, stair_s)
    return memory.check_rss(tree_run(rng, scenario, lambda t: slope_per_s * stair_s * np.floor((t + offset) / stair_s)),
                            gates)


def trial_rss_warmup_tail(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Caches filling past the configured warm-up: the larger process climbs a further 2–6 % of its
    floor with a time constant of 3–25 % of the run (longer at a lower request rate, as caches fill
    with requests), plus a straight leak of `multiple` × threshold."""
    slope = multiple * rss_threshold_bytes_per_h(gates)
    gain = rng.uniform(0.02, 0.06) * TREE_FLOORS_BYTES[1]
    tau_s = min(rng.uniform(0.03, 0.25) * np.sqrt(10.0 / scenario.rate_per_s), 0.5) * scenario.run_s
    return memory.check_rss(tree_run(rng, scenario, lambda t: warmup_tail(t, gain, tau_s) + slope * t / 3600),
                            gates)


def trial_rss_wander(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Memory that settles and then wanders slowly: a short warm-up tail (1–4 %, τ 5–20 % of the run)
    and an AR(1) wander of 0.3–1 % of the floor whose correlation time is 10–50 % of the run — on a
    short run, wander on a timescale the run cannot average out; plus a leak of `multiple` × threshold."""
    slope = multiple * rss_threshold_bytes_per_h(gates)
    floor = TREE_FLOORS_BYTES[1]
    gain, tau_s = rng.uniform(0.01, 0.04) * floor, rng.uniform(0.05, 0.2) * scenario.run_s
    sd, wander_tau_s = rng.uniform(0.003, 0.01) * floor, rng.uniform(0.1, 0.5) * scenario.run_s

    def planted(t_s: np.ndarray) -> np.ndarray:
        return warmup_tail(t_s, gain, tau_s) + slow_wander(rng, t_s, sd, wander_tau_s) + slope * t_s / 3600

    return memory.check_rss(tree_run(rng, scenario, planted), gates)


def trial_rss_slow_wander(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Memory that wanders more slowly than the run lasts: AR(1) of 5–15 MiB with a correlation time of 1–2 runs
    (40 minutes under a 30-minute run), on the healthy tree's white noise; plus a leak of `multiple` × threshold.
    Its rise or fall over the run is the wander's, so the run can bound neither: it must never PASS."""
    slope = multiple * rss_threshold_bytes_per_h(gates)
    sd, wander_tau_s = rng.uniform(5, 15) * MIB, rng.uniform(1.0, 2.0) * scenario.run_s

    def planted(t_s: np.ndarray) -> np.ndarray:
        return slow_wander(rng, t_s, sd, wander_tau_s) + slope * t_s / 3600

    return memory.check_rss(tree_run(rng, scenario, planted), gates)


def trial_rss_small_step(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """A healthy short run whose allocator steps up 1 MiB at a third of the run and stays there (the
    step is part of the healthy run), plus a straight leak of `multiple` × threshold."""
    slope = multiple * rss_threshold_bytes_per_h(gates)
    at_s = scenario.run_s / 3
    return memory.check_rss(tree_run(rng, scenario, lambda t: 1 * MIB * (t >= at_s) + slope * t / 3600), gates)


def trial_rss_late_stairs(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Two or three lasting steps late in the run (between half-way and 90 %), uneven, adding up to
    `multiple` × the net-growth threshold (128 MiB without a host series): at 2×, 256 MiB that never
    comes back."""
    total = multiple * gates.leak.rss.net_growth_threshold(None)
    count = int(rng.integers(2, 4))
    at_s = np.sort(rng.uniform(0.5, 0.9, count)) * scenario.run_s
    shares = rng.uniform(0.7, 1.3, count)
    return memory.check_rss(tree_run(rng, scenario, lambda t: stairs(t, at_s, total * shares / shares.sum())), gates)


def trial_rss_plateau(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """One allocator plateau that stops: a single step of `multiple` × 12 MiB (24 MiB at 2×) anywhere
    after the first fifth of the run. It must not FAIL at any multiple shown."""
    at_s = rng.uniform(0.2, 0.9) * scenario.run_s
    return memory.check_rss(tree_run(rng, scenario, lambda t: multiple * 12 * MIB * (t >= at_s)), gates)


def vram_run(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> RunData:
    """A preallocated 60 GiB plateau: flat by design, with small NVML noise and a rare 2 MiB step
    (one a day, as for RSS a rate rather than a count per run)."""
    floor = 60 * 2**30
    threshold = gates.leak.vram.threshold_bytes_per_h(None, HORIZON_S)
    model = replace(scaled_memory_model(scenario.run_s, floor_bytes=floor), warmup_gain_frac=0.0,
                    sawtooth_frac=0.0, noise_frac=2 * MIB / floor, ratchets_per_run=scenario.run_s / 86400.0,
                    ratchet_frac=2 * MIB / floor, slope_bytes_per_h=multiple * threshold)
    t_s, used = memory_series(rng, model, scenario.run_s, scenario.sample_s)
    return bare_scenario_run(scenario, gpu_seen=True, gpu_processes=(GpuProcessSeries(1, t_s, used, "engine"),))


def trial_vram(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    return memory.check_vram(vram_run(rng, scenario, multiple, gates), gates)


def trial_fds(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """40 fds at rest plus transient sockets; the leak adds whole descriptors over time."""
    threshold = gates.leak.fds.slope_fds_per_h
    t_s = np.arange(0.0, scenario.run_s, scenario.sample_s)
    fds = 40 + rng.poisson(2.0, t_s.size) + np.floor(multiple * threshold * t_s / 3600)
    process = ProcessSeries(pid=1, name="server", t_s=t_s, rss_bytes=np.full(t_s.size, 1e9), fds=fds)
    return memory.check_fds(bare_scenario_run(scenario, processes=(process,)), gates)


def trial_fds_at_rest(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """Open connections follow a load that swings ±50 % over the run, so the fd floors under load
    swing too; hourly idle probes read the fds at rest (40, plus the planted leak)."""
    threshold = gates.leak.fds.slope_fds_per_h
    t_s = np.arange(0.0, scenario.run_s, scenario.sample_s)
    load = 1 + 0.5 * np.sin(2 * np.pi * (t_s / scenario.run_s + rng.uniform()))
    leaked = np.floor(multiple * threshold * t_s / 3600)
    fds = 40 + leaked + rng.poisson(scenario.rate_per_s * 4.0 * load) + 2
    probe_t = np.arange(scenario.run_s / 24, scenario.run_s, scenario.run_s / 24)
    probes = tuple(ProbeReading(t, 0.0, 0.0, 0.0, True,
                                (ProcessReading(1, "server", 1e9, fds=40 + float(np.floor(multiple * threshold * t / 3600))),))
                   for t in probe_t)
    process = ProcessSeries(pid=1, name="server", t_s=t_s, rss_bytes=np.full(t_s.size, 1e9), fds=fds)
    run = bare_scenario_run(scenario, processes=(process,), probes=probes, probes_ran=True)
    return memory.check_fds(run, gates)


def trial_kv_floor(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """No idle probes; the KV floor starts climbing at a quarter of the run (hour 6 of 24) at
    `multiple` × the threshold the check derives from the healthy run's starting floor."""
    t_s, running, kv_usage = kv_usage_series(rng, scenario.run_s, scenario.sample_s, scenario.rate_per_s)
    healthy = bare_scenario_run(scenario, server=ServerSeries(t_s=t_s, running=running, kv_usage=kv_usage))
    threshold_per_s, _ = kv.floor_threshold_per_s(kv.floor_series(healthy)[1], gates.leak.kv, healthy.horizon_s)
    onset_s = scenario.run_s / 4
    leaked = np.clip(kv_usage + multiple * threshold_per_s * np.clip(t_s - onset_s, 0, None), 0, 1)
    run = replace(healthy, server=ServerSeries(t_s=t_s, running=running, kv_usage=leaked))
    return kv.check_kv(run, gates)


LONG = ("24h", "24h-noisy")
SHORT = ("2h", "1h", "30m", "5m")
SHORT_RATES = ("2h", "1h", "30m", "30m-2rps")
CASES = [Case("leak.rss", "steady", trial_rss, LONG), Case("leak.vram", "steady", trial_vram, ("24h", "1h")),
         Case("leak.fds", "steady", trial_fds, LONG),
         # 2× the threshold builds 8 fds in an hour, under the 16 a rise must reach to FAIL: no power claimed
         Case("leak.fds", "short", trial_fds, ("1h", "5m"), power=False),
         Case("leak.rss", "short", trial_rss, SHORT, power=False),
         Case("leak.rss", "late-step", trial_rss_step, LONG),
         Case("leak.rss", "staircase", trial_rss_staircase, LONG),
         Case("leak.rss", "below-threshold", trial_rss_below, LONG, power=False),
         Case("leak.rss", "warmup-tail", trial_rss_warmup_tail, LONG),
         Case("leak.rss", "warmup-tail-short", trial_rss_warmup_tail, SHORT_RATES, power=False),
         Case("leak.rss", "wander", trial_rss_wander, SHORT_RATES, power=False),
         Case("leak.rss", "slow-wander", trial_rss_slow_wander, ("30m",), power=False),
         Case("leak.rss", "small-step", trial_rss_small_step, ("30m", "5m"), power=False),
         Case("leak.rss", "late-stairs", trial_rss_late_stairs, LONG),
         Case("leak.rss", "plateau", trial_rss_plateau, LONG + ("2h", "1h"), power=False),
         Case("leak.fds", "at-rest", trial_fds_at_rest, ("24h",)),
         Case("leak.kv", "late-floor", trial_kv_floor, ("24h",))]
