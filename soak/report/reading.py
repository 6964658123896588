"""What the report reads of a run: the big sample tables as numpy column arrays, the windows as typed records.

`Store.read_rows` builds one ORM object per row; a 72 h run at 1 Hz has about a million process
samples, which would take longer than the whole report may. Here a Core select is fetched as the DB-API's plain
tuples and turned into one float array per numeric column (NULL as NaN) and one object array per text column.

The window records (`LatencyWindow`, `RequestWindow`) are the ones the run wrote (`soak.samples`), each told here
which table holds it and built straight from the fetched tuples at this reading edge, without ORM objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import ClassVar, Self, TypeVar

import numpy as np
from sqlalchemy import ColumnElement, String, Text, case, select

from soak import samples
from soak.store.models import (
    Base,
    GpuProcessSample,
    GpuSample,
    LatencyWindowRow,
    ProcessSample,
    RequestWindowRow,
    ServerSample,
)
from soak.store.store import Store

Columns = dict[str, np.ndarray]  # column name → one value per row, in time order


def _is_text(column) -> bool:  # column: a SQLAlchemy Column
    return isinstance(column.type, (String, Text))


def _to_columns(rows: list[tuple], numeric: list[str], text: list[str]) -> Columns:
    """Split fetched rows (numeric columns first, then text) into arrays."""
    if not text:
        matrix = np.array(rows, dtype=float).reshape(len(rows), len(numeric))
    else:
        matrix = np.array([row[:len(numeric)] for row in rows], dtype=float).reshape(len(rows), len(numeric))
    columns = {name: matrix[:, i] for i, name in enumerate(numeric)}
    for k, name in enumerate(text, start=len(numeric)):
        columns[name] = np.array([row[k] for row in rows], dtype=object)
    return columns


def read_columns(store: Store, model: type[Base], run_id: str, columns: Sequence[str],
                 flags: dict[str, ColumnElement[bool]] | None = None, **equals: object) -> Columns:
    """The given columns of a run's rows of `model` (filtered by column equality), in time order, as arrays.

    `flags` adds 1.0/0.0 columns computed by the database (e.g. role == "server"), so one scan of a big table
    can serve several charts without reading a text column per row.
    """
    table = model.__table__
    numeric = [name for name in columns if not _is_text(table.c[name])]
    text = [name for name in columns if _is_text(table.c[name])]
    flag_columns = [case((condition, 1.0), else_=0.0).label(name) for name, condition in (flags or {}).items()]
    numeric_columns = [table.c[name] for name in numeric] + flag_columns
    numeric += list(flags or {})
    query = select(*numeric_columns, *(table.c[name] for name in text)).where(table.c.run_id == run_id)
    for name, value in equals.items():
        query = query.where(table.c[name] == value)
    if "t_s" in table.c:
        query = query.order_by(table.c.t_s)
    return _to_columns(store.fetch(query), numeric, text)


FEW_DISTINCT = 64  # up to this many distinct texts, vectorised comparisons beat a per-row dict


def factorize(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer codes of `values` (0, 1, … in order of first appearance) and how many distinct values there are.

    Text is coded without sorting (np.unique over a million Python strings takes seconds).
    """
    if values.dtype != object:
        uniques, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        rank = np.empty(len(uniques), dtype=np.int64)
        rank[np.argsort(first, kind="stable")] = np.arange(len(uniques))
        return rank[inverse.reshape(-1)], len(uniques)
    distinct = set(values.tolist())
    if len(distinct) <= FEW_DISTINCT:
        firsts = sorted((int(np.argmax(values == value)), value) for value in distinct)
        codes = np.zeros(len(values), dtype=np.int64)
        for code, (_, value) in enumerate(firsts[1:], start=1):
            codes[values == value] = code
        return codes, len(distinct)
    seen: dict[object, int] = {}
    codes = np.fromiter((seen.setdefault(value, len(seen)) for value in values), dtype=np.int64, count=len(values))
    return codes, len(seen)


def group_indices(*keys: np.ndarray) -> list[tuple[tuple, np.ndarray]]:
    """Row indices of each distinct combination of the key arrays, in order of first appearance."""
    if len(keys[0]) == 0:
        return []
    combined = np.zeros(len(keys[0]), dtype=np.int64)
    for key in keys:
        codes, count = factorize(key)
        combined = combined * count + codes
    codes, count = factorize(combined)
    order = np.argsort(codes, kind="stable")  # rows grouped, each group still in time order
    splits = np.split(order, np.cumsum(np.bincount(codes, minlength=count))[:-1])
    return [(tuple(key[index[0]] for key in keys), index) for index in splits]


@dataclass(frozen=True, slots=True)
class LatencyWindow(samples.LatencyWindow):
    """One `latency_windows` row as the report reads it (the run wrote it as `soak.samples.LatencyWindow`)."""

    MODEL: ClassVar[type[Base]] = LatencyWindowRow

    @classmethod
    def from_row(cls, row: Sequence[object]) -> Self:
        """The record of a fetched row holding this record's columns, in field order."""
        return cls(*row)  # type: ignore[arg-type]  # the select names exactly these columns


@dataclass(frozen=True, slots=True)
class RequestWindow(samples.RequestWindow):
    """One `request_windows` row as the report reads it (the run wrote it as `soak.samples.RequestWindow`)."""

    MODEL: ClassVar[type[Base]] = RequestWindowRow

    @classmethod
    def from_row(cls, row: Sequence[object]) -> Self:
        """The record of a fetched row holding this record's columns, in field order."""
        return cls(*row)  # type: ignore[arg-type]  # the select names exactly these columns


Window = TypeVar("Window", LatencyWindow, RequestWindow)


def read_windows(store: Store, record: type[Window], run_id: str) -> tuple[Window, ...]:
    """All of a run's rows of a window table as `record`s, in window order, without ORM objects."""
    table = record.MODEL.__table__
    names = [item.name for item in fields(record)]
    query = (select(*(table.c[name] for name in names)).where(table.c.run_id == run_id)
             .order_by(table.c.window_index))
    return tuple(record.from_row(row) for row in store.fetch(query))


@dataclass(frozen=True)
class RunSeries:
    """Everything the report draws of a run: the samples as column arrays, the windows as records."""

    server_procs: Columns  # the server tree's processes: t_s, pid, rss/pss/swap bytes, fds, cpu %, name
    client_procs: Columns  # soak's own processes, the same columns
    gpus: Columns  # per GPU: memory, temperature, power, throttle reasons, source, uuid
    gpu_procs: Columns  # VRAM held per GPU and pid
    server: Columns  # the server's gauges per scrape source: KV-cache usage, running, waiting
    latency_windows: tuple[LatencyWindow, ...]
    request_windows: tuple[RequestWindow, ...]

    def sample_columns(self) -> tuple[Columns, ...]:
        """The column arrays, each with its `t_s`."""
        return (self.server_procs, self.client_procs, self.gpus, self.gpu_procs, self.server)

    def last_s(self) -> float:
        """The latest time any sample or window reaches, 0 when there are none."""
        ends = [float(np.nanmax(columns["t_s"])) for columns in self.sample_columns() if len(columns["t_s"])]
        ends += [window.end_s for window in (*self.latency_windows, *self.request_windows)]
        return max(ends, default=0.0)


def split_rows(columns: Columns, mask: np.ndarray) -> Columns:
    """The rows of `columns` where `mask` holds."""
    return {name: values[mask] for name, values in columns.items()}


def read_data(store: Store, run_id: str) -> RunSeries:
    """The run's samples (as column arrays) and windows (as records)."""
    processes = read_columns(store, ProcessSample, run_id,
                             ("t_s", "pid", "rss_bytes", "pss_bytes", "swap_bytes", "fds", "cpu_percent", "name"),
                             flags={"is_server": ProcessSample.role == "server"})
    is_server = processes.pop("is_server") > 0  # one scan of the biggest table serves both roles
    return RunSeries(
        server_procs=split_rows(processes, is_server),
        client_procs=split_rows(processes, ~is_server),
        gpus=read_columns(store, GpuSample, run_id, ("t_s", "gpu_index", "mem_used_bytes", "mem_total_bytes",
                                                      "temp_c", "power_w", "throttle_reasons", "source", "uuid")),
        gpu_procs=read_columns(store, GpuProcessSample, run_id, ("t_s", "gpu_index", "pid", "used_bytes")),
        server=read_columns(store, ServerSample, run_id, ("t_s", "source", "kv_usage", "running", "waiting")),
        latency_windows=read_windows(store, LatencyWindow, run_id),
        request_windows=read_windows(store, RequestWindow, run_id),
    )
