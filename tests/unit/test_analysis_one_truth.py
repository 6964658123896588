"""One truth per finding, over every check of synthetic runs with each planted fault: the thresholds a sentence
states agree with the finding's `threshold`, a stated value comparison agrees with its `value`, and a CI is
the CI of the value it sits beside."""

from __future__ import annotations

import pytest

from soak.analysis import analyse
from soak.analysis.gates import Gates
from support.consistency import threshold_disagreements
from support.synthetic import MIB, RunModel, synthetic_run, with_changes

BASE = RunModel(run_s=6 * 3600.0, rate_per_s=4.0, probe_every_s=1200.0)
FAULTS = {
    "healthy": {}, "rss leak": {"leak_bytes_per_h": 200 * MIB}, "small leak": {"leak_bytes_per_h": 12 * MIB},
    "vram leak": {"vram_leak_bytes_per_h": 400 * MIB}, "creep": {"creep_frac": 0.6},
    "error rise": {"error_rise_abs": 0.03}, "kv residue": {"kv_residue": 0.05}, "hang": {"hang_at_s": 3 * 3600.0},
    "crash": {"crash_at_s": 4 * 3600.0}, "slow client": {"lag_p99_ms": 40.0},
}


@pytest.fixture(scope="module")
def findings() -> dict[str, list[dict]]:
    return {name: [f.to_dict() for f in analyse(synthetic_run(2, with_changes(BASE, **fault)), Gates())]
            for name, fault in FAULTS.items()}


def test_stated_thresholds_agree_with_the_threshold_field(findings):
    compared, wrong = 0, []
    for name, run in findings.items():
        for finding in run:
            count, bad = threshold_disagreements(finding)
            compared += count
            wrong += [f"{name}: {line}" for line in bad]
    assert not wrong, "\n".join(wrong)
    assert compared >= 3 * len(FAULTS), compared  # the sentences do state thresholds: the check compared them


def test_a_ci_brackets_the_value_it_is_shown_with(findings):
    for name, run in findings.items():
        for finding in run:
            ci, value = finding["ci"], finding["value"]
            if ci is None or value is None or None in ci:
                continue
            low, high = ci
            slack = 1e-6 * max(abs(low), abs(high), 1.0)
            assert low - slack <= value <= high + slack or finding["check"] == "errors.budget", (name, finding)


def test_a_count_is_judged_against_a_count(findings):
    """A value counted in windows, crashes, lines or canaries has a threshold in the same unit, a whole number
    (a p-value shown as "3e-06 windows" would be a second truth)."""
    seen = 0
    for name, run in findings.items():
        for finding in run:
            if finding["unit"] in ("windows", "crashes", "lines", "canaries", "mismatches") and finding["threshold"] is not None:
                seen += 1
                assert float(finding["threshold"]).is_integer() and finding["threshold"] >= 0, (name, finding)
    assert seen >= len(FAULTS)
