"""Storage stage: SQLAlchemy models, the single batching writer, and read queries."""

from soak.store.db import create_db_engine, migrate, open_database
from soak.store.writer import StoreWriter

__all__ = ["StoreWriter", "create_db_engine", "migrate", "open_database"]
