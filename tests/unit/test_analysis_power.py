"""The detectors on synthetic series with known truth (docs/gates.md, "How good are the detectors?"): false-positive rate ≤ 1 % on
healthy series, power ≥ 90 % at twice the practical threshold. Fixed seeds, so the counts are
deterministic. The unmarked tests are a quick version; the `slow` ones use ≥ 400 healthy series.
bench/detector_power.py prints the full table.
"""

import pytest

from soak.analysis.findings import FAIL, PASS
from support.proof import Rates, detector_rates, steady_checks

DETECTORS = steady_checks()


def flagged(rates: Rates) -> int:
    """Series the detector flags: FAIL — or, for errors.bursts (SUSPECT unless gated), not PASS."""
    if rates.check == "errors.bursts":
        return rates.trials - rates.verdicts.get(PASS, 0)
    return rates.verdicts.get(FAIL, 0)


# Bursts are cheap to simulate and their power sits nearest 90 %, so they get more trials.
QUICK_TRIALS = {check: (100, 30) for check in DETECTORS} | {"errors.bursts": (300, 200)}


@pytest.mark.parametrize("check", DETECTORS)
def test_false_positive_rate_quick(check):
    trials = QUICK_TRIALS[check][0]
    rates = detector_rates(check, trials=trials, seed=101, multiple=0.0)
    assert flagged(rates) <= trials // 100, rates.verdicts  # ≤ 1 %


@pytest.mark.parametrize("check", DETECTORS)
def test_power_at_twice_the_threshold_quick(check):
    trials = QUICK_TRIALS[check][1]
    rates = detector_rates(check, trials=trials, seed=202, multiple=2.0)
    assert flagged(rates) >= 0.9 * trials, rates.verdicts


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["24h", "24h-noisy", "1h", "5m"])
@pytest.mark.parametrize("check", DETECTORS)
def test_false_positive_rate(check, scenario):
    rates = detector_rates(check, trials=400, seed=303, multiple=0.0, scenario=scenario)
    assert flagged(rates) <= 4, rates.verdicts  # ≤ 1 %


# Error counts per window are small in short runs (0.2 % of ~300–700 requests), so bursts and a
# 1 pp rise are below what any test can see at p < 1e-6 / 0.01: not claimed there (see docs/gates.md).
POWER_CASES = [(c, s) for s in ("24h", "24h-noisy", "1h", "5m") for c in DETECTORS
               if not (s in ("1h", "5m") and c == "errors.bursts")]


@pytest.mark.slow
@pytest.mark.parametrize("check, scenario", POWER_CASES)
def test_power_at_twice_the_threshold(check, scenario):
    rates = detector_rates(check, trials=200, seed=404, multiple=2.0, scenario=scenario)
    assert flagged(rates) >= 180, rates.verdicts  # ≥ 90 %
