"""Column-wise reads of the big sample tables straight into numpy arrays.

`soak.store.queries.read_rows` builds one ORM object per row; a 72 h run at 1 Hz has about a million process
samples, which would take longer than the whole report may. Here a Core select returns plain tuples instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sqlalchemy import Engine, String, Text, select
from sqlalchemy.exc import SQLAlchemyError

from soak.errors import StorageError
from soak.store.models import Base

Columns = dict[str, np.ndarray]


def _is_text(column) -> bool:  # noqa: ANN001 - sqlalchemy Column
    return isinstance(column.type, (String, Text))


def _to_array(values: Sequence, text: bool) -> np.ndarray:
    """A text column as an object array; any other as float64 with NULL as NaN."""
    if text:
        return np.array(values, dtype=object)
    return np.array(values, dtype=float)


def read_columns(engine: Engine, model: type[Base], run_id: str, columns: Sequence[str], **equals: object) -> Columns:
    """The given columns of a run's rows of `model` (filtered by column equality), in time order, as arrays."""
    table = model.__table__
    query = select(*(table.c[name] for name in columns)).where(table.c.run_id == run_id)
    for name, value in equals.items():
        query = query.where(table.c[name] == value)
    if "t_s" in table.c:
        query = query.order_by(table.c.t_s)
    try:
        with engine.connect() as connection:
            rows = connection.execute(query).all()
    except SQLAlchemyError as exc:
        raise StorageError(f"cannot read the database: {getattr(exc, 'orig', None) or exc}") from None
    by_column = list(zip(*rows)) if rows else [() for _ in columns]
    return {name: _to_array(values, _is_text(table.c[name])) for name, values in zip(columns, by_column)}


def group_indices(*keys: np.ndarray) -> list[tuple[tuple, np.ndarray]]:
    """Row indices of each distinct combination of the key arrays, in order of first appearance."""
    if len(keys[0]) == 0:
        return []
    codes = [np.unique(key, return_inverse=True) for key in keys]
    combined = np.zeros(len(keys[0]), dtype=np.int64)
    for uniques, inverse in codes:
        combined = combined * len(uniques) + inverse
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    order = np.argsort(inverse, kind="stable")  # rows grouped, each group still in time order
    splits = np.split(order, np.cumsum(np.bincount(inverse))[:-1])
    groups = [(tuple(key[index[0]] for key in keys), index) for index in splits]
    return [groups[group] for group in np.argsort(first, kind="stable")]
