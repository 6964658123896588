"""Read queries over soak's database, shared by analysis, report, and the `runs`/`status` commands."""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError

from soak.errors import StorageError, UnknownRunError
from soak.store.models import Base, EventRow, Run, RunLabel

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


def _ran_here(run: dict[str, Any]) -> bool:
    try:
        return json.loads(run.get("environment_json") or "{}").get("host") == socket.gethostname()
    except ValueError:
        return False


def effective_status(run: dict[str, Any], now: datetime | None = None) -> str:
    """The stored status, except that a "running" run whose soak is gone reads as aborted.

    Gone = its soak PID is dead on this host, or (for a run started on another host sharing the database)
    its heartbeat is older than STALE_HEARTBEAT_S.
    """
    if run["status"] != "running":
        return run["status"]
    if _ran_here(run):
        return "running" if _pid_alive(run.get("soak_pid")) else "aborted"
    now = now or datetime.now(UTC)
    beat = run.get("heartbeat_at") or run["started_at"]
    age_s = (now - datetime.fromisoformat(beat)).total_seconds()
    return "aborted" if age_s > STALE_HEARTBEAT_S else "running"


def with_labels(query, labels: dict[str, str] | None):  # query: a Select over Run
    """`query` narrowed to runs carrying every KEY=VALUE of `labels`."""
    for key, value in (labels or {}).items():
        query = query.where(select(RunLabel.run_id).where(RunLabel.run_id == Run.id, RunLabel.key == key,
                                                          RunLabel.value == value).exists())
    return query


def run_labels(engine: Engine, run_ids: list[str]) -> dict[str, dict[str, str]]:
    """run id → its labels (sorted by key), for the given runs."""
    found: dict[str, dict[str, str]] = {run_id: {} for run_id in run_ids}
    for start in range(0, len(run_ids), 500):  # stay under every database's bound-parameter limit
        query = select(RunLabel).where(RunLabel.run_id.in_(run_ids[start:start + 500])).order_by(RunLabel.key)
        with reading(engine) as session_rows:
            for label in session_rows(query):
                found[label.run_id][label.key] = label.value
    return found


def list_runs(engine: Engine, limit: int | None = None, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Runs, newest first, each with its effective status and its `labels`; with `labels`, only the runs
    carrying all of them."""
    query = with_labels(select(Run).order_by(Run.id.desc()), labels)
    if limit:
        query = query.limit(limit)
    with reading(engine) as session_rows:
        rows = [row_to_dict(run) for run in session_rows(query)]
    labels_of = run_labels(engine, [run["id"] for run in rows])
    for run in rows:
        run["status"] = effective_status(run)
        run["labels"] = labels_of[run["id"]]
    return rows


def get_run(engine: Engine, run_id: str) -> dict[str, Any]:
    """One run with its effective status; UnknownRunError when there is none."""
    with reading(engine) as session_rows:
        rows = [row_to_dict(run) for run in session_rows(select(Run).where(Run.id == run_id))]
    if not rows:
        raise UnknownRunError(f"unknown run id {run_id!r} in {engine.url.render_as_string(hide_password=True)}")
    run = rows[0]
    run["status"] = effective_status(run)
    run["config"] = json.loads(run["config_json"])
    run["environment"] = json.loads(run["environment_json"])
    run["labels"] = run_labels(engine, [run_id])[run_id]
    return run


def latest_run_id(engine: Engine) -> str | None:
    """The id of the newest run, or None."""
    runs = list_runs(engine, limit=1)
    return runs[0]["id"] if runs else None


def read_rows(engine: Engine, model: type[Base], run_id: str, **equals: Any) -> list[dict[str, Any]]:
    """All rows of `model` for a run (optionally filtered by column equality), in time order when it has t_s."""
    query = select(model).where(model.run_id == run_id)
    for name, value in equals.items():
        query = query.where(getattr(model, name) == value)
    order = getattr(model, "t_s", None) or getattr(model, "window_index", None)
    if order is not None:
        query = query.order_by(order)
    with reading(engine) as session_rows:
        return [row_to_dict(row) for row in session_rows(query)]


def read_events(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    """A run's events in time order, with `data` decoded."""
    events = read_rows(engine, EventRow, run_id)
    for event in events:
        event["data"] = json.loads(event["data_json"]) if event["data_json"] else {}
    return events


class reading:
    """Context giving a function that runs a select in a short session; database errors become StorageError."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def __enter__(self):
        from sqlalchemy.orm import Session

        self.session = Session(self.engine)

        def rows(query):
            try:
                return list(self.session.scalars(query))
            except SQLAlchemyError as exc:
                raise StorageError(f"cannot read the database: {getattr(exc, 'orig', None) or exc}") from None

        return rows

    def __exit__(self, *exc_info: object) -> None:
        self.session.close()
