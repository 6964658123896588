"""The records a `Store` hands out, typed and read-only: a stored run, and a run event (`soak.contracts.Event`).

Rows cross from the store to every stage above it (run, analysis, report, web, schedule, cli) as these, so a
reader's editor knows the fields; dicts stay inside the store (database rows) and at the edges that serialise
(`as_dict()` for JSON, HTTP bodies, exports).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from soak.contracts import Event, EventKind
from soak.store.models import EventRow, Run

_EVENT_KINDS = {kind.value: kind for kind in EventKind}


@dataclass(frozen=True)
class StoredRun:
    """One row of the `runs` table with its labels; `status` is the effective one (a "running" run whose soak is
    gone reads "aborted"), `stored_status` what the row says.

    `config` and `environment` are the stored JSON decoded on first use (a list of runs rarely needs them).
    """

    id: str
    status: str
    started_at: str
    t0_epoch_s: float
    planned_duration_s: float
    warmup_s: float
    window_s: float
    out_dir: str
    target_kind: str
    stored_status: str = ""
    ended_at: str | None = None
    heartbeat_at: str | None = None
    duration_s: float | None = None
    soak_pid: int | None = None
    server_pgid: int | None = None
    server_cmd: str | None = None
    target_url: str | None = None
    model: str | None = None
    schedule_name: str | None = None
    fleet_id: str | None = None  # the fleet run this replica's run belongs to
    replica: str | None = None  # the replica's name in it
    verdict: str | None = None
    verdict_reason: str | None = None
    summary_json: str | None = None
    config_json: str = "{}"
    environment_json: str = "{}"
    labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Run, labels: dict[str, str], status: str) -> StoredRun:
        """The record of a model row, given its labels and effective status."""
        columns = {column.key: getattr(row, column.key) for column in Run.__table__.columns}
        stored_status = columns.pop("status")
        return cls(**columns, status=status, stored_status=stored_status, labels=dict(labels))

    @cached_property
    def config(self) -> dict[str, Any]:
        """The run's `RunConfig` as it was stored (JSON); older runs may lack newer keys."""
        return json.loads(self.config_json or "{}")

    @cached_property
    def environment(self) -> dict[str, Any]:
        """Host, versions and the server's build as recorded at the start (JSON)."""
        return json.loads(self.environment_json or "{}")

    def elapsed_s(self, now: datetime | None = None) -> float:
        """Seconds since the run started, to its end once it has one (else to `now`)."""
        started = _aware(datetime.fromisoformat(self.started_at))
        end = _aware(datetime.fromisoformat(self.ended_at)) if self.ended_at else (now or datetime.now(UTC))
        return max((end - started).total_seconds(), 0.0)

    def as_dict(self) -> dict[str, Any]:
        """Every column (the effective `status`), `labels`, and `config`/`environment` decoded: for JSON edges."""
        return {**asdict(self), "config": self.config, "environment": self.environment}


def _aware(moment: datetime) -> datetime:
    """A stored time without a zone is UTC (older rows were written so)."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def event_from_row(row: EventRow) -> Event:
    """The `Event` of an `events` row: its kind an `EventKind` where it is one, its data decoded."""
    return Event(t_s=row.t_s, kind=_EVENT_KINDS.get(row.kind, row.kind), message=row.message or "",
                 data=json.loads(row.data_json) if row.data_json else {}, at=row.at)
