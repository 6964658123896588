"""Storage stage: the `Store` every stage holds (engine, single writer, queries), models and migrations."""

from soak.store.store import Store
from soak.store.writer import StoreWriter

__all__ = ["Store", "StoreWriter"]
