"""`server.log_errors` from the scan's events: FAIL on fatal classes, SUSPECT on tracebacks/NaN, PASS, SKIPPED."""

from __future__ import annotations

import pytest

from soak.analysis.findings import FAIL, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event
from soak.analysis.server_log import check_log_errors
from support.synthetic import bare_run

START = Event(0.1, "server_log_scanned", "scanning", {"path": "/var/log/server.log", "phase": "start"})
END = Event(3599.0, "server_log_scanned", "done", {"path": "/var/log/server.log", "phase": "end", "lines": 1200,
                                                   "matched": {}, "suppressed": 0})


def line(t_s: float, log_class: str, text: str, exception: str | None = None) -> Event:
    return Event(t_s, "server_log_error", f"{log_class}: {text}",
                 {"class": log_class, "line": text, "exception": exception, "before": ["x"], "after": ["y"]})


def judge(*events: Event):
    return check_log_errors(bare_run(3600.0, events=events), Gates())


@pytest.mark.parametrize("log_class", ["oom", "engine_dead", "cuda_error", "fatal"])
def test_a_fatal_class_fails(log_class):
    finding = judge(START, line(10.0, "traceback", "Traceback (most recent call last):", "ValueError: x"),
                    line(1800.0, log_class, "the fatal line"), END)
    assert finding.verdict == FAIL and finding.value == 1
    assert "the fatal line" in finding.evidence and "30m" in finding.evidence
    assert finding.details["recorded_by_class"] == {"traceback": 1, log_class: 1}


@pytest.mark.parametrize("log_class", ["traceback", "nan"])
def test_tracebacks_and_nan_warnings_are_suspect(log_class):
    finding = judge(START, line(60.0, log_class, "Traceback (most recent call last):", "KeyError: 'k'"), END)
    assert finding.verdict == SUSPECT
    assert "KeyError: 'k'" in finding.evidence  # a traceback is named by its exception line


def test_a_clean_scanned_log_passes():
    finding = judge(START, END)
    assert finding.verdict == PASS and "1200 lines" in finding.evidence
    assert finding.details["path"] == "/var/log/server.log"


def test_a_killed_run_keeps_what_its_start_event_says():
    assert judge(START).verdict == PASS  # no end event: still scanned, and nothing matched


def test_no_log_is_skipped_and_says_how_to_get_one():
    finding = judge()
    assert finding.verdict == SKIPPED and "--server-log FILE" in finding.evidence


def test_lines_that_answered_soaks_own_probes_are_not_judged_but_counted():
    provoked = Event(0.2, "server_log_provoked", "traceback logged answering capability probe images",
                     {"class": "traceback", "line": "Traceback (most recent call last):",
                      "exception": "ValueError: not a multimodal model", "request_id": "soak-probe-images-1",
                      "answer_to": "capability probe images"})
    finding = judge(START, provoked, END)
    assert finding.verdict == PASS, finding.evidence
    assert "capability probe images" in finding.evidence and "not judged" in finding.evidence
    assert finding.details["provoked"] == [{"t_s": 0.2, "class": "traceback", "request_id": "soak-probe-images-1",
                                            "answer_to": "capability probe images",
                                            "exception": "ValueError: not a multimodal model"}]
    assert finding.details["provoked_lines"] == 1
    assert finding.details["provoked_answers"] == ["capability probe images"]
    assert judge(START, provoked, line(60.0, "traceback", "Traceback (most recent call last):", "KeyError: 'k'"),
                 END).verdict == SUSPECT  # a traceback of the server's own still counts
