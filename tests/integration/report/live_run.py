"""A database holding a run that reads as still running (this test process stands in for its soak) and a
finished run with a stored summary, and `soak web` served over it as a real subprocess."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from report_run import RUN_ID, build_run, summary_dict

FINISHED_ID = "20261201T090000Z-beef"
START_TIMEOUT_S = 60.0


def build_live_db(folder: Path) -> dict[str, Any]:
    """The report's realistic run made to read as running (its soak pid is this process, on this host), plus a
    finished run with its summary stored; returns the database path and URL and both run ids."""
    db_path = folder / "soak.db"
    build_run(db_path)["store"].close()
    db = sqlite3.connect(db_path)
    db.row_factory = sqlite3.Row
    row = dict(db.execute("select * from runs where id = ?", (RUN_ID,)).fetchone())
    environment = {**json.loads(row["environment_json"]), "host": socket.gethostname()}
    db.execute("update runs set status='running', soak_pid=?, ended_at=NULL, duration_s=NULL, verdict=NULL, "
               "verdict_reason=NULL, summary_json=NULL, environment_json=?, out_dir=? where id=?",
               (os.getpid(), json.dumps(environment), str(folder / RUN_ID), RUN_ID))
    summary = {**summary_dict(), "run_id": FINISHED_ID, "verdict": "PASS", "verdict_reason": "stored verdict"}
    finished = {**row, "id": FINISHED_ID, "status": "completed", "verdict": "PASS", "verdict_reason": "stored verdict",
                "summary_json": json.dumps(summary), "out_dir": str(folder / FINISHED_ID)}
    db.execute(f"insert into runs ({', '.join(finished)}) values ({', '.join('?' * len(finished))})",
               list(finished.values()))
    db.commit()
    db.close()
    return {"db_path": db_path, "db_url": f"sqlite:///{db_path}", "running": RUN_ID, "finished": FINISHED_ID}


def table_dump(db_path: Path) -> dict[str, list[tuple]]:
    """Every row of every table, to compare before and after (what a read-only view must leave as it was)."""
    db = sqlite3.connect(db_path)
    tables = [name for (name,) in db.execute("select name from sqlite_master where type='table' order by name")]
    dump = {name: sorted(map(repr, db.execute(f'select * from "{name}"').fetchall())) for name in tables}
    db.close()
    return dump


@contextmanager
def soak_web(db_url: str, *extra: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`soak web --port 0` on the database; yields (base URL, process) and ends the process by its PID."""
    process = subprocess.Popen([sys.executable, "-m", "soak", "web", "--db", db_url, "--port", "0", *extra],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield _first_line(process), process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _first_line(process: subprocess.Popen) -> str:
    """The URL `soak web` prints on stdout once it listens; fails with its stderr if it never does."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if ready:
            return process.stdout.readline().strip()
    raise AssertionError(f"soak web printed no URL: {process.stderr.read() if process.poll() is not None else ''}")
