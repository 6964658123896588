"""Print false-positive rate and power of each trend detector on synthetic series.

    python bench/detector_power.py [--trials 400] [--scenarios 24h,1h,5m] [--seed 1]

FPR = share of healthy series judged FAIL (for errors.bursts, which is SUSPECT unless gated:
judged anything but PASS). Power = the same share with a fault of 1× and 2× the practical
threshold planted. See tests/support/proof.py for the generators.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from soak.analysis.findings import PASS, SUSPECT

# The detectors' proof is test support (tests/support/), not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.proof import SCENARIOS, TRIALS, Rates, detector_rates


def flagged(rates: Rates) -> float:
    if rates.check == "errors.bursts":
        return 1.0 - rates.rate(PASS)
    return rates.fail_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--scenarios", default="24h,24h-noisy,1h,5m")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{'detector':18} {'scenario':10} {'FPR':>7} {'SUSPECT@0':>9} {'power@1x':>9} {'power@2x':>9} {'secs':>6}")
    for scenario in args.scenarios.split(","):
        assert scenario in SCENARIOS, f"unknown scenario {scenario}; known: {', '.join(SCENARIOS)}"
        for check in TRIALS:
            started = time.perf_counter()
            healthy = detector_rates(check, args.trials, args.seed, 0.0, scenario)
            at_1x = detector_rates(check, args.trials // 2, args.seed + 1, 1.0, scenario)
            at_2x = detector_rates(check, args.trials // 2, args.seed + 2, 2.0, scenario)
            suspect = healthy.rate(SUSPECT) if check != "errors.bursts" else float("nan")
            print(f"{check:18} {scenario:10} {flagged(healthy):7.2%} {suspect:9.1%} "
                  f"{flagged(at_1x):9.1%} {flagged(at_2x):9.1%} {time.perf_counter() - started:6.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
