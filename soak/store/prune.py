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

from sqlalchemy import delete

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
from soak.store.records import StoredRun
from soak.store.store import Store

# Every table holding a run's rows, children first (the runs row goes last, whatever the foreign keys do).
RUN_TABLES = (EventRow, ProcessSample, GpuSample, GpuProcessSample, ServerSample, MetricSample, LatencyWindowRow,
              RequestWindowRow, RequestRow, RunLabel)


@dataclass
class PrunePlan:
    """Which runs a prune deletes and which old ones it keeps, and why."""

    cutoff: str
    delete: list[StoredRun] = field(default_factory=list)
    kept_running: list[StoredRun] = field(default_factory=list)
    kept_labelled: list[StoredRun] = field(default_factory=list)


@dataclass
class PruneResult:
    """What a prune did: runs deleted, folders removed, and the database bytes given back (SQLite)."""

    plan: PrunePlan
    deleted: list[str] = field(default_factory=list)
    folders_removed: list[str] = field(default_factory=list)
    db_bytes_before: int | None = None
    db_bytes_after: int | None = None
    vacuum_skipped_for: list[str] = field(default_factory=list)  # runs writing to the database, so no VACUUM


def _started(run: StoredRun) -> datetime:
    started = datetime.fromisoformat(run.started_at)
    return started if started.tzinfo else started.replace(tzinfo=UTC)


def _has_any(labels: dict[str, str], keep: dict[str, str]) -> bool:
    return any(labels.get(key) == value for key, value in keep.items())


def plan_prune(store: Store, older_than_s: float, keep_labels: dict[str, str] | None = None,
               now: datetime | None = None) -> PrunePlan:
    """The runs started more than `older_than_s` ago, split into those to delete and those kept."""
    cutoff = (now or datetime.now(UTC)) - timedelta(seconds=older_than_s)
    plan = PrunePlan(cutoff=cutoff.isoformat(timespec="seconds"))
    for run in reversed(store.list_runs()):  # oldest first
        if _started(run) >= cutoff:
            continue
        if run.status == "running":
            plan.kept_running.append(run)
        elif _has_any(run.labels, keep_labels or {}):
            plan.kept_labelled.append(run)
        else:
            plan.delete.append(run)
    return plan


def still_running(store: Store, run_id: str) -> bool:
    """Whether the run reads as running now (checked again right before it is deleted)."""
    return store.get_run(run_id).status == "running"


def delete_run_rows(store: Store, run_id: str) -> None:
    """Delete every row of one run in one transaction (all or nothing)."""
    try:
        with store.writing() as session:
            for model in RUN_TABLES:
                session.execute(delete(model).where(model.run_id == run_id))
            session.execute(delete(Run).where(Run.id == run_id))
    except StorageError as exc:
        raise StorageError(f"cannot delete run {run_id}: {exc}") from None


def remove_run_folder(run: StoredRun) -> bool:
    """Remove the run's own folder — only a folder named after the run, so a stray path never costs more."""
    folder = Path(run.out_dir or "")
    if folder.name != run.id or not folder.is_dir():
        return False
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise StorageError(f"run {run.id} is deleted from the database but its folder {folder} is not: "
                           f"{exc.strerror or exc}") from None
    return True


def prune(store: Store, plan: PrunePlan, say: Callable[[str], None] | None = None) -> PruneResult:
    """Delete the planned runs one by one (each on its own: a failure keeps what is already done), then vacuum;
    `say` hears each step."""
    say = say or (lambda _text: None)
    result = PruneResult(plan=plan, db_bytes_before=store.size_bytes())
    for run in plan.delete:
        if still_running(store, run.id):  # a `soak close` or a resumed host may have changed it since the plan
            plan.kept_running.append(run)
            continue
        say(f"deleting {run.id}…")
        delete_run_rows(store, run.id)
        result.deleted.append(run.id)
        if remove_run_folder(run):
            result.folders_removed.append(run.out_dir)
    if result.deleted and store.dialect == "sqlite":
        _vacuum_unless_writing(store, result, say)
    result.db_bytes_after = store.size_bytes()
    return result


def _vacuum_unless_writing(store: Store, result: PruneResult, say: Callable[[str], None]) -> None:
    """VACUUM, unless a run is writing to the database: VACUUM rewrites the whole file under an exclusive lock,
    and that run's commits would wait it out (held in memory, but a storage outage all the same)."""
    result.vacuum_skipped_for = [run.id for run in store.list_runs() if run.status == "running"]
    if result.vacuum_skipped_for:
        say(f"VACUUM skipped: run {', '.join(result.vacuum_skipped_for)} is writing to this database; the freed "
            "pages are reused by new rows (`soak prune` again once it has ended gives them back to the file system)")
        return
    say("giving the space back (VACUUM)…")
    store.vacuum()
