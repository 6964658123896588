"""Monte Carlo proof of the early-stop rule (soak/analysis/early_stop.py, docs/gates.md "Early stop").

The same synthetic runs as the detectors' proof (proof_leaks.py, proof_traffic.py), windowed as
`--stop-on-fail` windows a run by default (288 windows instead of 48), whole, replayed look by look:
the false-stop rate is the share of healthy runs (multiple 0) the rule would have stopped; on planted
faults, the share stopped and when (as a fraction of the planned duration).
Used by tests/unit/test_early_stop_power.py and bench/detector_power.py --early-stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from soak.analysis.early_stop import SequentialStop, StopDecision, StopRule, judge_look, planned_window_count
from soak.analysis.gates import Gates
from soak.analysis.inputs import ProcessSeries, RunData, WindowLatency
from soak.config import STOP_ON_FAIL_WINDOWS_PER_RUN

from .proof import SCENARIOS, Scenario, bare_scenario_run
from .proof_leaks import rss_threshold_bytes_per_h, tree_run, vram_run
from .synthetic import LatencyModel, latency_series

RunBuilder = Callable[[np.random.Generator, Scenario, float, Gates], RunData]


def first_stop(run: RunData, gates: Gates, rule: StopRule | None = None) -> StopDecision | None:
    """Replay every look over a whole run (the proof's stopping runs): the decision that would have stopped it."""
    planned = planned_window_count(run.planned_duration_s, run.warmup_s, run.window_s)
    sequence = SequentialStop(gates, planned, rule)
    for count in sequence.looks:
        decision = sequence.record(judge_look(run, sequence.gates, count))
        if decision:
            return decision
    return None


def run_rss(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> RunData:
    """proof_leaks.trial_rss's run: a two-process tree, a straight leak in the larger process."""
    slope = multiple * rss_threshold_bytes_per_h(gates)
    return tree_run(rng, scenario, lambda t: slope * t / 3600)


def run_fds(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> RunData:
    """proof_leaks.trial_fds's run: 40 fds plus transient sockets; the leak adds whole descriptors."""
    t_s = np.arange(0.0, scenario.run_s, scenario.sample_s)
    fds = 40 + rng.poisson(2.0, t_s.size) + np.floor(multiple * gates.leak.fds.slope_fds_per_h * t_s / 3600)
    process = ProcessSeries(pid=1, name="server", t_s=t_s, rss_bytes=np.full(t_s.size, 1e9), fds=fds)
    return bare_scenario_run(scenario, processes=(process,))


def run_creep(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> RunData:
    """proof_traffic.trial_creep's run: TTFT per window, creep a rise of `multiple` × rise_frac."""
    run = bare_scenario_run(scenario)
    model = LatencyModel(median_ms=150.0, creep_frac=multiple * gates.creep.ttft_p99.rise_frac)
    stats = latency_series(rng, model, run.windows, scenario.rate_per_s, run.warmup_s)
    rows = tuple(WindowLatency(w.index, w.start_s, w.end_s, ttft=s) for w, s in zip(run.windows, stats))
    return replace(run, latency_windows=rows)


@dataclass(frozen=True)
class StopCase:
    """One detector's synthetic runs, replayed look by look."""

    name: str
    build: RunBuilder
    scenarios: tuple[str, ...] = ("24h",)


STOP_CASES = {case.name: case for case in (
    StopCase("leak.rss", run_rss, ("24h", "24h-noisy", "2h", "1h", "5m")), StopCase("leak.vram", vram_run),
    StopCase("leak.fds", run_fds), StopCase("creep.ttft_p99", run_creep))}


@dataclass(frozen=True)
class StopRates:
    """How often and when the rule stopped `trials` runs of one case."""

    case: str
    scenario: str
    multiple: float
    trials: int
    stop_fractions: tuple[float, ...]  # when each stopped run stopped, as a fraction of its planned duration

    @property
    def stops(self) -> int:
        return len(self.stop_fractions)

    @property
    def stop_rate(self) -> float:
        return self.stops / self.trials

    @property
    def median_stop_fraction(self) -> float:
        return float(np.median(self.stop_fractions)) if self.stop_fractions else float("nan")


def stop_rates(case: str, trials: int, seed: int, multiple: float, scenario: str = "24h",
               gates: Gates | None = None, rule: StopRule | None = None) -> StopRates:
    """Replay the rule over `trials` synthetic runs of `case` (fixed seed)."""
    gates = gates or Gates()
    rng = np.random.default_rng(seed)
    # windowed as --stop-on-fail windows a run by default
    build, shape = STOP_CASES[case].build, replace(SCENARIOS[scenario], windows_per_run=STOP_ON_FAIL_WINDOWS_PER_RUN)
    fractions = []
    for _ in range(trials):
        run = build(rng, shape, multiple, gates)
        decision = first_stop(run, gates, rule)
        if decision is not None:
            fractions.append(decision.t_s / run.planned_duration_s)
    return StopRates(case, scenario, multiple, trials, tuple(fractions))
