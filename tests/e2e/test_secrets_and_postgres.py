"""An API key never lands in the database, the logs or the report; a run works on PostgreSQL too."""

from __future__ import annotations

import json
import sqlite3

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SECRET = "sk-soak-test-7f3a9c1e5b2d4086"
SHORT_RUN = ["start", "--duration", "20s", "--warmup", "5s", "--sample-every", "1s", "--rate", "2",
             "--no-idle-probes"]


def test_api_key_is_never_written(tmp_path, soak_cli):
    result = soak_cli(*SHORT_RUN, "--api-key-env", "SOAK_TEST_API_KEY", "--out", str(tmp_path), "--json",
                      env={"SOAK_TEST_API_KEY": SECRET})
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    assert SECRET not in result.stdout + result.stderr
    dump = "\n".join(sqlite3.connect(tmp_path / "soak.db").iterdump())
    assert "SOAK_TEST_API_KEY" in dump  # the variable's name is kept, so a rerun knows where to look
    assert SECRET not in dump
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".log", ".html", ".json")]
    assert {p.name for p in files} >= {"soak.log", "server.log", "report.html", "summary.json"}
    for path in files:
        assert SECRET not in path.read_text(errors="replace"), path


def test_a_run_on_postgresql(tmp_path, soak_cli, postgres_url):
    result = soak_cli(*SHORT_RUN, "--db", postgres_url, "--out", str(tmp_path), "--json")
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["totals"]["requests"] > 10
    assert not (tmp_path / "soak.db").exists()
    listed = soak_cli("runs", "--db", postgres_url, "--out", str(tmp_path), "--json")
    assert [r["id"] for r in json.loads(listed.stdout)] == [summary["run_id"]]
    rebuilt = soak_cli("report", summary["run_id"], "--db", postgres_url, "--out", str(tmp_path))
    assert rebuilt.returncode == 0, rebuilt.stderr
