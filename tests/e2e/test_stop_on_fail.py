"""`soak start --stop-on-fail` on the reference server: a planted leak ends the run well before its planned
time, FAIL with the reason in summary.json and the report; a healthy run goes to its planned end."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

# 76 windows of 5 s planned after a 20 s warm-up; the first look comes at 20 windows (the trend tests' minimum)
# and a leak failing from it is confirmed at 30 windows: about 175 s into the 400 s planned.
LONG_RUN = ["start", "--duration", "400s", "--warmup", "20s", "--window", "5s", "--sample-every", "1s",
            "--rate", "4", "--scenario", "chat_short", "--no-idle-probes", "--time-scale", "60", "--json"]


def test_a_planted_leak_stops_the_run_early_with_fail_and_the_reason(tmp_path, soak_cli):
    result = soak_cli(*LONG_RUN, "--stop-on-fail", "--reference-fault", "rss-leak=256KiB", "--out", str(tmp_path),
                      timeout_s=540)
    assert result.returncode == 1, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["stop_reason"].startswith("stopped early: leak.rss FAIL"), summary["stop_reason"]
    assert summary["planned_duration_s"] == 400 and summary["duration_s"] < 240, summary["duration_s"]
    # a loaded test machine may find the client itself late: that voids what the client timed, not the leak
    assert summary["verdict"] == "FAIL"
    assert {f["check"]: f["verdict"] for f in summary["findings"]}["leak.rss"] == "FAIL"
    report = (tmp_path / summary["run_id"] / "report.html").read_text(encoding="utf-8")
    assert 'class="exhaustion stop-reason">Why it ended: stopped early: leak.rss FAIL' in report  # the banner
    assert "--stop-on-fail" in result.stderr  # the looks were announced at start
