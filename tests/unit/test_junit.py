"""JUnit XML from a typed summary: the run's verdict as a testcase (FAIL/INVALID/SUSPECT fail, INCONCLUSIVE
skips), then one per check (FAIL/INVALID fail, SKIPPED/INCONCLUSIVE skip, the rest pass)."""

import json
from pathlib import Path

import pytest

from soak.contracts import Summary, Verdict
from soak.run.junit import junit_tree

REFERENCE = Path(__file__).parent / "data" / "reference_run_summary.json"


def reference() -> Summary:
    return Summary.model_validate(json.loads(REFERENCE.read_text(encoding="utf-8")))


def test_one_case_for_the_run_and_one_per_finding_marked_by_verdict():
    summary = reference()
    summary.findings[0].verdict = Verdict.FAIL
    summary.verdict, summary.verdict_reason = Verdict.FAIL, "leak.rss FAIL: rises"
    suite = junit_tree(summary).getroot()
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert len(cases) == len(summary.findings) + 1 == int(suite.get("tests"))
    assert next(suite.iter("testcase")).get("name") == "verdict"
    assert cases["verdict"].find("failure").get("message") == "FAIL: leak.rss FAIL: rises"
    assert suite.get("failures") == "2" and cases["leak.rss"].find("failure").get("message").startswith("FAIL: ")
    assert cases["leak.vram"].find("skipped") is not None and cases["hang"].find("system-out").text.startswith("PASS: ")


@pytest.mark.parametrize("verdict, element", [(Verdict.SUSPECT, "failure"), (Verdict.INVALID, "failure"),
                                              (Verdict.INCONCLUSIVE, "skipped"), (Verdict.PASS, "system-out")])
def test_the_run_case_follows_the_run_verdict(verdict, element):
    summary = reference()
    summary.verdict, summary.verdict_reason = verdict, "why"
    run_case = next(junit_tree(summary).getroot().iter("testcase"))
    found = run_case.find(element)
    assert found is not None and (found.get("message") or found.text) == f"{verdict}: why"
