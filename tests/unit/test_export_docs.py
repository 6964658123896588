"""docs/export.md lists every exported file and, for each, exactly the columns it has, with their types."""

from __future__ import annotations

import re
from pathlib import Path

from soak.store.export import TABLES, findings_table, run_table, stored_table
from support.records import stored_run

DOC = Path(__file__).resolve().parents[2] / "docs" / "export.md"
HEADING = re.compile(r"^### `(\w+)`")
ROW = re.compile(r"^\| `(\w+)` \| (\w+) \|")


def documented() -> dict[str, list[tuple[str, str]]]:
    tables: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if heading := HEADING.match(line):
            current = tables.setdefault(heading.group(1), [])
        elif (row := ROW.match(line)) and current is not None:
            current.append((row.group(1), row.group(2)))
    return tables


def exported() -> dict[str, list[tuple[str, str]]]:
    run = stored_run(id="r")
    tables = [run_table(run), findings_table(run), *(stored_table(None, model, run) for model in TABLES)]
    return {table.name: table.columns for table in tables}


def test_every_exported_column_is_documented_in_order_with_its_type():
    assert documented() == exported()
