"""Whole `soak start` runs of the multimodal scenario on the reference server: a server that keeps every picture it
sees (`image-leak`) FAILs leak.rss with the growth laid on `multimodal`; a server refusing images stops the start
before any run with one line (exit 2), and with --skip-unsupported the rest of the mix runs and the summary and
report say what was dropped and why."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

TEXT_ONLY = ["--reference-arg=--no-images", "--scenario", "multimodal", "--scenario", "chat_short"]
SHORT = ["start", "--duration", "5s", "--warmup", "1s", "--window", "1s", "--sample-every", "1s", "--rate", "3",
         "--no-idle-probes", "--canary-every", "0"]
REFUSED = "HTTP 400: soak-reference is a text-only model: it does not accept image_url content parts"


def runs_in(out: Path) -> int:
    with sqlite3.connect(out / "soak.db") as db:
        return db.execute("select count(*) from runs").fetchone()[0]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_pictures_kept_for_good_fail_leak_rss_laid_on_multimodal(soak_cli, tmp_path):
    # 22 windows of 2 s after a 6 s warm-up; 2 req/s of multimodal, ~3 new pictures in 4 images: ~150 MiB kept
    result = soak_cli("start", "--duration", "50s", "--warmup", "6s", "--window", "2s", "--sample-every", "1s",
                      "--rate", "4", "--scenario", "multimodal", "--scenario", "chat_short", "--no-idle-probes",
                      "--canary-every", "0", "--reference-fault", "image-leak=2MiB", "--out", str(tmp_path),
                      "--json", timeout_s=150)
    assert result.returncode == 1, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    rss = next(f for f in summary["findings"] if f["check"] == "leak.rss")
    assert rss["verdict"] == "FAIL", rss
    assert "per `multimodal` request" in rss["evidence"], rss["evidence"]
    assert summary["totals"]["errors"] == 0
    assert summary["capabilities"]["features"]["images"] == {"supported": True, "answer": "HTTP 200", "names": [],
                                                           "logged": []}
    assert summary["capabilities"]["dropped"] == []


@pytest.mark.timeout(90)
def test_a_server_refusing_images_stops_the_start_with_one_line(soak_cli, tmp_path):
    result = soak_cli(*SHORT, *TEXT_ONLY, "--out", str(tmp_path), timeout_s=60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"soak: error: scenario multimodal needs image_url content parts, which the server refused: {REFUSED}; "
        "nothing was run (leave it out of --scenario, or drop it with --skip-unsupported)")
    assert runs_in(tmp_path) == 0  # asked before the run opened: nothing measured, nothing lost


@pytest.mark.timeout(90)
def test_skip_unsupported_runs_the_rest_and_says_what_was_dropped(soak_cli, tmp_path):
    result = soak_cli(*SHORT, *TEXT_ONLY, "--skip-unsupported", "--out", str(tmp_path), "--json", timeout_s=60)
    assert result.returncode in (0, 3), result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["capabilities"]["dropped"] == [{"scenario": "multimodal", "feature": "images", "answer": REFUSED}]
    assert summary["capabilities"]["features"]["images"]["supported"] is False
    assert summary["totals"]["requests"] > 0 and summary["totals"]["errors"] == 0  # no image request was sent
    with sqlite3.connect(tmp_path / "soak.db") as db:
        scenarios = {row[0] for row in db.execute("select distinct scenario from request_windows")}
    assert "multimodal" not in scenarios and "chat_short" in scenarios
    report = Path(summary["report_html"]).read_text()
    assert "Scenario multimodal was dropped from the mix (--skip-unsupported)" in report
    assert "dropped scenario multimodal needs image_url content parts" in result.stderr
