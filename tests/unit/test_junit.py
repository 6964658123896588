"""JUnit XML from a typed summary: FAIL/INVALID fail, SKIPPED/INCONCLUSIVE skip, the rest pass."""

import json
from pathlib import Path

from soak.contracts import Summary, Verdict
from soak.run.junit import junit_tree

REFERENCE = Path(__file__).parent / "data" / "reference_run_summary.json"


def test_one_case_per_finding_marked_by_verdict():
    summary = Summary.model_validate(json.loads(REFERENCE.read_text(encoding="utf-8")))
    summary.findings[0].verdict = Verdict.FAIL
    suite = junit_tree(summary).getroot()
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert len(cases) == len(summary.findings) == int(suite.get("tests"))
    assert suite.get("failures") == "1" and cases["leak.rss"].find("failure").get("message").startswith("FAIL: ")
    assert cases["leak.vram"].find("skipped") is not None and cases["hang"].find("system-out").text.startswith("PASS: ")
