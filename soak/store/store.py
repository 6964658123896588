"""The one object every stage holds for the database: it owns the engine and the run's single writer, and
answers the questions asked of stored runs.

Open it with `Store.open(url or Locations)`. Writing commands (`soak start`, `soak schedule add`) may create the
database; reading commands pass `read_only=True`: a missing database is then a MissingDatabaseError, never a new
empty file, and the store refuses to write (on SQLite the connections are query-only as well).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, event, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from soak.contracts import Event
from soak.errors import StorageError, UnknownRunError
from soak.locations import Locations
from soak.store.db import create_db_engine, migrate, require_sqlite_file
from soak.store.models import Base, EventRow, Run, RunLabel
from soak.store.queries import effective_status, with_labels
from soak.store.records import StoredRun, event_from_row
from soak.store.volumes import Volume, VolumeWatch
from soak.store.writer import DATABASE, StorageBudget, StoreWriter

LABEL_BATCH = 500  # run ids per IN (…): under every database's bound-parameter limit

Row = TypeVar("Row", bound=Base)


class Store:
    """One database: its engine, its writer (started on first use), and the reads and short writes on it."""

    def __init__(self, engine: Engine, *, read_only: bool = False):
        self.engine = engine
        self.read_only = read_only
        self._writer: StoreWriter | None = None

    @classmethod
    def open(cls, where: str | Locations, *, create: bool = True, read_only: bool = False) -> Store:
        """The store at a database URL or at `Locations`' database, its schema brought up to date.

        `read_only` (the reading commands) implies `create=False`: a SQLite file that does not exist is a
        MissingDatabaseError. An existing older database is still migrated, so it stays readable.
        """
        db_url = where.db_url if isinstance(where, Locations) else where
        if read_only or not create:
            require_sqlite_file(db_url)
        engine = create_db_engine(db_url)
        migrate(engine)
        if read_only and engine.dialect.name == "sqlite":
            engine.dispose()  # the migration's connections may write; the ones from now on may not
            event.listen(engine, "connect", _query_only)
        return cls(engine, read_only=read_only)

    @property
    def url(self) -> str:
        """The database URL, password hidden (what messages name)."""
        return self.engine.url.render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        """"sqlite" or "postgresql"."""
        return self.engine.dialect.name

    # -- lifetime --------------------------------------------------------------------------------------
    def writer(self, on_failure: Callable[[str], None] | None = None, budget: StorageBudget | None = None,
               files_at: Path | None = None) -> StoreWriter:
        """The process's single batching writer, started on the first call. What is given then holds for it:
        `on_failure` hears the first failure of each storage outage, `budget` bounds what an outage may hold, and
        the volumes of a SQLite database and of `files_at` (a run's folder) are watched for a full disk."""
        self._refuse_writes()
        if self._writer is None:
            self._writer = StoreWriter(self.engine, on_failure=on_failure, budget=budget,
                                       volumes=self._volumes(files_at)).start()
        return self._writer

    def _volumes(self, files_at: Path | None) -> VolumeWatch | None:
        """The volumes to watch: the SQLite file's folder first (a full one stops commits), then the run's files."""
        database = self.engine.url.database
        volumes = [Volume.of(Path(database).expanduser().parent, DATABASE)] if (
            self.dialect == "sqlite" and database and database != ":memory:") else []
        if files_at is not None:
            volumes.append(Volume.of(files_at, "the run's files"))
        return VolumeWatch(volumes) if volumes else None

    def close(self) -> bool:
        """Commit what the writer holds, stop it, release the connections; False when rows were left."""
        committed = self._writer.close() if self._writer is not None else True
        self.engine.dispose()
        return committed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------------------
    def scalars(self, query) -> list[Any]:  # query: a select of a model
        """The model objects a select returns, from a short session; database errors become StorageError."""
        try:
            with Session(self.engine) as session:
                return list(session.scalars(query))
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot read the database: {getattr(exc, 'orig', None) or exc}") from None

    def fetch(self, query) -> list[tuple]:  # query: a Core select of columns
        """All rows of a select as the driver's plain tuples (no SQLAlchemy Row objects: they cost ~2 µs each)."""
        try:
            with self.engine.connect() as connection:
                result = connection.execute(query)
                rows = result.cursor.fetchall() if result.cursor is not None else []
                result.close()
                return rows
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot read the database: {getattr(exc, 'orig', None) or exc}") from None

    def runs(self, query) -> list[StoredRun]:  # query: a select of Run
        """The runs a select of `Run` finds, each with its labels and effective status."""
        rows = self.scalars(query)
        labels_of = self.run_labels([row.id for row in rows])
        return [StoredRun.from_row(row, labels_of[row.id], effective_status(row)) for row in rows]

    def list_runs(self, limit: int | None = None, labels: dict[str, str] | None = None) -> list[StoredRun]:
        """Runs, newest first; with `labels`, only the runs carrying all of them."""
        query = with_labels(select(Run).order_by(Run.id.desc()), labels)
        return self.runs(query.limit(limit) if limit else query)

    def fleet_runs(self, fleet_id: str) -> list[StoredRun]:
        """The replica runs of a fleet run, oldest first."""
        return self.runs(select(Run).where(Run.fleet_id == fleet_id).order_by(Run.id))

    def get_run(self, run_id: str) -> StoredRun:
        """One run; UnknownRunError when there is none."""
        found = self.runs(select(Run).where(Run.id == run_id))
        if not found:
            raise UnknownRunError(f"unknown run id {run_id!r} in {self.url}")
        return found[0]

    def latest_run_id(self) -> str | None:
        """The id of the newest run, or None."""
        runs = self.list_runs(limit=1)
        return runs[0].id if runs else None

    def run_labels(self, run_ids: list[str]) -> dict[str, dict[str, str]]:
        """run id → its labels (sorted by key), for the given runs."""
        found: dict[str, dict[str, str]] = {run_id: {} for run_id in run_ids}
        for start in range(0, len(run_ids), LABEL_BATCH):
            query = (select(RunLabel).where(RunLabel.run_id.in_(run_ids[start:start + LABEL_BATCH]))
                     .order_by(RunLabel.key))
            for label in self.scalars(query):
                found[label.run_id][label.key] = label.value
        return found

    def read_rows(self, model: type[Row], run_id: str, **equals: Any) -> list[Row]:
        """All rows of `model` for a run (optionally filtered by column equality), in time order when it has
        t_s (window order when it has window_index).

        The rows are the model's own instances, detached: every column is loaded and the session is closed, so
        reading an attribute never goes back to the database, and changing one writes nothing.
        """
        query = select(model).where(model.run_id == run_id)
        for name, value in equals.items():
            query = query.where(getattr(model, name) == value)
        order = getattr(model, "t_s", None) or getattr(model, "window_index", None)
        if order is not None:
            query = query.order_by(order)
        return self.scalars(query)

    def read_events(self, run_id: str) -> list[Event]:
        """A run's events in time order."""
        query = select(EventRow).where(EventRow.run_id == run_id).order_by(EventRow.t_s, EventRow.id)
        return [event_from_row(row) for row in self.scalars(query)]

    # -- writing outside a run's writer ----------------------------------------------------------------
    @contextmanager
    def writing(self) -> Iterator[Session]:
        """A short write transaction (verdicts, schedules, deletions); database errors become StorageError."""
        self._refuse_writes()
        try:
            with Session(self.engine) as session, session.begin():
                yield session
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot write the database: {getattr(exc, 'orig', None) or exc}") from None

    def size_bytes(self) -> int | None:
        """The SQLite database's size on disk with its WAL; None for another database."""
        database = self.engine.url.database
        if self.dialect != "sqlite" or not database or database == ":memory:":
            return None
        return sum(Path(database + suffix).stat().st_size for suffix in ("", "-wal")
                   if Path(database + suffix).exists())

    def vacuum(self) -> None:
        """Give deleted pages back to the file system: VACUUM, then truncate the WAL (SQLite only)."""
        self._refuse_writes()
        if self.dialect != "sqlite":
            return
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            cursor.execute("VACUUM")  # outside any transaction: the connection runs in autocommit (see db.py)
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cursor.close()
        except Exception as exc:  # a DB-API error of the driver
            raise StorageError(f"runs are deleted but VACUUM failed: {exc}") from None
        finally:
            connection.close()

    def _refuse_writes(self) -> None:
        if self.read_only:
            raise StorageError(f"the database {self.url} is open read-only")


def _query_only(dbapi_connection, _record) -> None:  # dbapi_connection: a sqlite3 connection
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()
