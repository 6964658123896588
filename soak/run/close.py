"""`soak close`: finalise a run whose soak was killed, and end the server it left behind."""

from __future__ import annotations

import json
import logging
import os
import signal
from datetime import datetime
from pathlib import Path

import psutil
from sqlalchemy import update

from soak.contracts import Summary
from soak.errors import ConfigError
from soak.run.finalise import finalise_run
from soak.store.models import Run
from soak.store.records import StoredRun
from soak.store.store import Store

log = logging.getLogger(__name__)


def end_left_server(run: StoredRun) -> str | None:
    """SIGTERM the recorded server process group, only if its leader still runs the recorded command."""
    pgid, recorded = run.server_pgid, run.server_cmd
    if not pgid or not recorded:
        return None
    try:
        leader = psutil.Process(pgid)
        if leader.cmdline() != json.loads(recorded):
            return f"process {pgid} no longer runs the recorded server command; left alone"
        os.killpg(pgid, signal.SIGTERM)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return None
    except psutil.AccessDenied:
        return f"not allowed to inspect process {pgid}; left alone"
    return f"sent SIGTERM to the left-behind server group {pgid}"


def mark_ended_at_last_heartbeat(store: Store, run: StoredRun) -> None:
    """A killed soak never wrote its end: take its last heartbeat as the end of what was collected."""
    ended_at = run.heartbeat_at or run.started_at
    duration_s = (datetime.fromisoformat(ended_at) - datetime.fromisoformat(run.started_at)).total_seconds()
    with store.writing() as session:
        session.execute(update(Run).where(Run.id == run.id).values(ended_at=ended_at, duration_s=duration_s))


def close_run(store: Store, run: StoredRun, gates_file: Path | None) -> Summary:
    """Finalise an aborted (or already finished) run; a run whose soak is alive is refused."""
    if run.status == "running":
        raise ConfigError(f"run {run.id} is still running (soak pid {run.soak_pid}): stop it first")
    note = end_left_server(run)
    if note:
        log.warning(note)
    status = "aborted" if run.status in ("running", "aborted") else run.status
    if not run.ended_at:
        mark_ended_at_last_heartbeat(store, run)
    return finalise_run(store, run.id, stopped_early=status != "completed", gates_file=gates_file, status=status)
