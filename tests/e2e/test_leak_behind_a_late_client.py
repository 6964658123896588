"""A planted leak behind a late client: the client's lateness voids what the client timed, not the server's memory.

soak runs `--stop-on-fail` on the reference server with a planted leak, and the test stops soak's own process
(SIGSTOP, then SIGCONT) three times for 3 s once the load is measured: a client the OS gives no CPU at all, so
its sends fall seconds behind their schedule whatever else the machine is doing, while the server (its own
process group) keeps running. `client.saturation` must find the client INVALID, the checks it times must not be
judged, and the leak must still stop the run with FAIL and exit code 1, its reason saying how late the client was.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

# 55 windows of 4 s after a 20 s warm-up: the first look at 20 windows, a leak failing from it confirmed at 30
# (about 140 s into the 240 s planned).
RUN = ["start", "--duration", "240s", "--warmup", "20s", "--window", "4s", "--sample-every", "1s", "--rate", "4",
       "--scenario", "chat_short", "--no-idle-probes", "--time-scale", "60", "--canary-every", "0",
       "--stop-on-fail", "--reference-fault", "rss-leak=256KiB", "--json"]
PAUSES = 3
PAUSE_S = 3.0  # each pause leaves about 2 s of arrivals (8 at 4/s) more than 1 s late: over 1 % of the sends
BETWEEN_S = 4.0


def wait_for_measured_window(db_path: Path, soak: subprocess.Popen, timeout_s: float = 120) -> None:
    """Until the run has stored a latency window after its warm-up (the load is under way)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert soak.poll() is None, f"soak ended before its load was measured: {soak.stderr.read()[-2000:]}"
        try:
            with sqlite3.connect(db_path) as db:
                if db.execute("select count(*) from latency_windows where window_index >= 0").fetchone()[0]:
                    return
        except sqlite3.OperationalError:
            pass  # the database or its schema is not there yet
        time.sleep(0.25)
    raise AssertionError("the run never stored a measured window")


def starve(soak: subprocess.Popen) -> None:
    """Stop soak's process for PAUSE_S, PAUSES times: its clock runs on, its sends do not."""
    for _ in range(PAUSES):
        os.kill(soak.pid, signal.SIGSTOP)
        try:
            time.sleep(PAUSE_S)  # how long the client gets no CPU: the fault itself, not a wait for a condition
        finally:
            os.kill(soak.pid, signal.SIGCONT)
        time.sleep(BETWEEN_S)


def test_a_leak_behind_a_late_client_stops_the_run_with_fail(tmp_path):
    soak = subprocess.Popen([sys.executable, "-m", "soak", *RUN, "--out", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_measured_window(tmp_path / "soak.db", soak)
        starve(soak)
        stdout, stderr = soak.communicate(timeout=330)
    finally:
        if soak.poll() is None:
            os.kill(soak.pid, signal.SIGCONT)
            os.kill(soak.pid, signal.SIGKILL)
            soak.wait(timeout=10)
    assert soak.returncode == 1, stderr[-3000:]
    summary = json.loads(stdout)
    findings = {f["check"]: f for f in summary["findings"]}
    client, leak = findings["client.saturation"], findings["leak.rss"]
    assert client["verdict"] == "INVALID", client
    assert leak["verdict"] == "FAIL", leak
    late = client["details"]["late_by"]
    assert summary["verdict"] == "FAIL"
    assert summary["verdict_reason"].startswith("leak.rss FAIL: ")
    assert f"the client was late ({late})" in summary["verdict_reason"]
    # what the client timed is not judged; it says so and keeps what it measured
    for check in ("creep.ttft_p99", "creep.e2e_p99", "hang"):
        assert findings[check]["verdict"] in ("INVALID", "SKIPPED"), findings[check]
    e2e = findings["creep.e2e_p99"]
    if e2e["verdict"] == "INVALID":
        assert e2e["evidence"].startswith("Not judged: the client was late (") and "measured" in e2e["details"]
    # the leak stopped the run, and the stop's reason says the client was late at that look
    assert summary["stop_reason"].startswith("stopped early: leak.rss FAIL"), summary["stop_reason"]
    assert "the client was late (" in summary["stop_reason"]
    assert summary["duration_s"] < summary["planned_duration_s"]
    report = (tmp_path / summary["run_id"] / "report.html").read_text(encoding="utf-8")
    banner = report[report.index('<header class="banner'):report.index("</header>")]
    assert 'class="banner v-fail"' in banner and "the client was late (" in banner
