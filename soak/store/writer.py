"""The single batching writer of a process.

Rows are queued from any greenlet or thread (a deque append is atomic), and a real OS thread commits them in
batches, so an SQLite commit never blocks the gevent loop that sends the load. Under gevent the thread and its
sleep are taken from the unpatched modules. The typed records of `soak/samples.py` become rows here, the one place
that knows which table and columns each goes to.

When the database refuses commits, or a watched volume is full, that is a storage outage: the rows wait in memory
and are retried with a capped exponential backoff, and the outage is kept as a record (`Outage`) the run reports;
`exhausted` says once it has outgrown its `StorageBudget` (docs/robustness.md, "When the database fails").
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
from soak.store.volumes import VolumeWatch, is_disk_full

log = logging.getLogger(__name__)

DATABASE = "the database"  # what a watched volume holds, as its messages say
FIRST_RETRY_S, MAX_RETRY_S = 0.5, 10.0  # the backoff after a failed commit doubles from the first to the cap
FLUSH_RETRY_S = 1.0  # while someone waits for a flush (the end of a run), a failed commit is retried this often
DEFAULT_BUFFER_BYTES = 256 * 2**20
DEFAULT_OUTAGE_S = 1800.0


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


@dataclass(slots=True)
class _Op:
    kind: str  # "insert", "upsert" or "update_run"
    model: type[Base] | None
    row: dict[str, Any]
    seq: int = 0
    size: int = 0  # estimated bytes it holds in memory (`row_bytes`)


# A queued op beyond its row: the _Op itself and its deque slot.
_OP_BYTES = sys.getsizeof(_Op("insert", None, {})) + 8


def row_bytes(row: dict[str, Any]) -> int:
    """A cheap estimate of what one queued row holds in memory: the op, the dict and each value (None is shared)."""
    return _OP_BYTES + sys.getsizeof(row) + sum(sys.getsizeof(value) for value in row.values() if value is not None)


def retry_after_s(tries: int) -> float:
    """The wait after `tries` failed commits in a row: doubling from FIRST_RETRY_S, capped at MAX_RETRY_S."""
    return min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** min(max(tries - 1, 0), 16))


@dataclass(frozen=True)
class StorageBudget:
    """How much a storage outage may hold before the run gives up: rows' estimated memory, and its length."""

    max_bytes: int = DEFAULT_BUFFER_BYTES
    max_s: float = DEFAULT_OUTAGE_S


@dataclass
class Outage:
    """One storage outage: from the first refused commit (or full volume) to the commit that went through."""

    started_epoch_s: float
    reason: str
    ended_epoch_s: float | None = None
    rows_held: int = 0  # the most rows waiting at once (those the database took when it came back)
    bytes_held: int = 0  # their estimated memory
    volume: str | None = None  # the mount point, when a full volume was the cause
    last_error: str = ""  # the latest refusal (a locked database may turn into a full disk)


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

    def __init__(self, engine: Engine, interval_s: float = 0.25, on_failure: Callable[[str], None] | None = None,
                 budget: StorageBudget | None = None, volumes: VolumeWatch | None = None):
        self.engine = engine
        self.interval_s = interval_s
        self.on_failure = on_failure  # hears the first failure of each outage (from the writer thread)
        self.budget = budget or StorageBudget()
        self.volumes = volumes
        self.stats = WriterStats()
        self.outage: Outage | None = None  # the one under way
        self.outages: list[Outage] = []  # every one so far, the one under way last
        self._pending: deque[_Op] = deque()
        self._seq = 0
        self._done_seq = 0
        # Each counter has one writing thread (queued bytes: producers; committed: the writer), so none is lost.
        self._bytes_queued = 0
        self._bytes_done = 0
        self._tries = 0  # failed commits in a row
        self._retry_at = 0.0
        self._tried_at = 0.0
        self._flushing = False
        self._discard_to = 0  # rows up to this seq are given up on (`discard`)
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
        op.size = row_bytes(op.row)
        self._bytes_queued += op.size
        self._pending.append(op)
        self.stats.queued += 1

    @property
    def failed(self) -> bool:
        """True while the last commit attempt failed (rows are kept and retried)."""
        return self.stats.failure is not None

    @property
    def held_rows(self) -> int:
        """Rows queued and not committed yet."""
        return self._seq - self._done_seq

    @property
    def held_bytes(self) -> int:
        """The estimated memory of the rows not committed yet."""
        return self._bytes_queued - self._bytes_done

    @property
    def exhausted(self) -> str | None:
        """Why the outage under way has outgrown its budget (its length or its rows' memory), else None."""
        outage = self.outage
        if outage is None:
            return None
        lasted_s = time.time() - outage.started_epoch_s
        if lasted_s > self.budget.max_s:
            return f"it lasted {lasted_s:.1f} s, longer than the {self.budget.max_s:g} s allowed"
        if self.held_bytes > self.budget.max_bytes:
            return (f"the rows held took ~{self.held_bytes / 2**20:.1f} MiB, more than the "
                    f"{self.budget.max_bytes / 2**20:g} MiB allowed")
        return None

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued so far is committed; False when that did not happen in time. While it
        waits, a failing database is retried every FLUSH_RETRY_S rather than on the backoff."""
        target = self._seq
        deadline = time.monotonic() + timeout_s
        self._flushing = True
        try:
            while self._done_seq < target and time.monotonic() < deadline:
                time.sleep(0.01)  # cooperative under gevent; the writer thread does the work
        finally:
            self._flushing = False
        return self._done_seq >= target

    def discard(self) -> int:
        """Give up on every row not committed yet (the database stayed away past the end of the run): the writer
        thread drops them at its next turn. How many were given up."""
        lost = self.held_rows
        self._discard_to = self._seq
        return lost

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
                self._pause()
            self._drain_once()
        finally:
            self._stopped = True

    def _pause(self) -> None:
        """Sleep one interval, and on while a retry after a failure is not due yet."""
        _native_sleep(self.interval_s)
        while not self._stopping and time.monotonic() < self._next_try():
            _native_sleep(self.interval_s)

    def _next_try(self) -> float:
        if self._discard_to > self._done_seq:
            return 0.0
        if self._flushing:  # someone waits for these rows: the backoff gives way to a prompt retry
            return min(self._retry_at, self._tried_at + FLUSH_RETRY_S)
        return self._retry_at

    def _drain_once(self) -> None:
        self._drop_discarded()
        full = self.volumes.full() if self.volumes is not None else None
        if full is not None and full[0].holds == DATABASE:  # hold the rows rather than fail part way through
            self._hold(full[0].full_text(full[1]), time.time(), str(full[0].mount))
            return
        batch = self._take_batch()
        if not batch:
            return
        attempted_at = time.time()
        try:
            self._commit(batch)
        except (SQLAlchemyError, OSError) as exc:
            self._pending.extendleft(reversed(batch))  # keep them: nothing collected is lost
            self._hold(self._describe(exc), attempted_at, self._full_mount(exc))
            return
        self._committed(batch)
        if full is not None:  # the database takes rows, but the run's own files have no room
            self._note_outage(full[0].full_text(full[1]), attempted_at, str(full[0].mount))

    def _drop_discarded(self) -> None:
        if self._discard_to <= self._done_seq:
            return
        while self._pending and self._pending[0].seq <= self._discard_to:
            self._bytes_done += self._pending.popleft().size
        self._done_seq = self._discard_to

    def _committed(self, batch: list[_Op]) -> None:
        outage = self.outage
        if outage is not None:
            outage.rows_held = max(outage.rows_held, self.held_rows)
            outage.bytes_held = max(outage.bytes_held, self.held_bytes)
        self._done_seq = batch[-1].seq
        self._bytes_done += sum(op.size for op in batch)
        self.stats.committed += len(batch)
        self.stats.batches += 1
        self.stats.failure = None
        self._tries, self._retry_at = 0, 0.0
        if outage is not None and (self.volumes is None or self.volumes.full() is None):
            self._end_outage(outage)

    def _take_batch(self, limit: int = 50_000) -> list[_Op]:
        batch: list[_Op] = []
        while self._pending and len(batch) < limit:
            batch.append(self._pending.popleft())
        return batch

    def _describe(self, exc: Exception) -> str:
        """One line for a failed commit; a full disk names the database's volume."""
        text = " ".join(str(getattr(exc, "orig", None) or exc).split())
        volume = self.volumes.volume_of(DATABASE) if self.volumes is not None else None
        if volume is not None and is_disk_full(exc):
            return f"{volume.full_text()}: {text}"
        return f"cannot write to the database: {text}"

    def _full_mount(self, exc: Exception) -> str | None:
        volume = self.volumes.volume_of(DATABASE) if self.volumes is not None else None
        return str(volume.mount) if volume is not None and is_disk_full(exc) else None

    def _hold(self, message: str, since_epoch_s: float, volume: str | None) -> None:
        """A commit refused (or not tried, the database's volume being full): keep the rows, retry after a backoff."""
        self.stats.failure = message
        self.stats.failures += 1
        outage = self._note_outage(message, since_epoch_s, volume)
        outage.last_error, outage.volume = message, volume or outage.volume
        outage.rows_held = max(outage.rows_held, self.held_rows)
        outage.bytes_held = max(outage.bytes_held, self.held_bytes)
        self._tries += 1
        self._tried_at = time.monotonic()
        self._retry_at = self._tried_at + retry_after_s(self._tries)

    def _note_outage(self, message: str, since_epoch_s: float, volume: str | None) -> Outage:
        """The outage under way, begun now (logged once, `on_failure` told) when there was none."""
        if self.outage is not None:
            return self.outage
        self.outage = Outage(started_epoch_s=since_epoch_s, reason=message, volume=volume, last_error=message)
        self.outages.append(self.outage)
        log.error("storage outage: %s; rows are held in memory and retried", message)
        if self.on_failure:
            self.on_failure(message)
        return self.outage

    def _end_outage(self, outage: Outage) -> None:
        outage.ended_epoch_s = time.time()
        self.outage = None
        log.warning("storage outage over after %.1f s: %d rows held (~%.1f MiB) are being written",
                    outage.ended_epoch_s - outage.started_epoch_s, outage.rows_held, outage.bytes_held / 2**20)

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
