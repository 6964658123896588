"""errors.rise, errors.budget (Wilson bound) and errors.bursts."""

import numpy as np
import pytest

from soak.analysis.error_checks import check_budget, check_bursts, check_rise, wilson_interval
from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event, WindowRequests
from support.synthetic import bare_run

RUN_S = 24 * 3600.0


def run_with(errors_of, requests=3000, run_s=RUN_S, events=()):
    plan = bare_run(run_s)
    rows = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=requests,
                               errors={"http_5xx": errors_of(w), "timeout": 0}, sends=requests)
                 for w in plan.windows)
    return bare_run(run_s, request_windows=rows, events=tuple(events))


def binomial(seed, rate_of):
    rng = np.random.default_rng(seed)
    return lambda w: int(rng.binomial(3000, rate_of(w)))


def test_wilson_interval_known_values():
    low, high = wilson_interval(0, 100, 0.95)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(0.0370, abs=1e-4)
    low, high = wilson_interval(10, 100, 0.95)
    assert low == pytest.approx(0.0552, abs=1e-4) and high == pytest.approx(0.1744, abs=1e-4)


def test_budget_pass_fail_inconclusive_skipped():
    assert check_budget(run_with(lambda w: 3), Gates()).verdict == PASS
    over = check_budget(run_with(lambda w: 60), Gates())
    assert over.verdict == FAIL and over.unit == "%" and over.value == pytest.approx(2.0)
    assert "http_5xx" in over.evidence and over.details["by_class"] == {"http_5xx": 60 * 48}
    few = check_budget(run_with(lambda w: 0, requests=5), Gates())
    assert few.verdict == INCONCLUSIVE and "too few requests" in few.evidence
    assert check_budget(bare_run(RUN_S), Gates()).verdict == SKIPPED


def test_budget_ignores_warmup_errors():
    finding = check_budget(run_with(lambda w: 3000 if w.excluded == "warmup" else 0), Gates())
    assert finding.verdict == PASS and finding.value == 0.0


def test_rise_detects_a_climbing_error_rate():
    finding = check_rise(run_with(binomial(0, lambda w: 0.002 + 0.02 * w.mid_s / RUN_S)), Gates())
    assert finding.verdict == FAIL and finding.unit == "pp over run"
    assert finding.value == pytest.approx(2.0 * 0.95, abs=0.4)


def test_rise_flat_passes_and_short_is_inconclusive():
    assert check_rise(run_with(binomial(1, lambda w: 0.002)), Gates()).verdict == PASS
    short = bare_run(RUN_S, window_s=RUN_S / 10)
    rows = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=100) for w in short.windows)
    finding = check_rise(bare_run(RUN_S, window_s=RUN_S / 10, request_windows=rows), Gates())
    assert finding.verdict == INCONCLUSIVE
    assert check_rise(bare_run(RUN_S), Gates()).verdict == SKIPPED


def test_burst_window_is_suspect_or_fail_when_gated():
    burst = binomial(2, lambda w: 0.1 if w.index == 20 else 0.002)
    finding = check_bursts(run_with(burst), Gates())
    assert finding.verdict == SUSPECT and finding.value == 1
    assert finding.details["bursts"][0]["index"] == 20
    gated = Gates.model_validate({"errors": {"fail_on_bursts": True}})
    assert check_bursts(run_with(binomial(2, lambda w: 0.1 if w.index == 20 else 0.002)), gated).verdict == FAIL


def test_no_burst_in_steady_errors_and_one_error_is_no_burst():
    assert check_bursts(run_with(binomial(3, lambda w: 0.002)), Gates()).verdict == PASS
    assert check_bursts(run_with(lambda w: 1 if w.index == 5 else 0), Gates()).verdict == PASS


def test_bursts_come_from_the_windows_alone():
    # Nothing records burst events; one such event in a calm run must not make it SUSPECT.
    finding = check_bursts(run_with(lambda w: 0, events=[Event(5000.0, "error_burst", "12 errors in 2 s")]), Gates())
    assert finding.verdict == PASS


def test_bursts_without_data_skip():
    assert check_bursts(bare_run(RUN_S), Gates()).verdict == SKIPPED


# --- late onset ----------------------------------------------------------------------------------

def late_ramp(seed, start_h=18.0, end_rate=0.03, base=0.001):
    """0.1 % errors until `start_h`, then rising linearly to `end_rate` at the end of the run."""
    start_s = start_h * 3600
    return binomial(seed, lambda w: base + (end_rate - base) * max(w.mid_s - start_s, 0.0) / (RUN_S - start_s))


def test_late_error_ramp_fails_with_its_real_size():
    finding = check_rise(run_with(late_ramp(20)), Gates())
    assert finding.verdict == FAIL
    step = finding.details["step"]
    assert step["found"] and step["t_s"] > 17 * 3600
    assert step["before"] == pytest.approx(0.001, abs=0.0005) and step["after"] > 0.012
    assert finding.value > 1.2  # pp: the Theil–Sen line alone reads ~+0.6 pp
    assert "the error rate rose from 0.10 % to" in finding.evidence and "and stayed" in finding.evidence


def test_rise_sets_a_detection_limit():
    finding = check_rise(run_with(binomial(21, lambda w: 0.002)), Gates())
    assert finding.verdict == PASS and finding.detection_limit is not None and finding.detection_limit < 0.5
    assert "this run rules out rises above" in finding.evidence


def test_budget_judges_the_segment_after_a_late_rise():
    # 0.1 % for 18 h, then 2.5 %: the whole run averages ~0.7 %, within the 1 % budget.
    finding = check_budget(run_with(binomial(22, lambda w: 0.025 if w.mid_s > 18 * 3600 else 0.001)), Gates())
    assert finding.value < 1.0
    assert finding.verdict == FAIL
    late = finding.details["late_segment"]
    assert late["basis"] == "after the step" and late["wilson_low"] > 0.01 and finding.details["step"]["found"]
    assert "after the rise" in finding.evidence and "exceeds the 1.00 % budget" in finding.evidence


def test_budget_last_quarter_ignores_one_burst_window():
    finding = check_budget(run_with(binomial(23, lambda w: 0.3 if w.index == 46 else 0.001)), Gates())
    assert finding.verdict == PASS and finding.details["late_segment"]["basis"] == "last quarter"


def test_bursts_are_still_seen_during_a_late_rise():
    ramp = late_ramp(24, end_rate=0.03, base=0.002)
    burst = binomial(25, lambda w: 0.05)
    finding = check_bursts(run_with(lambda w: burst(w) if w.index == 12 else ramp(w)), Gates())
    assert finding.verdict == SUSPECT and [b["index"] for b in finding.details["bursts"]] == [12]
    assert finding.details["step"]["found"]
    calm = check_bursts(run_with(late_ramp(26, base=0.002)), Gates())
    assert calm.verdict == PASS, calm.evidence
