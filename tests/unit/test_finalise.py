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
    assert summary.verdict == Verdict.FAIL and summary.verdict_reason == "baseline.regression FAIL: P99 TTFT +40 % vs base"
    assert summary.to_json_dict()["verdict"] == "FAIL"


def test_the_verdict_is_formed_again_over_every_finding_with_the_regression():
    suspect = _summary(Verdict.PASS, Verdict.SUSPECT)
    before = suspect.model_copy(deep=True)
    apply_baseline_verdict(suspect)
    # the reference run is INCONCLUSIVE on its own findings; a SUSPECT regression outside `required` adds nothing
    assert suspect.verdict == Verdict.INCONCLUSIVE and suspect.findings == before.findings


def test_a_required_suspect_regression_holds_back_the_run(tmp_path):
    summary = _summary(Verdict.PASS, Verdict.SUSPECT)
    for finding in summary.findings:  # every check passed but the regression
        if finding.check != "baseline.regression":
            finding.verdict = Verdict.PASS
    gates = tmp_path / "gates.toml"
    gates.write_text('required = ["leak.rss", "baseline.regression"]\n', encoding="utf-8")
    apply_baseline_verdict(summary, gates)
    assert summary.verdict == Verdict.SUSPECT and summary.verdict_reason.startswith("baseline.regression SUSPECT")


def test_a_regression_measured_by_a_late_client_is_invalid():
    summary = _summary(Verdict.PASS, Verdict.FAIL)
    client = summary.finding("client.saturation")
    client.verdict, client.details = Verdict.INVALID, {**(client.details or {}), "late_by": "schedule-lag P99 728.0 ms > 100 ms"}
    apply_baseline_verdict(summary)
    regression = summary.finding("baseline.regression")
    assert regression.verdict == Verdict.INVALID and regression.details["measured"]["verdict"] == "FAIL"
    assert regression.evidence.startswith("Not judged: the client was late (schedule-lag P99 728.0 ms > 100 ms)")
    assert summary.verdict == Verdict.INVALID and summary.verdict_reason.startswith("client.saturation INVALID")


def test_without_a_baseline_nothing_changes():
    summary = Summary.model_validate(json.loads(REFERENCE.read_text(encoding="utf-8")))
    summary.verdict_reason = "as stored"
    apply_baseline_verdict(summary)
    assert summary.verdict_reason == "as stored"
