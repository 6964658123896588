"""`canary` from the canary's events: FAIL on a changed answer or timeouts in a row, SUSPECT, PASS, INCONCLUSIVE."""

from __future__ import annotations

from soak.analysis.canary import check_canary
from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event
from support.synthetic import bare_run

REFERENCE = Event(1.0, "canary", "reference", {"index": 0, "reference": True, "text": "the answer"})


def match(t_s: float) -> Event:
    return Event(t_s, "canary", "same", {"reference": False})


def timeout(t_s: float) -> Event:
    return Event(t_s, "canary_timeout", "no answer", {})


def judge(*events: Event):
    return check_canary(bare_run(3600.0, events=events), Gates())


def test_matches_pass():
    finding = judge(REFERENCE, match(600.0), match(1200.0))
    assert finding.verdict == PASS and finding.details["matches"] == 2
    assert finding.details["reference"]["text"] == "the answer"


def test_a_changed_answer_fails_with_where_it_differs():
    mismatch = Event(1800.0, "canary_mismatch", "differs", {"offset": 4, "expected": "answer", "got": "ANSWER"})
    finding = judge(REFERENCE, match(600.0), mismatch, match(2400.0))
    assert finding.verdict == FAIL and finding.value == 1
    assert "30m into the run" in finding.evidence and "character 4" in finding.evidence
    assert "'answer'" in finding.evidence and "'ANSWER'" in finding.evidence


def test_a_lone_timeout_is_suspect_two_in_a_row_fail():
    assert judge(REFERENCE, match(600.0), timeout(1200.0), match(1800.0), match(2400.0)).verdict == SUSPECT
    finding = judge(REFERENCE, match(600.0), timeout(1200.0), timeout(1800.0), match(2400.0))
    assert finding.verdict == FAIL and finding.details["timeouts_in_a_row"] == 2


def test_too_few_answers_are_inconclusive_and_errors_are_named():
    error = Event(600.0, "canary_error", "HTTP 400", {"error": "HTTP 400"})
    finding = judge(REFERENCE, error, match(1200.0))
    assert finding.verdict == INCONCLUSIVE and "HTTP 400" in finding.evidence and "--canary-every" in finding.evidence


def test_no_canary_is_skipped():
    assert judge().verdict == SKIPPED
