"""`soak start` without running anything: the config it resolves and --json (--notify-env: tests/e2e/test_notify_every_run.py)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from click.testing import CliRunner

from soak.cli import main
from soak.contracts import Summary

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
