"""Pieces every `soak` command shares: location options, opening the store, JSON output, verdict exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

VERDICT_EXIT = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3, "INVALID": 3}


def location_options(command):  # noqa: ANN001, ANN201 - click decorator
    """--db and --out, resolved the same way by every command."""
    command = click.option("--db", "db", metavar="URL", help="Database URL (default sqlite:///<out>/soak.db; "
                           "env SOAK_DB).")(command)
    return click.option("--out", "out", metavar="DIR", type=click.Path(file_okay=False),
                        help="Output folder (default ./soak-runs; env SOAK_OUT).")(command)


def open_store(out: str | None, db: str | None, config: str | None = None):  # noqa: ANN201 - Engine
    """Open the database the way `soak start` would resolve it."""
    from soak.config import merge_layers, read_config_file, read_environment, resolve_paths
    from soak.store import open_database

    file_layer = read_config_file(Path(config)) if config else {}
    flat = merge_layers(file_layer, read_environment(), {"out": out, "db": db})
    _, db_url = resolve_paths(flat)
    return open_database(db_url)



def print_json(value: Any) -> None:
    """JSON to stdout (progress and errors go to stderr)."""
    click.echo(json.dumps(value, indent=2, default=str))
