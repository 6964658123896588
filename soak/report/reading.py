"""Column-wise reads of the big sample tables straight into numpy arrays.

`Store.read_rows` builds one ORM object per row; a 72 h run at 1 Hz has about a million process
samples, which would take longer than the whole report may. Here a Core select is fetched as the DB-API's plain
tuples and turned into one float array per numeric column (NULL as NaN) and one object array per text column.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sqlalchemy import ColumnElement, String, Text, case, select

from soak.store.models import Base
from soak.store.store import Store

Columns = dict[str, np.ndarray]


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


def read_dicts(store: Store, model: type[Base], run_id: str) -> list[dict[str, object]]:
    """All of a run's rows of a small table (the windows) as plain dicts, without ORM objects."""
    table = model.__table__
    order = table.c.t_s if "t_s" in table.c else table.c.get("window_index")
    query = select(table).where(table.c.run_id == run_id)
    if order is not None:
        query = query.order_by(order)
    names = [column.name for column in table.columns]
    return [dict(zip(names, row)) for row in store.fetch(query)]
