"""How a fired run ended: the outcome the daemon records and the payload it notifies."""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime

import pytest

from soak.schedule.outcome import describe_exit, outcome_of_run, outcome_without_run
from support.records import stored_run


def run_row(tmp_path, **overrides):
    row = {"id": "20260101T000000Z-abcd", "out_dir": str(tmp_path / "run"), "status": "completed",
           "verdict": "PASS", "verdict_reason": "all checks passed", "started_at": datetime.now(UTC).isoformat(),
           "heartbeat_at": datetime.now(UTC).isoformat()}
    return stored_run(**row | overrides)


def test_describe_exit_names_codes_and_signals():
    assert describe_exit(2) == "code 2"
    assert describe_exit(-signal.SIGKILL) == "signal SIGKILL"
    assert describe_exit(-200) == "signal 200"


def test_a_start_that_recorded_no_run_reports_the_last_log_line(tmp_path):
    log_path = tmp_path / "fire.log"
    log_path.write_text("starting\nsoak: error: target unreachable\n\n")
    outcome = outcome_without_run(2, log_path)
    assert not outcome.has_verdict and outcome.run_id is None
    reason = "soak start exited with code 2 before recording a run: soak: error: target unreachable"
    assert outcome.event_message() == reason
    assert outcome.payload() == {"schema": "soak.run.summary/1", "run_id": None, "status": "crashed",
                                 "verdict": None, "verdict_reason": reason, "report_html": None,
                                 "log": str(log_path), "exit_code": 2}


def test_a_written_summary_is_the_payload_and_a_running_status_reads_aborted(tmp_path):
    run = run_row(tmp_path)
    summary = {"schema": "soak.run.summary/1", "run_id": run.id, "status": "running", "verdict": "FAIL",
               "verdict_reason": "leak", "totals": {"requests": 3}, "report_html": "r.html"}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text(json.dumps(summary))
    outcome = outcome_of_run(run, tmp_path, 1, tmp_path / "fire.log")
    assert outcome.payload() == summary | {"status": "aborted"}
    assert outcome.has_verdict
    assert outcome.event_message() == "soak start exited with code 1; status aborted, verdict FAIL: leak"


@pytest.mark.parametrize("stored", [True, False])
def test_without_a_summary_file_the_database_or_the_row_speaks(tmp_path, stored):
    summary = {"run_id": "from-db", "status": "completed", "verdict": "PASS"}
    run = run_row(tmp_path, summary_json=json.dumps(summary) if stored else None, verdict=None,
                  verdict_reason=None, status="failed")
    payload = outcome_of_run(run, tmp_path, -signal.SIGKILL, tmp_path / "fire.log").payload()
    if stored:
        assert payload == summary
    else:
        assert payload == {"schema": "soak.run.summary/1", "run_id": run.id, "status": "failed",
                           "started_at": run.started_at, "ended_at": None, "verdict": None,
                           "verdict_reason": "the run left no summary (it crashed or was killed)",
                           "report_html": None}
