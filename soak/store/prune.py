"""Retention: delete old runs — every row they own and their folders — and give SQLite's space back.

A run whose soak is still alive (`effective_status` "running": its PID lives on this host, or its heartbeat is
fresh) is never touched, however old it is, nor is a run carrying one of the labels to keep.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, delete
from sqlalchemy.exc import SQLAlchemyError

from soak.errors import StorageError
from soak.store.models import (
    EventRow,
    GpuProcessSample,
    GpuSample,
    LatencyWindowRow,
    MetricSample,
    ProcessSample,
    RequestRow,
    RequestWindowRow,
    Run,
    RunLabel,
    ServerSample,
)
from soak.store.queries import get_run, list_runs

# Every table holding a run's rows, children first (the runs row goes last, whatever the foreign keys do).
RUN_TABLES = (EventRow, ProcessSample, GpuSample, GpuProcessSample, ServerSample, MetricSample, LatencyWindowRow,
              RequestWindowRow, RequestRow, RunLabel)


@dataclass
class PrunePlan:
    """Which runs a prune deletes and which old ones it keeps, and why."""

    cutoff: str
    delete: list[dict[str, Any]] = field(default_factory=list)
    kept_running: list[dict[str, Any]] = field(default_factory=list)
    kept_labelled: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class PruneResult:
    """What a prune did: runs deleted, folders removed, and the database bytes given back (SQLite)."""

    plan: PrunePlan
    deleted: list[str] = field(default_factory=list)
    folders_removed: list[str] = field(default_factory=list)
    db_bytes_before: int | None = None
    db_bytes_after: int | None = None


def _started(run: dict[str, Any]) -> datetime:
    started = datetime.fromisoformat(run["started_at"])
    return started if started.tzinfo else started.replace(tzinfo=UTC)


def _has_any(labels: dict[str, str], keep: dict[str, str]) -> bool:
    return any(labels.get(key) == value for key, value in keep.items())


def plan_prune(engine: Engine, older_than_s: float, keep_labels: dict[str, str] | None = None,
               now: datetime | None = None) -> PrunePlan:
    """The runs started more than `older_than_s` ago, split into those to delete and those kept."""
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=older_than_s)
    plan = PrunePlan(cutoff=cutoff.isoformat(timespec="seconds"))
    for run in reversed(list_runs(engine)):  # oldest first
        if _started(run) >= cutoff:
            continue
        if run["status"] == "running":
            plan.kept_running.append(run)
        elif _has_any(run["labels"], keep_labels or {}):
            plan.kept_labelled.append(run)
        else:
            plan.delete.append(run)
    return plan


def still_running(engine: Engine, run_id: str) -> bool:
    """Whether the run reads as running now (checked again right before it is deleted)."""
    return get_run(engine, run_id)["status"] == "running"


def delete_run_rows(engine: Engine, run_id: str) -> None:
    """Delete every row of one run in one transaction (all or nothing)."""
    try:
        with engine.begin() as connection:
            for model in RUN_TABLES:
                connection.execute(delete(model).where(model.run_id == run_id))
            connection.execute(delete(Run).where(Run.id == run_id))
    except SQLAlchemyError as exc:
        raise StorageError(f"cannot delete run {run_id}: {getattr(exc, 'orig', None) or exc}") from None


def remove_run_folder(run: dict[str, Any]) -> bool:
    """Remove the run's own folder — only a folder named after the run, so a stray path never costs more."""
    folder = Path(run.get("out_dir") or "")
    if folder.name != run["id"] or not folder.is_dir():
        return False
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise StorageError(f"run {run['id']} is deleted from the database but its folder {folder} is not: "
                           f"{exc.strerror or exc}") from None
    return True


def sqlite_bytes(engine: Engine) -> int | None:
    """The SQLite database's size on disk with its WAL; None for another database."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    return sum(Path(database + suffix).stat().st_size for suffix in ("", "-wal")
               if Path(database + suffix).exists())


def vacuum(engine: Engine) -> None:
    """Give deleted pages back to the file system: VACUUM, then truncate the WAL (SQLite only)."""
    if engine.dialect.name != "sqlite":
        return
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        cursor.execute("VACUUM")  # outside any transaction: the connection runs in autocommit (see db.py)
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cursor.close()
    except Exception as exc:  # a DB-API error of the driver
        raise StorageError(f"runs are deleted but VACUUM failed: {exc}") from None
    finally:
        connection.close()


def prune(engine: Engine, plan: PrunePlan, say: Callable[[str], None] | None = None) -> PruneResult:
    """Delete the planned runs one by one (each on its own: a failure keeps what is already done), then vacuum;
    `say` hears each step."""
    say = say or (lambda _text: None)
    result = PruneResult(plan=plan, db_bytes_before=sqlite_bytes(engine))
    for run in plan.delete:
        if still_running(engine, run["id"]):  # a `soak close` or a resumed host may have changed it since the plan
            plan.kept_running.append(run)
            continue
        say(f"deleting {run['id']}…")
        delete_run_rows(engine, run["id"])
        result.deleted.append(run["id"])
        if remove_run_folder(run):
            result.folders_removed.append(run["out_dir"])
    if result.deleted and engine.dialect.name == "sqlite":
        say("giving the space back (VACUUM)…")
        vacuum(engine)
    result.db_bytes_after = sqlite_bytes(engine)
    return result
