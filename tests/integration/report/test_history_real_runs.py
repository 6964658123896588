"""Labels, `soak runs --label`, `soak history` (text, JSON, HTML in headless Chromium) and `soak export` on two
real `soak start` runs of the reference server, one labelled by flags and one by SOAK_LABEL.

Lives beside the report's browser test, whose Chromium helpers it shares.
"""

from __future__ import annotations

import csv
import json
import sqlite3

import pytest
from test_report_browser import LOAD_TIMEOUT_S, _browser_or_skip, _network_requests, _start_browser

# One xdist group: the runs are a module fixture, made once on one worker (`--dist loadgroup`).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(400), pytest.mark.xdist_group("history_real_runs")]

RUN = ("--duration", "12s", "--warmup", "4s", "--window", "4s", "--sample-every", "1s", "--rate", "3",
       "--no-idle-probes", "--json")


@pytest.fixture(scope="module")
def series(tmp_path_factory, soak_cli):
    """Two finished runs in one folder: release 1.4.1 (flags) then 1.4.2 (SOAK_LABEL)."""
    out = tmp_path_factory.mktemp("series")
    summaries = []
    for labels, env in ((["--label", "release=1.4.1", "--label", "model=tiny"], {}),
                        ([], {"SOAK_LABEL": "release=1.4.2,model=tiny"})):
        result = soak_cli("start", *RUN, *labels, "--out", str(out), env=env, timeout_s=180)
        assert result.returncode in (0, 1, 3), result.stderr[-3000:]
        summaries.append(json.loads(result.stdout))
    return out, summaries


def test_labels_reach_the_summary_the_database_and_the_report(series):
    out, summaries = series
    assert [s["labels"] for s in summaries] == [{"model": "tiny", "release": "1.4.1"},
                                                 {"model": "tiny", "release": "1.4.2"}]
    db = sqlite3.connect(out / "soak.db")
    stored = db.execute("select key, value from run_labels where run_id = ? order by key",
                        (summaries[1]["run_id"],)).fetchall()
    assert stored == [("model", "tiny"), ("release", "1.4.2")]
    on_disk = json.loads((out / summaries[0]["run_id"] / "summary.json").read_text())
    assert on_disk["labels"] == {"model": "tiny", "release": "1.4.1"}
    report = (out / summaries[0]["run_id"] / "report.html").read_text()
    assert "<dt>Labels</dt>" in report and "release=1.4.1" in report


def test_runs_filters_on_every_label_given(series, soak_cli):
    out, summaries = series
    listed = lambda *labels: [r["id"] for r in json.loads(  # noqa: E731 - a one-line helper
        soak_cli("runs", "--out", str(out), "--json", *labels).stdout)]
    assert listed("--label", "model=tiny") == [summaries[1]["run_id"], summaries[0]["run_id"]]
    assert listed("--label", "model=tiny", "--label", "release=1.4.1") == [summaries[0]["run_id"]]
    assert listed("--label", "release=2.0") == []
    bad = soak_cli("runs", "--out", str(out), "--label", "release")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "soak: error: invalid --label: label 'release' is not KEY=VALUE"]


def test_history_rows_are_oldest_first_with_the_deltas_of_compare(series, soak_cli):
    out, summaries = series
    first, second = (s["run_id"] for s in summaries)
    result = soak_cli("history", "--out", str(out), "--label", "model=tiny", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [row["run_id"] for row in rows] == [first, second] and rows[1]["previous"] == first
    compared = json.loads(soak_cli("compare", first, second, "--out", str(out), "--json").stdout)["rows"]
    for row in compared:
        if row["name"] in rows[1]["deltas"]:
            assert rows[1]["deltas"][row["name"]]["status"] == row["status"]
            assert rows[1]["deltas"][row["name"]]["delta_pct"] == pytest.approx(row["delta_pct"])
    assert "latency.ttft.p99" in rows[1]["deltas"]
    assert rows[1]["figures"]["latency.ttft.p99"] == summaries[1]["latency_ms"]["ttft"]["p99"]
    assert [change["key"] for change in rows[1]["environment_changes"]] == []  # same machine, same setup
    text = soak_cli("history", "--out", str(out), "--check", "hang")
    assert text.returncode == 0 and first in text.stdout and "hang" in text.stdout


def test_export_tables_load_back(series, soak_cli, tmp_path):
    out, summaries = series
    run_id = summaries[0]["run_id"]
    result = soak_cli("export", run_id, "--out", str(out), "--export-dir", str(tmp_path / "csv"))
    assert result.returncode == 0, result.stderr
    db = sqlite3.connect(out / "soak.db")
    for table in ("latency_windows", "request_windows", "process_samples", "server_samples", "events"):
        with open(tmp_path / "csv" / f"{table}.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert len(rows) == db.execute(f"select count(*) from {table} where run_id = ?", (run_id,)).fetchone()[0]
        assert rows and all(row["run_id"] == run_id for row in rows)
    with open(tmp_path / "csv" / "findings.csv", newline="") as handle:
        assert [row["check"] for row in csv.DictReader(handle)] == [f["check"] for f in summaries[0]["findings"]]
    parquet = pytest.importorskip("pyarrow.parquet")
    assert soak_cli("export", run_id, "--out", str(out), "--format", "parquet",
                    "--export-dir", str(tmp_path / "pq")).returncode == 0
    table = parquet.read_table(tmp_path / "pq" / "process_samples.parquet")
    assert table.num_rows == db.execute("select count(*) from process_samples where run_id = ?", (run_id,)).fetchone()[0]


def test_history_html_opens_offline_with_its_charts_and_no_console_errors(series, soak_cli, tmp_path):
    from selenium.webdriver.support.ui import WebDriverWait

    out, summaries = series
    page = tmp_path / "history.html"
    result = soak_cli("history", "--out", str(out), "--html", str(page))
    assert result.returncode == 0, result.stderr
    chromium, driver_path = _browser_or_skip()
    driver = _start_browser(chromium, driver_path)
    try:
        url = page.resolve().as_uri()
        driver.get(url)
        WebDriverWait(driver, LOAD_TIMEOUT_S).until(
            lambda d: d.execute_script("return document.body.getAttribute('data-charts-rendered')") is not None)
        expected = driver.execute_script("return Object.keys(JSON.parse("
                                         "document.getElementById('soak-chart-data').textContent)).length")
        assert expected >= 5  # P99 TTFT, ITL, E2E, error rate and throughput at least
        assert driver.execute_script("return document.body.getAttribute('data-charts-rendered')") == str(expected)
        assert driver.execute_script("return document.querySelectorAll('table.history tbody tr').length") == 2
        assert [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")] == []
        assert _network_requests(driver, url) == []
    finally:
        driver.quit()
