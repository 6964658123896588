"""Opening the database: URL checks, SQLite pragmas (WAL, 5 s busy timeout) and Alembic migrations."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError

from soak.errors import ConfigError, MissingDatabaseError, StorageError

SQLITE_BUSY_TIMEOUT_MS = 5000


def _configure_sqlite(engine: Engine) -> None:
    """WAL with synchronous=NORMAL keeps a commit ≈0.3 ms; our own BEGIN makes DDL transactional too."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # dbapi_connection: a DB-API connection
        dbapi_connection.isolation_level = None  # let SQLAlchemy's "begin" event issue BEGIN
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        connection.exec_driver_sql("BEGIN")


def _prepare_sqlite_path(url) -> None:  # url: a SQLAlchemy URL
    if url.database and url.database != ":memory:":
        try:
            Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the folder of database {url.database}: {exc.strerror}") from None


def create_db_engine(db_url: str) -> Engine:
    """An Engine for `db_url`; a malformed URL or a missing driver is a ConfigError."""
    try:
        url = make_url(db_url)
        is_sqlite = url.get_backend_name() == "sqlite"
        if is_sqlite:
            _prepare_sqlite_path(url)
        engine = create_engine(url, future=True, pool_pre_ping=not is_sqlite)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(f"invalid database URL {db_url!r}: {exc}") from None
    except (NoSuchModuleError, ImportError) as exc:
        raise ConfigError(f"no driver for database URL {db_url!r}: {exc}") from None
    if is_sqlite:
        _configure_sqlite(engine)
    return engine


def alembic_config(engine: Engine):  # returns an alembic.config.Config
    """An Alembic config pointing at the migrations shipped in the package, bound to `engine`."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(importlib.resources.files("soak._migrations")))
    config.attributes["engine"] = engine
    return config


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision; each upgrade is recorded in the same transaction."""
    from alembic import command

    try:
        command.upgrade(alembic_config(engine), "head")
    except OperationalError as exc:
        raise StorageError(f"cannot open database {engine.url.render_as_string()}: {exc.orig}") from None
    except SQLAlchemyError as exc:
        raise StorageError(f"cannot migrate database {engine.url.render_as_string()}: {exc}") from None


def require_sqlite_file(db_url: str) -> None:
    """A MissingDatabaseError when `db_url` names a SQLite file that does not exist (other URLs pass)."""
    try:
        url = make_url(db_url)
    except (ArgumentError, ValueError):
        return  # create_db_engine words the bad URL
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return
    path = Path(url.database).expanduser()
    if not path.exists():
        raise MissingDatabaseError(f"no database at {path}: nothing to show yet (give --out or --db of your runs)")
