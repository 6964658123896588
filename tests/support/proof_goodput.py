"""Power cases of the goodput checks (goodput.decay, goodput.floor): see proof.py.

A window's good share = expit(logit(base) + AR(1) drift) less a planted fall, with an occasional healthy dip (a
slow window), and its good requests drawn binomially from its Poisson arrivals. The base share is drawn per run
from 95–99.5 %, so a healthy run sits above the default 90 % floor but not always far above it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.special import expit, logit

from soak.analysis import goodput
from soak.analysis.findings import Finding
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData, WindowRequests

from .proof import Case, Scenario, Trial, bare_scenario_run
from .proof_traffic import diurnal_shape, wave_shape
from .synthetic import ar1

SLO_MS = {"ttft": 500.0, "e2e": 20000.0}


@dataclass(frozen=True)
class Wander:
    """How a healthy server's good share moves: AR(1) drift in logit units, and slow windows now and then."""

    drift_sd: float = 0.15
    drift_phi: float = 0.5
    dip_chance: float = 0.02
    dip_max: float = 0.02  # a slow window costs up to this much of its share


CALM, NOISY = Wander(), Wander(drift_sd=0.4, drift_phi=0.7, dip_chance=0.05, dip_max=0.04)


def healthy_shares(rng: np.random.Generator, count: int, wander: Wander = CALM,
                   load_logit: np.ndarray | float = 0.0) -> np.ndarray:
    """Each window's true good share on a healthy server; `load_logit` moves it (logit units) with the load."""
    base = rng.uniform(0.95, 0.995)
    shares = expit(logit(base) + ar1(rng, count, wander.drift_phi, wander.drift_sd) + load_logit)
    dips = rng.random(count) < wander.dip_chance
    return shares - dips * rng.uniform(0.0, wander.dip_max, count)


def positions(run: RunData) -> np.ndarray:
    """Each window's place in the judged span: 0 at the end of the warm-up, 1 at the end of the run."""
    end_s = run.windows[-1].end_s
    return np.array([max(w.mid_s - run.warmup_s, 0.0) / max(end_s - run.warmup_s, 1.0) for w in run.windows])


def goodput_run(rng: np.random.Generator, scenario: Scenario, fall: np.ndarray | None = None,
                wander: Wander = CALM, load: np.ndarray | None = None, elasticity: float = 0.0) -> RunData:
    """A run whose windows count good requests, with `fall` (per window, share units) taken off the healthy share.
    `load` (per window, relative to the scenario's rate) moves the arrivals, and with `elasticity` k the missed share
    follows it: logit(share) falls by k·log(load)."""
    run = bare_scenario_run(scenario)
    load = np.ones(len(run.windows)) if load is None else load
    shares = healthy_shares(rng, len(run.windows), wander, -elasticity * np.log(load))
    shares = shares - (0.0 if fall is None else fall)
    rows = []
    for window, share, relative in zip(run.windows, np.clip(shares, 0.0, 1.0), load):
        requests = int(rng.poisson(scenario.rate_per_s * relative * (window.end_s - window.start_s)))
        good = int(rng.binomial(requests, share))
        rows.append(WindowRequests(window.index, window.start_s, window.end_s, requests=requests, sends=requests,
                                  slo_met=good))
    return replace(run, request_windows=tuple(rows), slo=SLO_MS)


def trial_decay(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates,
                wander: Wander = CALM) -> Finding:
    """The share falls linearly by `multiple` × decay_abs over the judged span."""
    run = bare_scenario_run(scenario)
    fall = multiple * gates.goodput.decay_abs * positions(run)
    return goodput.check_decay(goodput_run(rng, scenario, fall, wander), gates)


def trial_decay_noisy(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """As `trial_decay` on a server whose share wanders ~3× as far and dips more often (±1–3 pp at 95 %)."""
    return trial_decay(rng, scenario, multiple, gates, NOISY)


def trial_decay_under_load(shape) -> Trial:
    """A healthy server whose missed share follows a varying offered rate (elasticity 0.5–1.5 in logit units: a ×3
    load costs a share at 97 % about 2–7 pp); a fall of `multiple` × decay_abs at equal load planted over the
    judged span."""
    def trial(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
        run = bare_scenario_run(scenario)
        load = shape(rng, np.array([w.mid_s / scenario.run_s for w in run.windows]))
        fall = multiple * gates.goodput.decay_abs * positions(run)
        return goodput.check_decay(goodput_run(rng, scenario, fall, load=load, elasticity=rng.uniform(0.5, 1.5)),
                                   gates)
    return trial


def trial_decay_step(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """The share drops by `multiple` × decay_abs at 14/24 of the run (hour 14 of a day) and stays down."""
    run = bare_scenario_run(scenario)
    fall = multiple * gates.goodput.decay_abs * np.array([w.mid_s >= scenario.run_s * 14 / 24 for w in run.windows])
    return goodput.check_decay(goodput_run(rng, scenario, fall), gates)


def trial_floor(rng: np.random.Generator, scenario: Scenario, multiple: float, gates: Gates) -> Finding:
    """One judged window misses the SLO for `multiple` × (1 − floor) of its requests: at 1× it sits on the floor,
    at 2× (20 % missed under the default 90 % floor) it is under it."""
    run = goodput_run(rng, scenario)
    if multiple > 0:
        judged = [i for i, w in enumerate(run.windows) if w.excluded is None]
        i = int(rng.choice(judged))
        row = run.request_windows[i]
        share = max(1.0 - multiple * (1.0 - gates.goodput.floor), 0.0)
        rows = list(run.request_windows)
        rows[i] = replace(row, slo_met=int(rng.binomial(row.requests, share)))
        run = replace(run, request_windows=tuple(rows))
    return goodput.check_floor(run, gates)


SPANS = ("24h", "2h", "1h", "30m", "5m")
SHORT = ("24h", "1h", "5m")
CASES = [Case("goodput.decay", "steady", trial_decay, SPANS),
         Case("goodput.decay", "noisy", trial_decay_noisy, SPANS),
         Case("goodput.decay", "step-14h", trial_decay_step, SPANS),
         # As for creep at equal load: over one daily cycle time and load share much of their variance, which
         # widens the estimate; power is measured, not claimed.
         Case("goodput.decay", "diurnal-rising", trial_decay_under_load(diurnal_shape(0.0)), SHORT, power=False),
         Case("goodput.decay", "diurnal-falling", trial_decay_under_load(diurnal_shape(np.pi)), SHORT, power=False),
         Case("goodput.decay", "wave", trial_decay_under_load(wave_shape), SHORT),
         Case("goodput.floor", "steady", trial_floor, SPANS)]
