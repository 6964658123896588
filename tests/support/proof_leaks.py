"""Power cases of the leak detectors (leak.rss, leak.vram, leak.fds): see proof.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from soak.analysis import memory
from soak.analysis.findings import Finding
from soak.analysis.gates import Gates
from soak.analysis.inputs import GpuProcessSeries, ProcessSeries

from .proof import Case, Scenario, bare_scenario_run, judged_span_h
from .synthetic import MIB, memory_series, scaled_memory_model

TREE_FLOORS_BYTES = (600 * MIB, 1400 * MIB)


def leak_threshold_bytes_per_h(scenario: Scenario, gates: Gates, floor_bytes: float) -> float:
    """The effective practical threshold of leak.rss for a tree of `floor_bytes`."""
    gate = gates.leak.rss
    growth = max(gate.growth_frac * floor_bytes, gate.min_growth_bytes)
    return max(gate.slope_bytes_per_h, growth / judged_span_h(scenario))


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
    return memory.check_rss(bare_scenario_run(scenario, processes=tuple(processes)), gates)


def trial_vram(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """A preallocated 60 GiB plateau: flat by design, with small NVML noise and rare steps."""
    gate = gates.leak.vram
    floor = 60 * 2**30
    threshold = max(gate.slope_bytes_per_h,
                    max(gate.growth_frac * floor, gate.min_growth_bytes) / judged_span_h(scenario))
    model = replace(scaled_memory_model(scenario.run_s, floor_bytes=floor), warmup_gain_frac=0.0,
                    sawtooth_frac=0.0, noise_frac=2 * MIB / floor, ratchets_per_run=1.0,
                    ratchet_frac=2 * MIB / floor, slope_bytes_per_h=multiple * threshold)
    t_s, used = memory_series(rng, model, scenario.run_s, scenario.sample_s)
    run = bare_scenario_run(scenario, gpu_seen=True, gpu_processes=(GpuProcessSeries(1, t_s, used, "engine"),))
    return memory.check_vram(run, gates)


def trial_fds(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """40 fds at rest plus transient sockets; the leak adds whole descriptors over time."""
    gate = gates.leak.fds
    threshold = max(gate.slope_fds_per_h,
                    max(gate.growth_frac * 40, gate.min_growth_fds) / judged_span_h(scenario))
    t_s = np.arange(0.0, scenario.run_s, scenario.sample_s)
    fds = 40 + rng.poisson(2.0, t_s.size) + np.floor(multiple * threshold * t_s / 3600)
    process = ProcessSeries(pid=1, name="server", t_s=t_s, rss_bytes=np.full(t_s.size, 1e9), fds=fds)
    return memory.check_fds(bare_scenario_run(scenario, processes=(process,)), gates)



CASES = [Case("leak.rss", "steady", trial_rss), Case("leak.vram", "steady", trial_vram),
         Case("leak.fds", "steady", trial_fds)]
