"""goodput.decay and goodput.floor on windows with known good shares; and what an SLO changes in the run's verdict."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from soak.analysis import analyse
from soak.analysis.findings import CHECK_ORDER, FAIL, INCONCLUSIVE, PASS, SKIPPED, SUSPECT, Finding
from soak.analysis.gates import Gates, gates_from_dict
from soak.analysis.goodput import check_decay, check_floor, clopper_pearson
from soak.analysis.inputs import RunData, WindowRequests
from soak.analysis.verdict import required_checks
from support.proof import SCENARIOS, bare_scenario_run, cases
from support.proof_goodput import SLO_MS, goodput_run

SLO_TEXT = "TTFT ≤ 500 ms, E2E ≤ 20 s"


def run_with_shares(shares: list[float] | np.ndarray, requests: int = 1000, noisy: bool = False) -> RunData:
    """A one-hour run (48 judged windows) whose judged windows hold `shares` of good requests: exactly, or drawn
    binomially (seeded) with `noisy`."""
    run = bare_scenario_run(SCENARIOS["1h"])
    judged = [w for w in run.windows if w.excluded is None]
    assert len(shares) == len(judged)
    by_index = dict(zip((w.index for w in judged), shares))
    rng = np.random.default_rng(7)

    def good(share: float) -> int:
        return int(rng.binomial(requests, share)) if noisy else round(requests * share)

    rows = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=requests, sends=requests,
                               slo_met=good(by_index.get(w.index, 1.0))) for w in run.windows)
    return replace(run, request_windows=rows, slo=SLO_MS)


def judged_count() -> int:
    return sum(w.excluded is None for w in bare_scenario_run(SCENARIOS["1h"]).windows)


def test_both_checks_are_skipped_without_an_slo_and_then_not_required():
    run = bare_scenario_run(SCENARIOS["1h"])
    rows = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=100, sends=100) for w in run.windows)
    run = replace(run, request_windows=rows)
    findings = [check_decay(run, Gates()), check_floor(run, Gates())]
    assert [f.verdict for f in findings] == [SKIPPED, SKIPPED]
    assert "--slo" in findings[0].evidence
    assert "goodput.decay" not in required_checks(findings, Gates(), gpu_seen=False, probes_ran=False)


def test_with_an_slo_both_checks_are_required():
    findings = [check_decay(run_with_shares([0.97] * judged_count()), Gates())]
    assert {"goodput.decay", "goodput.floor"} <= set(required_checks(findings, Gates(), gpu_seen=False,
                                                                     probes_ran=False))


def test_a_steady_share_earns_a_pass_that_says_what_it_rules_out():
    finding = check_decay(run_with_shares([0.97, 0.96, 0.98] * (judged_count() // 3)), Gates())
    assert finding.verdict == PASS
    assert finding.evidence.startswith(f"The share of requests meeting {SLO_TEXT}")
    assert "rules out falls of more than" in finding.evidence
    assert finding.ci[1] < finding.threshold == 5.0


def test_a_falling_share_fails_with_its_size():
    shares = np.linspace(0.98, 0.86, judged_count())  # 12 pp over the run
    finding = check_decay(run_with_shares(shares), Gates())
    assert finding.verdict == FAIL
    assert finding.value == pytest.approx(12.0, abs=0.5)
    assert "falls 11.98 pp over the run" in finding.evidence
    assert finding.trend.intercept == pytest.approx(0.98, abs=0.01) and finding.trend.slope_per_s < 0


def test_a_late_lasting_drop_fails_through_the_step_gate():
    count = judged_count()
    late = int(count * 0.8)
    shares = [0.98] * late + [0.90] * (count - late)  # 8 pp in the last fifth: a line reads much less
    finding = check_decay(run_with_shares(shares, noisy=True), Gates())
    assert finding.verdict == FAIL
    assert finding.details["step"]["found"] and "the share fell from 98" in finding.evidence
    assert "% to 90" in finding.evidence or "% to 89" in finding.evidence


def test_too_few_windows_is_inconclusive():
    run = run_with_shares([0.97] * judged_count())
    few = replace(run, request_windows=run.request_windows[:10])
    assert check_decay(few, Gates()).verdict == INCONCLUSIVE


def test_a_window_under_the_floor_beyond_doubt_fails():
    shares = [0.97] * judged_count()
    shares[20] = 0.70
    finding = check_floor(run_with_shares(shares), Gates())
    assert finding.verdict == FAIL
    assert finding.value == pytest.approx(70.0) and finding.threshold == 90.0
    assert finding.evidence.startswith("1 of 48 judged windows fell under 90 % of requests within")
    assert finding.details["worst_window"]["share"] == pytest.approx(0.70)


def test_every_window_surely_above_the_floor_passes():
    finding = check_floor(run_with_shares([0.97] * judged_count()), Gates())
    assert finding.verdict == PASS and finding.next_step is None
    assert finding.ci[0] >= 90.0


def test_a_window_just_under_the_floor_is_suspect_not_fail():
    shares = [0.97] * judged_count()
    shares[5] = 0.895
    finding = check_floor(run_with_shares(shares, requests=200), Gates())
    assert finding.verdict == SUSPECT and "none beyond doubt" in finding.evidence


def test_small_windows_near_the_floor_are_inconclusive():
    finding = check_floor(run_with_shares([0.93] * judged_count(), requests=100), Gates())
    assert finding.verdict == INCONCLUSIVE and "too few requests" in finding.evidence and finding.next_step


def test_the_floor_and_the_fall_come_from_the_gates_file():
    gates = gates_from_dict({"goodput": {"floor": 0.99, "decay_abs": 0.2}})
    shares = np.linspace(0.98, 0.86, judged_count())
    assert check_floor(run_with_shares(shares), gates).verdict == FAIL
    assert check_decay(run_with_shares(shares), gates).verdict != FAIL  # 12 pp is under a 20 pp threshold


def test_clopper_pearson_bounds():
    low, high = clopper_pearson(95, 100, 0.025)
    assert low == pytest.approx(0.8872, abs=1e-3) and high == pytest.approx(0.9836, abs=1e-3)
    assert clopper_pearson(0, 10, 0.05)[0] == 0.0 and clopper_pearson(10, 10, 0.05)[1] == 1.0


def test_the_checks_come_last_in_the_fixed_order():
    assert CHECK_ORDER[-2:] == ("goodput.decay", "goodput.floor")
    findings = analyse(goodput_run(np.random.default_rng(3), SCENARIOS["1h"]))
    assert [f.check for f in findings] == list(CHECK_ORDER)
    by_check: dict[str, Finding] = {f.check: f for f in findings}
    assert by_check["goodput.decay"].verdict == PASS and by_check["goodput.floor"].verdict in (PASS, INCONCLUSIVE)


def test_under_a_varying_load_goodput_is_judged_at_equal_load():
    trial = cases()["goodput.decay/diurnal-falling"].trial  # a daily cycle that starts on its way down
    healthy = trial(np.random.default_rng(5), SCENARIOS["24h"], 0.0, Gates())
    assert healthy.details["method"] == "trend at equal load" and healthy.verdict == PASS, healthy.evidence
    assert f"The share of requests meeting {SLO_TEXT} at equal offered rate" in healthy.evidence
    planted = trial(np.random.default_rng(5), SCENARIOS["24h"], 2.0, Gates())
    assert planted.verdict == FAIL and planted.details["method"] == "trend at equal load"


def test_a_load_that_only_climbs_cannot_be_told_from_decay():
    run = goodput_run(np.random.default_rng(2), SCENARIOS["1h"], load=np.linspace(1.0, 4.0, 49))
    finding = check_decay(run, Gates())
    assert finding.verdict == INCONCLUSIVE and "cannot be told from goodput following load" in finding.evidence
