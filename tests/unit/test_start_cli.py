"""`soak start` without running anything: the config it resolves and --json (--notify-env: tests/e2e/test_notify_every_run.py)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from click.testing import CliRunner

from soak.cli import main
from soak.contracts import ErrorMessage, Summary, ValidationGap

start_module = importlib.import_module("soak.cli.start")  # `soak.cli.start` the attribute is the command

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "summaries" / "soak.run.summary-1.json"
SUMMARY = Summary.model_validate(json.loads(EXAMPLE.read_text()) | {
    "run_id": "R1", "verdict": "FAIL", "verdict_reason": "leak", "report_html": "/r.html"})


def run_start(monkeypatch, tmp_path, *args, env=None):
    seen = {}

    def fake_run(config):
        seen["config"] = config
        return SUMMARY

    monkeypatch.setattr(start_module, "_run", fake_run)
    result = CliRunner().invoke(main, ["start", "--duration", "1m", "--out", str(tmp_path), *args], env=env)
    return result, seen


def test_json_prints_the_summary_and_the_exit_code_follows_the_verdict(monkeypatch, tmp_path):
    result, seen = run_start(monkeypatch, tmp_path, "--json", "--drain-timeout", "7s")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["run_id"] == "R1"
    assert seen["config"].load.drain_timeout_s == 7.0


def test_the_verdict_the_unsettled_checks_and_the_outcomes_go_to_stderr(monkeypatch, tmp_path):
    summary = SUMMARY.model_copy(update={
        "error_messages": [ErrorMessage(count=9, error_class="http_4xx", status_code=400, message="HTTP 400: bad",
                                        scenarios=["chat"])],
        "validation_gaps": [ValidationGap(count=2, scenario="bad_input", expectation="a 4xx", status_code=None,
                                          max_output_tokens=None)]})
    monkeypatch.setattr(start_module, "_run", lambda config: summary)
    result = CliRunner().invoke(main, ["start", "--duration", "1m", "--out", str(tmp_path)])
    assert result.exit_code == 1 and result.stdout == ""
    unsettled = [f for f in summary.findings if f.verdict in ("FAIL", "SUSPECT", "INVALID", "INCONCLUSIVE")]
    assert result.stderr.splitlines() == [
        "verdict: FAIL — leak", *(f"  {f.check}: {f.verdict.value} — {f.evidence}" for f in unsettled),
        "  error: 9 × HTTP 400: bad", "  validation gap: 2 × bad_input expected a 4xx; got HTTP 200",
        "report: /r.html"]
