"""`soak start` without running anything: the config it resolves, --json, and --notify-env."""

from __future__ import annotations

import importlib
import json

from click.testing import CliRunner

from soak.cli import main
from soak.schedule import notify as notify_module

start_module = importlib.import_module("soak.cli.start")  # `soak.cli.start` the attribute is the command

SUMMARY = {"run_id": "R1", "verdict": "FAIL", "verdict_reason": "leak", "findings": [], "report_html": "/r.html"}


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


def test_notify_env_posts_the_summary_to_the_webhook_it_names(monkeypatch, tmp_path):
    posted = []
    monkeypatch.setattr(notify_module, "notify", lambda url, summary, **_: posted.append((url, summary)) or True)
    result, _ = run_start(monkeypatch, tmp_path, "--notify-env", "HOOK", env={"HOOK": "http://127.0.0.1:9/x"})
    assert posted == [("http://127.0.0.1:9/x", SUMMARY)]
    assert "notification delivered to the webhook in $HOOK" in result.stderr
    assert "127.0.0.1:9" not in result.output


def test_notify_env_unset_is_a_note_not_an_error(monkeypatch, tmp_path):
    monkeypatch.delenv("HOOK", raising=False)
    result, _ = run_start(monkeypatch, tmp_path, "--notify-env", "HOOK")
    assert result.exit_code == 1 and "$HOOK is not set" in result.stderr
