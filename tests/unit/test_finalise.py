from soak.run.finalise import apply_baseline_verdict


def _summary(verdict, regression_verdict):
    return {"verdict": verdict, "verdict_reason": "r", "findings": [
        {"check": "leak.rss", "verdict": "PASS", "evidence": "flat"},
        {"check": "baseline.regression", "verdict": regression_verdict, "evidence": "P99 TTFT +40 % vs base"}]}


def test_a_gated_regression_fails_a_passing_run():
    summary = _summary("PASS", "FAIL")
    apply_baseline_verdict(summary)
    assert summary["verdict"] == "FAIL" and "P99 TTFT" in summary["verdict_reason"]


def test_a_suspect_regression_or_an_invalid_run_is_left_alone():
    suspect = _summary("PASS", "SUSPECT")
    apply_baseline_verdict(suspect)
    assert suspect["verdict"] == "PASS"
    invalid = _summary("INVALID", "FAIL")
    apply_baseline_verdict(invalid)
    assert invalid["verdict"] == "INVALID"
