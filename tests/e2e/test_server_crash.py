"""A server that dies mid-run: crash events, restart under policy, outage windows left out, verdict FAIL."""

from __future__ import annotations

import json
import sqlite3

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def test_crash_restart_then_crash_again_ends_the_run_as_crashed(tmp_path, soak_cli):
    result = soak_cli("start", "--duration", "60s", "--warmup", "5s", "--window", "5s", "--sample-every", "1s",
                      "--rate", "2", "--no-idle-probes", "--reference-fault", "crash-after=12s",
                      "--restart", "on-crash", "--max-restarts", "1", "--out", str(tmp_path), "--json")
    assert result.returncode == 1, result.stderr[-3000:]  # FAIL: a crash stands however late the client was
    summary = json.loads(result.stdout)
    assert summary["status"] == "crashed"
    crashes = next(f for f in summary["findings"] if f["check"] == "crashes")
    assert crashes["verdict"] == "FAIL"
    db = sqlite3.connect(tmp_path / "soak.db")
    kinds = [k for (k,) in db.execute("select kind from events where run_id=? order by t_s", (summary["run_id"],))]
    assert kinds.count("crash") == 2 and kinds.count("restart") == 1
    assert kinds.index("outage_start") < kinds.index("restart") < kinds.index("outage_end")
    status, pgid = db.execute("select status, server_pgid from runs where id=?", (summary["run_id"],)).fetchone()
    assert status == "crashed"
    assert summary["duration_s"] < 45  # ended at the second crash, not at the planned 60 s


def test_crash_without_restart_policy_ends_at_once(tmp_path, soak_cli):
    result = soak_cli("start", "--duration", "60s", "--warmup", "5s", "--sample-every", "1s", "--rate", "2",
                      "--no-idle-probes", "--reference-fault", "crash-after=8s", "--out", str(tmp_path), "--json")
    assert result.returncode == 1, result.stderr[-3000:]  # FAIL: a crash stands however late the client was
    summary = json.loads(result.stdout)
    assert summary["status"] == "crashed"
    crash = next(f for f in summary["findings"] if f["check"] == "crashes")
    assert crash["verdict"] == "FAIL" and "70" in crash["evidence"]
