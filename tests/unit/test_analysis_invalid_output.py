"""errors.invalid_output: any answer that failed validation FAILs, with the first bad answer quoted."""

from __future__ import annotations

from soak.analysis.error_checks import check_invalid_output
from soak.analysis.findings import FAIL, PASS, SKIPPED
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event, WindowRequests
from support.synthetic import bare_run

RUN_S = 3600.0
BAD = "invalid JSON (Expecting value at char 41); answer: '{\"name\":\"\",\"age\":0,'"


def _windows(invalid_from_s: float | None, requests: int = 100) -> tuple[WindowRequests, ...]:
    plan = bare_run(RUN_S)
    return tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=requests, sends=requests,
                               errors={"invalid_output": 7 if invalid_from_s is not None and w.start_s >= invalid_from_s
                                       else 0}) for w in plan.windows)


def _run(scenario: str, invalid_from_s: float | None, events=()):
    rows = _windows(invalid_from_s)
    return bare_run(RUN_S, request_windows=rows, scenario_windows={scenario: rows}, events=tuple(events))


def test_a_clean_structured_run_passes():
    finding = check_invalid_output(_run("structured", None), Gates())
    assert finding.verdict == PASS and finding.value == 0 and "structured" in finding.evidence


def test_a_run_without_validating_scenarios_is_skipped():
    assert check_invalid_output(_run("chat_short", None), Gates()).verdict == SKIPPED


def test_answers_broken_after_hours_fail_quoting_the_first():
    event = Event(t_s=1805.0, kind="error_message", message=f"1 × {BAD}",
                  data={"error_class": "invalid_output", "message": BAD, "count": 1})
    other = Event(t_s=10.0, kind="error_message", message="1 × HTTP 500", data={"error_class": "http_5xx"})
    finding = check_invalid_output(_run("structured", 1800.0, events=(other, event)), Gates())
    assert finding.verdict == FAIL and finding.value == finding.details["invalid"] > 0
    assert finding.details["by_scenario"] == {"structured": finding.value}
    assert finding.details["first_answer"] == {"t_s": 1805.0, "message": BAD}
    assert BAD in finding.evidence and "from the window at 30m" in finding.evidence


def test_one_invalid_answer_in_a_users_scenario_fails_too():
    rows = _windows(None)
    rows = (*rows[:-1], WindowRequests(rows[-1].index, rows[-1].start_s, rows[-1].end_s, requests=100, sends=100,
                                      errors={"invalid_output": 1}))
    finding = check_invalid_output(bare_run(RUN_S, request_windows=rows, scenario_windows={"mine": rows}), Gates())
    assert finding.verdict == FAIL and finding.value == 1 and "mine 1" in finding.evidence
