"""`soak prune` next to a real running `soak start`: the finished run goes (rows and folder), the running one
stays untouched and still finishes and finalises afterwards."""

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

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
SHORT = ("--warmup", "4s", "--window", "4s", "--sample-every", "1s", "--rate", "3", "--no-idle-probes")


def running_run_id(out, finished: str, proc: subprocess.Popen, timeout_s: float = 90) -> str:
    """Poll the database until the live soak has its run row and a first sample; its id."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the running soak exited early"
        db = sqlite3.connect(out / "soak.db")
        row = db.execute("select r.id from runs r join process_samples s on s.run_id = r.id "
                         "where r.id != ? limit 1", (finished,)).fetchone()
        db.close()
        if row:
            return row[0]
        time.sleep(0.25)
    raise AssertionError("the running soak never stored a sample")


def test_prune_deletes_the_old_run_and_never_the_running_one(tmp_path, soak_cli):
    out = tmp_path / "out"
    first = soak_cli("start", "--duration", "10s", *SHORT, "--out", str(out), "--json", timeout_s=180)
    assert first.returncode in (0, 1, 3), first.stderr[-3000:]
    finished = json.loads(first.stdout)["run_id"]
    live = subprocess.Popen([sys.executable, "-m", "soak", "start", "--duration", "120s", *SHORT, "--out", str(out)],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SOAK_LABEL": "release=live"})
    try:
        live_id = running_run_id(out, finished, live)
        dry = json.loads(soak_cli("prune", "--older-than", "1s", "--dry-run", "--json", "--out", str(out)).stdout)
        assert dry["would_delete"] == [finished] and dry["deleted"] == [] and (out / finished).exists()
        result = soak_cli("prune", "--older-than", "1s", "--json", "--out", str(out))
        assert result.returncode == 0, result.stderr
        pruned = json.loads(result.stdout)
        assert pruned["deleted"] == [finished] and pruned["kept_running"] == [live_id]
        assert pruned["vacuum_skipped_for"] == [live_id] and "VACUUM skipped" in result.stderr  # the run is writing
        assert not (out / finished).exists() and (out / live_id).exists()
        db = sqlite3.connect(out / "soak.db")
        assert db.execute("select count(*) from process_samples where run_id = ?", (finished,)).fetchone()[0] == 0
        assert db.execute("select count(*) from runs where id = ?", (finished,)).fetchone()[0] == 0
        db.close()
        assert live.poll() is None
    finally:
        if live.poll() is None:
            live.send_signal(signal.SIGINT)  # the run we started, by its PID: stop and finalise
        _, stderr = live.communicate(timeout=120)
    assert live.returncode in (0, 1, 3), stderr[-3000:]
    db = sqlite3.connect(out / "soak.db")
    status, labels = db.execute("select r.status, group_concat(l.key || '=' || l.value) from runs r "
                                "left join run_labels l on l.run_id = r.id where r.id = ?", (live_id,)).fetchone()
    assert status != "running" and labels == "release=live"
    assert (out / live_id / "summary.json").exists()
