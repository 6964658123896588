"""A database unwritable for longer than the storage outage budget: a clear error, the load stops, the rows held
are written once the database is back, and what was collected is reported."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

import pytest
from e2e_helpers import wait_for_server_samples

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_a_locked_database_stops_the_load_and_reports_what_was_collected(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "soak", "start", "--duration", "10m", "--warmup", "5s", "--sample-every", "1s",
         "--rate", "2", "--no-idle-probes", "--storage-outage-for", "5s", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id, _ = wait_for_server_samples(tmp_path, minimum=8)
        blocker = sqlite3.connect(tmp_path / "soak.db", timeout=30, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")  # no other writer gets in: soak's commits fail after their busy timeout
        held_since = time.monotonic()
        while process.poll() is None and time.monotonic() - held_since < 12:
            time.sleep(0.2)
        blocker.execute("ROLLBACK")
        blocker.close()
        _, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 4, stderr[-3000:]
    last_line = stderr.strip().splitlines()[-1]
    assert "database is locked" in last_line and "report of what was collected" in last_line
    assert "every row held was written" in last_line and "storage outage: " in stderr  # said when it began
    assert (tmp_path / run_id / "report.html").exists()
    status = sqlite3.connect(tmp_path / "soak.db").execute("select status from runs where id=?", (run_id,)).fetchone()
    assert status == ("aborted",)
