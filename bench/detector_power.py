"""Print false-positive rate and power of each detector on synthetic runs with known truth.

    python bench/detector_power.py [--trials 400] [--scenarios 24h,1h,5m] [--cases steady,diurnal] [--seed 1]

Each row is one case (a detector on one shape of run: `steady`, or a planted load change, late
onset, step…) on one scenario (run length and load). FPR = share of healthy runs judged FAIL (for
errors.bursts, which is SUSPECT unless gated: judged anything but PASS). PASS@0 = share of healthy
runs that earned a PASS (the rest are INCONCLUSIVE or SUSPECT: the run could not rule a fault out).
Power = the FAIL share with a fault of 1× and 2× the practical threshold planted. Goals: FPR ≤ 1 %
everywhere, power@2x ≥ 90 % where the case claims power. See tests/support/proof.py.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from soak.analysis.findings import PASS, SUSPECT

# The detectors' proof is test support (tests/support/), not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.proof import SCENARIOS, Case, Rates, cases, detector_rates


def flagged(rates: Rates) -> float:
    if rates.check.startswith("errors.bursts"):
        return 1.0 - rates.rate(PASS)
    return rates.fail_rate


def selected(names: str | None) -> list[Case]:
    chosen = list(cases().values())
    if names:
        wanted = set(names.split(","))
        unknown = wanted - {case.name for case in chosen}
        assert not unknown, f"unknown case {sorted(unknown)}; known: {sorted({c.name for c in chosen})}"
        chosen = [case for case in chosen if case.name in wanted]
    return chosen


def row(case: Case, scenario: str, trials: int, seed: int) -> str:
    started = time.perf_counter()
    healthy = detector_rates(case.key, trials, seed, 0.0, scenario)
    at_1x = detector_rates(case.key, trials // 2, seed + 1, 1.0, scenario)
    at_2x = detector_rates(case.key, trials // 2, seed + 2, 2.0, scenario)
    suspect = healthy.rate(SUSPECT)
    power = f"{flagged(at_2x):9.1%}" if case.power else f"{'(' + format(flagged(at_2x), '.1%') + ')':>9}"
    return (f"{case.key:34} {scenario:10} {flagged(healthy):7.2%} {healthy.rate(PASS):7.1%} {suspect:9.1%} "
            f"{flagged(at_1x):9.1%} {power} {time.perf_counter() - started:6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--scenarios", default=None, help="comma-separated; default: each case's own")
    parser.add_argument("--cases", default=None, help="comma-separated case names; default: all")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    wanted = args.scenarios.split(",") if args.scenarios else None
    for name in wanted or ():
        assert name in SCENARIOS, f"unknown scenario {name}; known: {', '.join(SCENARIOS)}"
    print(f"{'case':34} {'scenario':10} {'FPR':>7} {'PASS@0':>7} {'SUSPECT@0':>9} {'power@1x':>9} {'power@2x':>9} {'secs':>6}")
    for case in selected(args.cases):
        for scenario in case.scenarios:
            if wanted is None or scenario in wanted:
                print(row(case, scenario, args.trials, args.seed), flush=True)


if __name__ == "__main__":
    main()
