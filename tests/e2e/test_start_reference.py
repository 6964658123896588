"""`soak start` end to end against the embedded reference server, as a real subprocess."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SUMMARY_KEYS = {"schema", "run_id", "status", "started_at", "ended_at", "duration_s", "target", "verdict",
                "findings", "totals", "latency_ms", "report_html"}
CHECKS = {"leak.rss", "leak.vram", "leak.kv", "leak.fds", "creep.ttft_p99", "creep.itl_p99", "creep.e2e_p99",
          "errors.rise", "errors.budget", "hang", "crashes", "throughput.decay", "client.saturation",
          "server.log_errors", "canary"}
VERDICT_EXIT = {"PASS": 0, "FAIL": 1, "SUSPECT": 3, "INCONCLUSIVE": 3, "INVALID": 3}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, soak_cli):
    out = tmp_path_factory.mktemp("runs")
    result = soak_cli("start", "--duration", "45s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s",
                      "--rate", "3", "--idle-probe-every", "20s", "--idle-probe-for", "2s", "--out", str(out),
                      "--json", timeout_s=240)
    return out, result


def test_exit_code_matches_the_printed_summary(finished_run):
    _, result = finished_run
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert result.returncode == VERDICT_EXIT[summary["verdict"]]
    assert "verdict:" in result.stderr


def test_summary_follows_the_schema(finished_run):
    out, result = finished_run
    summary = json.loads(result.stdout)
    assert SUMMARY_KEYS <= set(summary)
    assert summary["schema"] == "soak.run.summary/1"
    assert summary["status"] == "completed"
    assert summary["target"]["kind"] == "reference" and summary["target"]["model"] == "soak-reference"
    assert {f["check"] for f in summary["findings"]} >= CHECKS
    for finding in summary["findings"]:
        assert {"check", "verdict", "value", "unit", "ci", "threshold", "evidence"} <= set(finding)
        assert finding["evidence"]
    assert summary["totals"]["requests"] > 60
    assert summary["latency_ms"]["ttft"]["p50"] < summary["latency_ms"]["e2e"]["p99"]
    on_disk = json.loads((out / summary["run_id"] / "summary.json").read_text())
    assert on_disk["run_id"] == summary["run_id"]
    # A run this short cannot support trend verdicts: never PASS without evidence.
    creep = next(f for f in summary["findings"] if f["check"] == "creep.ttft_p99")
    assert creep["verdict"] in ("INCONCLUSIVE", "SKIPPED")
    assert next(f for f in summary["findings"] if f["check"] == "leak.vram")["verdict"] == "SKIPPED"
    # The managed server's own log was scanned and is clean; one canary (the default is every 10 min) decides nothing.
    assert next(f for f in summary["findings"] if f["check"] == "server.log_errors")["verdict"] == "PASS"
    assert next(f for f in summary["findings"] if f["check"] == "canary")["verdict"] == "INCONCLUSIVE"


def test_database_holds_samples_windows_and_events(finished_run):
    out, result = finished_run
    run_id = json.loads(result.stdout)["run_id"]
    db = sqlite3.connect(out / "soak.db")
    count = lambda sql: db.execute(sql, (run_id,)).fetchone()[0]  # noqa: E731 - a one-line helper for the asserts below
    assert count("select count(*) from process_samples where run_id=? and role='server'") >= 30
    assert count("select count(*) from process_samples where run_id=? and role='client'") >= 30
    assert count("select count(*) from server_samples where run_id=? and scrape_ok=1 and kv_usage is not null") >= 30
    assert count("select count(*) from latency_windows where run_id=? and scenario='*' and metric='e2e'") >= 6
    kinds = {row[0] for row in db.execute("select kind from events where run_id=?", (run_id,))}
    assert {"server_start", "no_gpu", "warmup_end", "probe_start", "probe_reading", "probe_end"} <= kinds
    status, config_json, environment_json = db.execute(
        "select status, config_json, environment_json from runs where id=?", (run_id,)).fetchone()
    assert status == "completed"
    assert json.loads(config_json)["duration_s"] == 45
    assert json.loads(environment_json)["python"]


def test_report_carries_the_charts_data(finished_run):
    out, result = finished_run
    run_id = json.loads(result.stdout)["run_id"]
    html = (out / run_id / "report.html").read_text()
    assert run_id in html
    assert "Plotly" in html  # the plotting library is embedded, not fetched
    assert not re.search(r"<script[^>]+src=\"https?://", html)
    assert "rss" in html.lower() and "kv" in html.lower()


def test_runs_and_report_commands_read_the_run_back(finished_run, soak_cli):
    out, result = finished_run
    run_id = json.loads(result.stdout)["run_id"]
    listed = soak_cli("runs", "--out", str(out), "--json")
    assert listed.returncode == 0, listed.stderr
    assert run_id in {r["id"] for r in json.loads(listed.stdout)}
    (out / run_id / "report.html").unlink()
    rebuilt = soak_cli("report", run_id, "--out", str(out), "--junit", str(out / "junit.xml"))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (out / run_id / "report.html").exists()
    assert (out / "junit.xml").read_text().count("<testcase") >= len(CHECKS)
    status = soak_cli("status", run_id, "--out", str(out), "--json")
    assert json.loads(status.stdout)["status"] == "completed"


def test_compare_and_baseline_report(finished_run, soak_cli):
    out, result = finished_run
    run_id = json.loads(result.stdout)["run_id"]
    compared = soak_cli("compare", run_id, run_id, "--out", str(out), "--json")
    assert compared.returncode == 0, compared.stderr
    rows = json.loads(compared.stdout)["rows"]
    assert rows and all(row["status"] == "within noise" for row in rows)
    own_summary = (out / run_id / "summary.json").read_bytes()
    rebuilt = soak_cli("report", run_id, "--baseline", run_id, "--out", str(out), "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    checks = {f["check"]: f for f in json.loads(rebuilt.stdout)["findings"]}
    assert checks["baseline.regression"]["verdict"] == "PASS"
    # The comparison goes beside the run's record, never over it.
    assert "Baseline" in (out / run_id / f"vs-{run_id}" / "report.html").read_text()
    assert (out / run_id / "summary.json").read_bytes() == own_summary
    elsewhere = out / "for-review"
    again = soak_cli("report", run_id, "--baseline", run_id, "--out", str(out), "--report-dir", str(elsewhere))
    assert again.returncode == 0, again.stderr
    assert (elsewhere / "report.html").exists() and (elsewhere / "summary.json").exists()
    assert (out / run_id / "summary.json").read_bytes() == own_summary
