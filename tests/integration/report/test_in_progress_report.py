"""`soak report` on a run still under way: a report marked in progress, in files of its own, and the run's row,
lock and own files left exactly as they were."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from live_run import build_live_db, table_dump

from soak.run.locking import hold_run_lock

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture
def live(tmp_path):
    return build_live_db(tmp_path)


def test_a_running_run_gets_an_in_progress_report_and_is_left_alone(live, tmp_path, soak_cli):
    before = table_dump(live["db_path"])
    with hold_run_lock(tmp_path):  # as the live run would: the report must not need it
        result = soak_cli("report", live["running"], "--db", live["db_url"], "--json", timeout_s=120)
    assert result.returncode == 0, result.stderr
    assert "is still running: an in-progress report" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["in_progress"] is True and summary["status"] == "running"
    assert summary["verdict_reason"].startswith("provisional, the run is in progress (")
    run_dir = tmp_path / live["running"]
    assert summary["report_html"] == str(run_dir / "report-in-progress.html")
    assert json.loads((run_dir / "summary-in-progress.json").read_text()) == summary
    html = (run_dir / "report-in-progress.html").read_text()
    assert 'id="in-progress"' in html and "<title>In progress · " in html
    assert '<meta http-equiv="refresh"' not in html  # a file, not the live view
    assert not (run_dir / "report.html").exists() and not (run_dir / "summary.json").exists()
    assert table_dump(live["db_path"]) == before  # no verdict stored, status still running


def test_report_dir_takes_the_in_progress_files(live, tmp_path, soak_cli):
    result = soak_cli("report", live["running"], "--db", live["db_url"], "--report-dir", str(tmp_path / "snap"),
                      timeout_s=120)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "snap").iterdir()) == ["report-in-progress.html",
                                                                      "summary-in-progress.json"]
    assert not (tmp_path / live["running"]).exists()


def test_a_finished_run_report_has_no_in_progress_mark(live, tmp_path, soak_cli):
    result = soak_cli("report", live["finished"], "--db", live["db_url"], "--json", "--report-dir",
                      str(tmp_path / "final"), timeout_s=120)
    assert result.returncode == 0, result.stderr
    assert "in_progress" not in json.loads(result.stdout)
    html = (tmp_path / "final" / "report.html").read_text()
    assert 'id="in-progress"' not in html and "<title>In progress" not in html


def test_the_pdf_of_a_running_run_carries_the_in_progress_strip(live, tmp_path, soak_cli):
    from soak.report.pdf import find_chromium

    if not (find_chromium() and shutil.which("pdftotext")):
        if os.environ.get("SOAK_REQUIRE_ALL") == "1":
            pytest.fail("needs chromium and poppler-utils (SOAK_REQUIRE_ALL=1)")
        pytest.skip("needs chromium and poppler-utils")
    pdf = tmp_path / "snapshot.pdf"
    result = soak_cli("report", live["running"], "--db", live["db_url"], "--pdf", str(pdf), timeout_s=240)
    assert result.returncode == 0, result.stderr
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    assert "IN PROGRESS" in text and "provisional" in text
