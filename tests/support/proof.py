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
from dataclasses import dataclass

import numpy as np

from soak.analysis.findings import FAIL, PASS, SUSPECT, Finding
from soak.analysis.gates import Gates
from soak.analysis.inputs import (
    RunData,
)
from soak.analysis.verdict import overall_verdict, required_checks
from soak.config import default_warmup_s, default_window_s

from .synthetic import (
    bare_run,
    plan_windows,
)


@dataclass(frozen=True)
class Scenario:
    """The shape of a synthetic run: its length, sampling and load."""

    name: str
    run_s: float
    sample_s: float
    rate_per_s: float
    memory_noise_frac: float = 0.004
    windows_per_run: int | None = None  # None: the default window; 288 as under --stop-on-fail


SCENARIOS = {
    "24h": Scenario("24h", 86400.0, 10.0, 2.0),
    "24h-noisy": Scenario("24h-noisy", 86400.0, 10.0, 2.0, memory_noise_frac=0.01),
    "1h": Scenario("1h", 3600.0, 2.0, 10.0),
    "5m": Scenario("5m", 300.0, 1.0, 60.0),
    "2h": Scenario("2h", 7200.0, 2.0, 10.0),
    "30m": Scenario("30m", 1800.0, 1.0, 10.0),
    "72h": Scenario("72h", 3 * 86400.0, 10.0, 2.0),
    "30m-2rps": Scenario("30m-2rps", 1800.0, 1.0, 2.0),
    "6h": Scenario("6h", 6 * 3600.0, 5.0, 10.0),
    "12h": Scenario("12h", 12 * 3600.0, 10.0, 5.0),
}


def bare_scenario_run(scenario: Scenario, **fields) -> RunData:
    if scenario.windows_per_run is None:
        return bare_run(scenario.run_s, **fields)
    warmup_s = default_warmup_s(scenario.run_s)
    window_s = default_window_s(scenario.run_s, warmup_s, scenario.windows_per_run)
    return bare_run(scenario.run_s, warmup_s, window_s, **fields)


def judged_span_h(scenario: Scenario) -> float:
    windows = plan_windows(scenario.run_s)
    mids = [w.mid_s for w in windows if w.excluded is None]
    return (mids[-1] - mids[0]) / 3600.0


Trial = Callable[[np.random.Generator, Scenario, float, Gates], Finding]


@dataclass(frozen=True)
class Case:
    """One detector on one shape of run: `steady` is the plain case; others plant load changes,
    late onsets, steps… `power` says whether the ≥ 90 % power goal at 2× applies to it."""

    check: str
    name: str
    trial: Trial
    scenarios: tuple[str, ...] = ("24h", "24h-noisy", "1h", "5m")
    power: bool = True

    @property
    def key(self) -> str:
        return self.check if self.name == "steady" else f"{self.check}/{self.name}"


def _all_cases() -> dict[str, Case]:
    from . import proof_goodput, proof_leaks, proof_traffic  # they import this module's Case

    return {case.key: case for case in proof_leaks.CASES + proof_traffic.CASES + proof_goodput.CASES}


@dataclass(frozen=True)
class Rates:
    """Verdict counts of one case on one scenario; `required_suspects` counts the SUSPECT findings of a
    required check, and `passed_over_suspect` how many of those a run whose other required checks all
    PASSed would still have called PASS (the earned-PASS rule says none)."""

    check: str
    scenario: str
    multiple: float
    trials: int
    verdicts: dict[str, int]
    required_suspects: int = 0
    passed_over_suspect: int = 0

    @property
    def fail_rate(self) -> float:
        return self.verdicts.get(FAIL, 0) / self.trials

    def rate(self, verdict: str) -> float:
        return self.verdicts.get(verdict, 0) / self.trials


def detector_rates(check: str, trials: int, seed: int, multiple: float, scenario: str = "24h",
                   gates: Gates | None = None) -> Rates:
    """Verdict counts of case `check` (a check name for its steady case, or `check/case`) over
    `trials` synthetic runs (fixed seed)."""
    gates = gates or Gates()
    rng = np.random.default_rng(seed)
    trial = cases()[check].trial
    findings = [trial(rng, SCENARIOS[scenario], multiple, gates) for _ in range(trials)]
    suspects = [f for f in findings if f.verdict == SUSPECT and f.check in _required(f, gates)]
    passed = sum(overall_with(f, gates) == PASS for f in suspects)
    return Rates(check, scenario, multiple, trials, dict(Counter(f.verdict for f in findings)),
                 len(suspects), passed)


def _required(finding: Finding, gates: Gates) -> list[str]:
    return required_checks([finding], gates, gpu_seen=True, probes_ran=True)


def overall_with(finding: Finding, gates: Gates) -> str:
    """The run's verdict when `finding` sits among PASSes of every other required check."""
    others = [Finding(check=name, verdict=PASS, evidence="PASS") for name in _required(finding, gates)
              if name != finding.check]
    verdict, _ = overall_verdict([finding, *others], gates, gpu_seen=True, probes_ran=True)
    return verdict


def cases() -> dict[str, Case]:
    """Every power case by key."""
    return _all_cases()


def steady_checks() -> list[str]:
    """The checks with a steady case (the detectors the quick tests cover)."""
    return [key for key, case in cases().items() if case.name == "steady"]
