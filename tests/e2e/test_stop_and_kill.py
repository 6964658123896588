"""A soak stopped by Ctrl-C or SIGTERM finalises; a SIGKILLed one reads as aborted and `soak close` finishes it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest
from e2e_helpers import wait_for_server_samples

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

START = ["start", "--duration", "10m", "--warmup", "5s", "--window", "5s", "--sample-every", "1s", "--rate", "2",
         "--no-idle-probes"]


def _spawn(out):
    return subprocess.Popen([sys.executable, "-m", "soak", *START, "--out", str(out), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_load_and_finalises_the_run(tmp_path, signum):
    process = _spawn(tmp_path)
    try:
        run_id, _ = wait_for_server_samples(tmp_path, minimum=12)
        process.send_signal(signum)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    summary = json.loads(stdout)
    assert summary["run_id"] == run_id
    assert summary["status"] == "aborted"
    assert summary["verdict"] in ("FAIL", "SUSPECT", "INCONCLUSIVE", "INVALID")  # never PASS: it was stopped
    assert process.returncode in (1, 3)
    assert (tmp_path / run_id / "report.html").exists()
    assert summary["duration_s"] < 120


def test_sigkill_loses_little_and_close_finalises_and_ends_the_server(tmp_path, soak_cli):
    process = _spawn(tmp_path)
    try:
        run_id, t0 = wait_for_server_samples(tmp_path, minimum=15)
        server_pgid = sqlite3.connect(tmp_path / "soak.db").execute(
            "select server_pgid from runs where id=?", (run_id,)).fetchone()[0]
        killed_at = time.time()
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    db = sqlite3.connect(tmp_path / "soak.db")
    last_sample_s = db.execute("select max(t_s) from process_samples where run_id=?", (run_id,)).fetchone()[0]
    assert (killed_at - t0) - last_sample_s <= 5.0 + 1.0  # at most the last 5 s (plus one sample interval)
    listed = json.loads(soak_cli("runs", "--out", str(tmp_path), "--json").stdout)
    assert listed[0]["id"] == run_id and listed[0]["status"] == "aborted"
    assert psutil.pid_exists(server_pgid)  # the server outlived its soak…
    closed = soak_cli("close", run_id, "--out", str(tmp_path), "--json")
    assert closed.returncode in (1, 3), closed.stderr
    summary = json.loads(closed.stdout)
    assert summary["status"] == "aborted" and summary["totals"]["requests"] > 0
    assert (tmp_path / run_id / "report.html").exists()
    deadline = time.monotonic() + 30
    while _group_alive(server_pgid) and time.monotonic() < deadline:  # …until `soak close` ended it
        time.sleep(0.1)
    assert not _group_alive(server_pgid)
    report = soak_cli("report", run_id, "--out", str(tmp_path))
    assert report.returncode == 0, report.stderr


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
