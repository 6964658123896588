"""The single batching writer of a process.

Rows are queued from any greenlet or thread (a deque append is atomic), and a real OS thread commits them in
batches, so an SQLite commit never blocks the gevent loop that sends the load. Under gevent the thread and its
sleep are taken from the unpatched modules. The typed records of `soak/samples.py` become rows here, the one place
that knows which table and columns each goes to.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, insert, update
from sqlalchemy.exc import SQLAlchemyError

from soak.errors import StorageError
from soak.samples import (
    GpuProcessReading,
    GpuReading,
    KeptRequest,
    LatencyWindow,
    MetricReading,
    ProcessReading,
    RequestWindow,
    Sample,
    ServerReading,
    Window,
)
from soak.store.models import (
    Base,
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

log = logging.getLogger(__name__)


def _original(module: str, name: str, default: Any) -> Any:
    """The unpatched object when gevent has monkey-patched `module`, else `default`."""
    if "gevent.monkey" in sys.modules and sys.modules["gevent.monkey"].is_module_patched(module):
        return sys.modules["gevent.monkey"].get_original(module, name)
    return default


def _native_sleep(seconds: float) -> None:
    _original("time", "sleep", time.sleep)(seconds)


def _start_native_thread(target: Callable[[], None]) -> None:
    import _thread

    _original("_thread", "start_new_thread", _thread.start_new_thread)(target, ())


# Each record of soak/samples.py → the table its rows go to.
TABLES: dict[type, type[Base]] = {
    ProcessReading: ProcessSample, GpuReading: GpuSample, GpuProcessReading: GpuProcessSample,
    ServerReading: ServerSample, MetricReading: MetricSample,
    LatencyWindow: LatencyWindowRow, RequestWindow: RequestWindowRow, KeptRequest: RequestRow,
}


def columns(record: Sample | Window | KeptRequest) -> dict[str, Any]:
    """A record's values by column of its table (a process's role beside its reading; a series' labels as JSON)."""
    if isinstance(record, ProcessReading):
        return {"role": record.role, **_fields(record.stats)}
    if isinstance(record, MetricReading):
        return {"name": record.name, "labels_json": json.dumps(record.labels, sort_keys=True), "value": record.value}
    return _fields(record)


def _fields(record: Any) -> dict[str, Any]:
    """A dataclass's fields by name, one level deep (no copy of the values, unlike `dataclasses.asdict`)."""
    return {item.name: getattr(record, item.name) for item in dataclasses.fields(record)}


@dataclass
class _Op:
    kind: str  # "insert", "upsert" or "update_run"
    model: type[Base] | None
    row: dict[str, Any]
    seq: int = 0


@dataclass
class WriterStats:
    """What the writer has done: rows queued and committed, and the last failure if any."""

    queued: int = 0
    committed: int = 0
    batches: int = 0
    failure: str | None = None
    failures: int = 0


class StoreWriter:
    """Queue rows from anywhere; one OS thread commits them every `interval_s` in one transaction."""

    def __init__(self, engine: Engine, interval_s: float = 0.25, on_failure: Callable[[str], None] | None = None):
        self.engine = engine
        self.interval_s = interval_s
        self.on_failure = on_failure
        self.stats = WriterStats()
        self._pending: deque[_Op] = deque()
        self._seq = 0
        self._done_seq = 0
        self._stopping = False
        self._stopped = False

    # -- producer side -------------------------------------------------------------------------
    def start(self) -> StoreWriter:
        """Start the writer thread."""
        _start_native_thread(self._loop)
        return self

    def insert(self, model: type[Base], row: dict[str, Any]) -> None:
        """Queue a plain insert."""
        self._enqueue(_Op("insert", model, row))

    def insert_sample(self, run_id: str, t_s: float, sample: Sample) -> None:
        """Queue a sample of a run, taken `t_s` seconds after its start, as a row of its table."""
        self.insert(TABLES[type(sample)], {"run_id": run_id, "t_s": t_s, **columns(sample)})

    def upsert_window(self, run_id: str, window: Window) -> None:
        """Queue a run's window, replacing the one stored with the same index, scenario (and metric)."""
        self._enqueue(_Op("upsert", TABLES[type(window)], {"run_id": run_id, **columns(window)}))

    def insert_request(self, run_id: str, request: KeptRequest) -> None:
        """Queue a kept request of a run."""
        self.insert(RequestRow, {"run_id": run_id, **columns(request)})

    def update_run(self, run_id: str, **fields: Any) -> None:
        """Queue an update of the run's row."""
        self._enqueue(_Op("update_run", Run, {"id": run_id, **fields}))

    def _enqueue(self, op: _Op) -> None:
        if self._stopped:
            raise StorageError("the database writer is closed")
        self._seq += 1
        op.seq = self._seq
        self._pending.append(op)
        self.stats.queued += 1

    @property
    def failed(self) -> bool:
        """True while the last commit attempt failed (rows are kept and retried)."""
        return self.stats.failure is not None

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued so far is committed; False when that did not happen in time."""
        target = self._seq
        deadline = time.monotonic() + timeout_s
        while self._done_seq < target and time.monotonic() < deadline:
            time.sleep(0.01)  # cooperative under gevent; the writer thread does the work
        return self._done_seq >= target

    def close(self, timeout_s: float = 10.0) -> bool:
        """Commit what is queued, stop the thread; False when rows could not be committed."""
        flushed = self.flush(timeout_s)
        self._stopping = True
        deadline = time.monotonic() + 2.0
        while not self._stopped and time.monotonic() < deadline:
            time.sleep(0.01)
        return flushed

    # -- writer thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stopping:
                self._drain_once()
                _native_sleep(self.interval_s)
            self._drain_once()
        finally:
            self._stopped = True

    def _drain_once(self) -> None:
        batch = self._take_batch()
        if not batch:
            return
        try:
            self._commit(batch)
        except (SQLAlchemyError, OSError) as exc:
            self._pending.extendleft(reversed(batch))  # keep them: nothing collected is lost
            self._record_failure(exc)
            return
        self._done_seq = batch[-1].seq
        self.stats.committed += len(batch)
        self.stats.batches += 1
        self.stats.failure = None

    def _take_batch(self, limit: int = 50_000) -> list[_Op]:
        batch: list[_Op] = []
        while self._pending and len(batch) < limit:
            batch.append(self._pending.popleft())
        return batch

    def _record_failure(self, exc: Exception) -> None:
        message = f"cannot write to the database: {getattr(exc, 'orig', None) or exc}"
        first = self.stats.failure is None
        self.stats.failure = message
        self.stats.failures += 1
        if first:
            log.error(message)
            if self.on_failure:
                self.on_failure(message)
        _native_sleep(min(5.0, 0.5 * self.stats.failures))

    def _commit(self, batch: list[_Op]) -> None:
        with self.engine.begin() as connection:
            for kind, model, rows in _group(batch):
                if kind == "insert":
                    connection.execute(insert(model), rows)
                elif kind == "upsert":
                    connection.execute(_upsert_statement(connection.dialect.name, model, list(rows[0])), rows)
                else:
                    for row in rows:
                        fields = {k: v for k, v in row.items() if k != "id"}
                        connection.execute(update(Run).where(Run.id == row["id"]).values(**fields))


def _group(batch: list[_Op]) -> list[tuple[str, type[Base], list[dict[str, Any]]]]:
    """Consecutive ops of the same kind, table and columns, in order, so they go out as one executemany."""
    groups: list[tuple[str, type[Base], list[dict[str, Any]]]] = []
    for op in batch:
        last = groups[-1] if groups else None
        if (last and last[0] == op.kind != "update_run" and last[1] is op.model
                and last[2][0].keys() == op.row.keys()):
            last[2].append(op.row)
        else:
            groups.append((op.kind, op.model, [op.row]))
    return groups


def _upsert_statement(dialect: str, model: type[Base], columns: list[str]):
    """INSERT … ON CONFLICT (primary key) DO UPDATE of `columns`, for SQLite and PostgreSQL.

    Values go in as executemany parameters, never into the statement: a statement built around each row's
    values would be cached by SQLAlchemy once per shape, holding those values (large histograms) alive.
    """
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    else:
        raise StorageError(f"database dialect {dialect!r} is not supported for window upserts")
    keys = [column.name for column in model.__table__.primary_key.columns]
    statement = dialect_insert(model)
    changes = {name: statement.excluded[name] for name in columns if name not in keys}
    return statement.on_conflict_do_update(index_elements=keys, set_=changes)
