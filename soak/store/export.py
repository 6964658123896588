"""Exporting one run's rows as flat tables (CSV, or Parquet with pyarrow) that pandas, DuckDB or Grafana load.

Each stored table becomes one file of the same name; rows stream out in batches, so a 72 h run never sits in
memory whole. Every table with a time since the run's start (`t_s`, or `start_s` for windows) gains a `time`
column, the absolute ISO-8601 UTC time, for tools that plot against the clock. Columns: docs/export.md.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Boolean, Float, Integer, select

from soak.contracts import loads_summary
from soak.errors import ConfigError, StorageError
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
    ServerSample,
)
from soak.store.records import StoredRun
from soak.store.store import Store

FORMATS = ("csv", "parquet")
BATCH_ROWS = 20_000
PARQUET_EXTRA = "pip install 'soak[parquet]'"
# Stored tables exported as they are, in file order; latency histograms stay out (base64 HDR, no use in a table).
TABLES = (LatencyWindowRow, RequestWindowRow, ProcessSample, GpuSample, GpuProcessSample, ServerSample,
          MetricSample, EventRow, RequestRow)
LEFT_OUT = {"hist", "id"}
FINDING_COLUMNS = ("check", "verdict", "value", "unit", "ci_low", "ci_high", "threshold", "detection_limit",
                   "evidence")
RUN_COLUMNS = ("id", "status", "started_at", "ended_at", "duration_s", "planned_duration_s", "warmup_s", "window_s",
               "target_kind", "target_url", "model", "schedule_name", "fleet_id", "replica", "verdict",
               "verdict_reason", "labels",
               "environment", "out_dir")


@dataclass(frozen=True)
class Table:
    """One exported table: its file name, its columns with their kinds, and its rows (tuples in column order)
    in batches."""

    name: str
    columns: list[tuple[str, str]]  # (name, kind): kind is "int", "float", "bool", "text" or "time" (UTC)
    batches: Callable[[], Iterator[list[tuple[Any, ...]]]]


@dataclass(frozen=True)
class Exported:
    """What one export wrote: a file per table and its row count."""

    folder: Path
    files: list[tuple[Path, int]]


def _kind(column: Any) -> str:  # column: a SQLAlchemy Column
    if isinstance(column.type, Boolean):
        return "bool"
    if isinstance(column.type, Integer):
        return "int"
    return "float" if isinstance(column.type, Float) else "text"


def time_at(t0_epoch_s: float, offset_s: float | None) -> datetime | None:
    """The absolute UTC time `offset_s` after the run's start, to the millisecond."""
    if offset_s is None:
        return None
    return datetime.fromtimestamp(int((t0_epoch_s + offset_s) * 1000) / 1000, UTC)  # whole ms: Parquet's unit


def stored_table(store: Store, model: type, run: StoredRun) -> Table:
    """A stored table's rows of one run, with the absolute `time` column when it has a run-relative one."""
    columns = [column for column in model.__table__.columns if column.name not in LEFT_OUT]
    offset = next((name for name in ("t_s", "start_s", "intended_s") if name in model.__table__.columns), None)
    kinds = [(column.name, _kind(column)) for column in columns] + ([("time", "time")] if offset else [])
    order = [model.__table__.columns[name] for name in ("t_s", "window_index", "start_s", "intended_s")
             if name in model.__table__.columns][:1]
    query = select(*columns).where(model.run_id == run.id).order_by(*order)

    at = [column.name for column in columns].index(offset) if offset else None

    def batches() -> Iterator[list[tuple[Any, ...]]]:
        with store.engine.connect() as connection:  # streamed in batches: a 72 h run never sits in memory
            result = connection.execution_options(yield_per=BATCH_ROWS).execute(query)
            for part in result.partitions():
                if at is None:
                    yield [tuple(row) for row in part]
                else:
                    yield [(*row, time_at(run.t0_epoch_s, row[at])) for row in part]

    return Table(model.__tablename__, kinds, batches)


def finding_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per finding of a summary, its CI split into two columns."""
    rows = []
    for finding in summary.get("findings") or []:
        ci = finding.get("ci") if isinstance(finding.get("ci"), list) and len(finding["ci"]) == 2 else [None, None]
        rows.append({**{name: finding.get(name) for name in FINDING_COLUMNS}, "ci_low": ci[0], "ci_high": ci[1]})
    return rows


def findings_table(run: StoredRun) -> Table:
    """The findings of the run's stored summary (none for a run not yet finalised)."""
    summary = loads_summary(run.summary_json) or {}
    kinds = {"value": "float", "ci_low": "float", "ci_high": "float", "threshold": "float",
             "detection_limit": "float"}
    rows = [tuple(row[name] for name in FINDING_COLUMNS) for row in finding_rows(summary)]
    return Table("findings", [(name, kinds.get(name, "text")) for name in FINDING_COLUMNS],
                 lambda: iter([rows] if rows else []))


def run_table(run: StoredRun) -> Table:
    """The run itself as one row: identity, plan, outcome, labels and environment (both as JSON text)."""
    row = {name: getattr(run, name) for name in RUN_COLUMNS}
    row["labels"], row["environment"] = json.dumps(run.labels), json.dumps(run.environment)
    kinds = {"duration_s": "float", "planned_duration_s": "float", "warmup_s": "float", "window_s": "float"}
    return Table(Run.__tablename__, [(name, kinds.get(name, "text")) for name in RUN_COLUMNS],
                 lambda: iter([[tuple(row[name] for name in RUN_COLUMNS)]]))


def write_csv(table: Table, path: Path) -> int:
    """The table as CSV with a header row (empty cells for missing values); returns the row count."""
    has_time = bool(table.columns) and table.columns[-1][1] == "time"  # only ever the last column
    count = 0
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([name for name, _ in table.columns])
        for rows in table.batches():
            writer.writerows([(*row[:-1], _iso(row[-1])) for row in rows] if has_time else rows)
            count += len(rows)
    return count


def _iso(moment: datetime | None) -> str | None:
    """ISO-8601 UTC with milliseconds, which pandas and Grafana parse as it is."""
    return moment.isoformat(timespec="milliseconds") if moment else None


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401 - the writer lives in this submodule
    except ImportError:
        raise ConfigError(f"--format parquet needs pyarrow, which is not installed: {PARQUET_EXTRA}") from None
    return pyarrow


def write_parquet(table: Table, path: Path) -> int:
    """The table as one Parquet file with typed columns; returns the row count."""
    pa = _pyarrow()
    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "text": pa.string(),
             "time": pa.timestamp("ms", tz="UTC")}
    schema = pa.schema([(name, types[kind]) for name, kind in table.columns])
    count = 0
    with pa.parquet.ParquetWriter(path, schema) as writer:
        for rows in table.batches():
            columns = list(zip(*rows))
            writer.write_table(pa.Table.from_arrays(
                [pa.array(values, type=field.type) for values, field in zip(columns, schema)], schema=schema))
            count += len(rows)
    return count


def run_tables(store: Store, run: StoredRun) -> list[Table]:
    """Every table of one run, in file order: the run, its findings, then the stored tables."""
    return [run_table(run), findings_table(run), *(stored_table(store, model, run) for model in TABLES)]


def export_run(store: Store, run_id: str, folder: Path, fmt: str = "csv",
               on_table: Callable[[str], None] | None = None) -> Exported:
    """Write each table of `run_id` to `folder` as `<table>.<fmt>`; `on_table` hears each table's name first."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}: use csv or parquet")
    write = write_parquet if fmt == "parquet" else write_csv
    if fmt == "parquet":
        _pyarrow()  # say so before any file is written
    run = store.get_run(run_id)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the export folder {folder}: {exc.strerror or exc}") from None
    files = []
    for table in run_tables(store, run):
        if on_table:
            on_table(table.name)
        path = folder / f"{table.name}.{fmt}"
        try:
            files.append((path, write(table, path)))
        except OSError as exc:
            raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return Exported(folder, files)
