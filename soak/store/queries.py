"""What a stored run row means beyond its columns: its effective status, label filters, rows as dicts.

The reads themselves are methods of `soak.store.Store`.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from soak.store.models import Base, Run, RunLabel

STALE_HEARTBEAT_S = 30.0


def row_to_dict(row: Base) -> dict[str, Any]:
    """A model instance as a plain dict of its columns."""
    return {column.name: getattr(row, column.key) for column in row.__table__.columns}


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ran_here(run: Run) -> bool:
    try:
        return json.loads(run.environment_json or "{}").get("host") == socket.gethostname()
    except ValueError:
        return False


def effective_status(run: Run, now: datetime | None = None) -> str:
    """The stored status, except that a "running" run whose soak is gone reads as aborted.

    Gone = its soak PID is dead on this host, or (for a run started on another host sharing the database)
    its heartbeat is older than STALE_HEARTBEAT_S.
    """
    if run.status != "running":
        return run.status
    if _ran_here(run):
        return "running" if _pid_alive(run.soak_pid) else "aborted"
    now = now or datetime.now(UTC)
    beat = run.heartbeat_at or run.started_at
    age_s = (now - datetime.fromisoformat(beat)).total_seconds()
    return "aborted" if age_s > STALE_HEARTBEAT_S else "running"


def with_labels(query, labels: dict[str, str] | None):  # query: a Select over Run
    """`query` narrowed to runs carrying every KEY=VALUE of `labels`."""
    for key, value in (labels or {}).items():
        query = query.where(select(RunLabel.run_id).where(RunLabel.run_id == Run.id, RunLabel.key == key,
                                                          RunLabel.value == value).exists())
    return query
