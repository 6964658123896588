import json
from pathlib import Path

from soak.contracts import Summary, SummaryFinding, Verdict
from soak.run.finalise import apply_baseline_verdict

REFERENCE = Path(__file__).parent / "data" / "reference_run_summary.json"


def _summary(verdict, regression_verdict):
    summary = Summary.model_validate(json.loads(REFERENCE.read_text(encoding="utf-8")))
    summary.verdict, summary.verdict_reason = verdict, "r"
    summary.findings.append(SummaryFinding(check="baseline.regression", verdict=regression_verdict, value=None,
                                           unit="", ci=None, threshold=None, evidence="P99 TTFT +40 % vs base"))
    return summary


def test_a_gated_regression_fails_a_passing_run():
    summary = _summary(Verdict.PASS, Verdict.FAIL)
    apply_baseline_verdict(summary)
    assert summary.verdict == Verdict.FAIL and "P99 TTFT" in summary.verdict_reason
    assert summary.to_json_dict()["verdict"] == "FAIL"


def test_a_suspect_regression_or_an_invalid_run_is_left_alone():
    suspect = _summary(Verdict.PASS, Verdict.SUSPECT)
    apply_baseline_verdict(suspect)
    assert suspect.verdict == Verdict.PASS
    invalid = _summary(Verdict.INVALID, Verdict.FAIL)
    apply_baseline_verdict(invalid)
    assert invalid.verdict == Verdict.INVALID
