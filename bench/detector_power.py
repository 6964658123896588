"""Print false-positive rate and power of each detector on synthetic runs with known truth.

    python bench/detector_power.py [--trials 400] [--scenarios 24h,1h,5m] [--cases steady,diurnal] [--checks goodput]
                                   [--seed 1]
    python bench/detector_power.py --early-stop [--trials 400]

Each row is one case (a detector on one shape of run: `steady`, or a planted load change, late
onset, step…) on one scenario (run length and load). FPR = share of healthy runs judged FAIL (for
errors.bursts, which is SUSPECT unless gated: judged anything but PASS). PASS@0 = share of healthy
runs that earned a PASS (the rest are INCONCLUSIVE or SUSPECT: the run could not rule a fault out).
Power = the FAIL share with a fault of 1× and 2× the practical threshold planted; brackets where the
case claims none. Beside FPR and power@2x: their 95 % Wilson interval over the trials. Goals: FPR ≤ 1 %
everywhere, power@2x ≥ 90 % where the case claims power. The last line counts, over every trial of
every row, the SUSPECT findings of a required check and how many of them a run whose other required
checks all PASSed would still have called PASS (goal: 0). See tests/support/proof.py.

With --early-stop it prints the early-stop rule's table instead (tests/support/proof_early_stop.py):
false stops = share of healthy runs it would have ended early (goal ≤ 1 %, as the FPR); stop@1x and
stop@2x = share of runs with a planted fault it ended early, and when = the median stop time as a
share of the planned duration. Baseline: the planned duration itself (100 %).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from soak.analysis.error_checks import wilson_interval
from soak.analysis.findings import PASS, SUSPECT

# The detectors' proof is test support (tests/support/), not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.proof import SCENARIOS, Case, Rates, cases, detector_rates
from support.proof_early_stop import STOP_CASES, stop_rates


def flagged(rates: Rates) -> float:
    if rates.check.startswith("errors.bursts"):
        return 1.0 - rates.rate(PASS)
    return rates.fail_rate


def selected(names: str | None, checks: str | None = None) -> list[Case]:
    chosen = list(cases().values())
    if checks:  # a check's name or the family it starts with: `goodput`, `leak.rss`
        families = tuple(checks.split(","))
        chosen = [case for case in chosen if case.check.startswith(families)]
        assert chosen, f"no case of {checks}; known: {sorted({c.check for c in cases().values()})}"
    if names:
        wanted = set(names.split(","))
        unknown = wanted - {case.name for case in chosen}
        assert not unknown, f"unknown case {sorted(unknown)}; known: {sorted({c.name for c in chosen})}"
        chosen = [case for case in chosen if case.name in wanted]
    return chosen


def interval(rates: Rates) -> str:
    """The 95 % Wilson interval of the flagged share, in per cent."""
    low, high = wilson_interval(round(flagged(rates) * rates.trials), rates.trials, 0.95)
    return f"{100 * low:.1f}–{100 * high:.1f}"


def row(case: Case, scenario: str, trials: int, seed: int) -> tuple[str, list[Rates]]:
    started = time.perf_counter()
    healthy = detector_rates(case.key, trials, seed, 0.0, scenario)
    at_1x = detector_rates(case.key, trials // 2, seed + 1, 1.0, scenario)
    at_2x = detector_rates(case.key, trials // 2, seed + 2, 2.0, scenario)
    suspect = healthy.rate(SUSPECT)
    power = f"{flagged(at_2x):9.1%}" if case.power else f"{'(' + format(flagged(at_2x), '.1%') + ')':>9}"
    text = (f"{case.key:40} {scenario:9} {flagged(healthy):6.2%} {interval(healthy):>9} {healthy.rate(PASS):7.1%} "
            f"{suspect:9.1%} {flagged(at_1x):8.1%} {power} {interval(at_2x):>10} {time.perf_counter() - started:6.1f}")
    return text, [healthy, at_1x, at_2x]


def suspect_line(all_rates: list[Rates]) -> str:
    suspects = sum(r.required_suspects for r in all_rates)
    passed = sum(r.passed_over_suspect for r in all_rates)
    trials = sum(r.trials for r in all_rates)
    return (f"overall PASS while a required check SUSPECT: {passed} of {suspects} "
            f"(required-check SUSPECTs over {trials} trials)")


def early_stop_row(case: str, scenario: str, trials: int, seed: int) -> str:
    started = time.perf_counter()
    healthy = stop_rates(case, trials, seed, 0.0, scenario)
    at_1x = stop_rates(case, trials // 2, seed + 1, 1.0, scenario)
    at_2x = stop_rates(case, trials // 2, seed + 2, 2.0, scenario)
    return (f"{case:20} {scenario:10} {healthy.stop_rate:11.2%} {at_1x.stop_rate:8.1%} "
            f"{at_1x.median_stop_fraction:10.0%} {at_2x.stop_rate:8.1%} {at_2x.median_stop_fraction:10.0%} "
            f"{time.perf_counter() - started:6.1f}")


def early_stop_table(trials: int, seed: int, wanted: list[str] | None) -> None:
    print(f"{'early stop':20} {'scenario':10} {'false stops':>11} {'stop@1x':>8} {'when@1x':>10} {'stop@2x':>8} "
          f"{'when@2x':>10} {'secs':>6}")
    for case in STOP_CASES.values():
        for scenario in case.scenarios:
            if wanted is None or scenario in wanted:
                print(early_stop_row(case.name, scenario, trials, seed), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--scenarios", default=None, help="comma-separated; default: each case's own")
    parser.add_argument("--cases", default=None, help="comma-separated case names; default: all")
    parser.add_argument("--checks", default=None, help="comma-separated checks or families (goodput); default: all")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--early-stop", action="store_true", help="the early-stop rule's table instead")
    args = parser.parse_args()
    wanted = args.scenarios.split(",") if args.scenarios else None
    for name in wanted or ():
        assert name in SCENARIOS, f"unknown scenario {name}; known: {', '.join(SCENARIOS)}"
    if args.early_stop:
        early_stop_table(args.trials, args.seed, wanted)
        return
    print(f"{'case':40} {'scenario':9} {'FPR':>6} {'FPR CI %':>9} {'PASS@0':>7} {'SUSPECT@0':>9} {'power@1x':>8} "
          f"{'power@2x':>9} {'2x CI %':>10} {'secs':>6}")
    all_rates: list[Rates] = []
    for case in selected(args.cases, args.checks):
        for scenario in case.scenarios:
            if wanted is None or scenario in wanted:
                text, rates = row(case, scenario, args.trials, args.seed)
                all_rates += rates
                print(text, flush=True)
    print(suspect_line(all_rates))


if __name__ == "__main__":
    main()
