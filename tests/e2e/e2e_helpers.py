"""Helpers of the end-to-end tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def wait_for_server_samples(out: Path, minimum: int, timeout_s: float = 90) -> tuple[str, float]:
    """Poll `out/soak.db` until a run has `minimum` server samples; returns (run id, t0 epoch seconds)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            db = sqlite3.connect(out / "soak.db")
            row = db.execute("select r.id, r.t0_epoch_s, count(s.id) from runs r join process_samples s "
                             "on s.run_id = r.id where s.role = 'server' group by r.id").fetchone()
            db.close()
            if row and row[2] >= minimum:
                return row[0], row[1]
        except sqlite3.OperationalError:
            pass  # the schema is not there yet
        time.sleep(0.25)
    raise AssertionError("the run never stored enough samples")


def query(out: Path, sql: str) -> list[tuple]:
    """Every row `sql` selects from `out/soak.db`."""
    db = sqlite3.connect(out / "soak.db")
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()
