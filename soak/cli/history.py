"""`soak history`: a release series of runs, oldest first, with what changed from run to run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from soak.cli.common import location_options, open_store_or_none, print_json
from soak.cli.runs import label_option
from soak.errors import ConfigError

if TYPE_CHECKING:
    from soak.analysis.history import HistoryRow
    from soak.locations import Locations


@click.command()
@location_options
@label_option("Only runs with this label, e.g. model=llama-3-8b (repeatable: runs with all of them).")
@click.option("--check", "checks", metavar="CHECK", multiple=True,
              help="Show this check's verdict and value, e.g. leak.rss, or a family such as creep (repeatable; "
                   "default: the leak checks).")
@click.option("--limit", type=int, default=50, show_default=True, help="The newest this many runs.")
@click.option("--gates", metavar="FILE", type=click.Path(dir_okay=False),
              help="Gates file whose baseline tolerances mark a change regressed or within noise.")
@click.option("--html", "html_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also write the history as one self-contained HTML page with a chart per figure.")
@click.option("--json", "json_output", is_flag=True, help="Print the history as JSON.")
def history(locations: Locations, labels: dict[str, str], checks: tuple[str, ...], limit: int,
            gates: str | None, html_file: str | None, json_output: bool) -> None:
    """One row per run, oldest first: verdict, leak slopes, P99s, error rate, throughput, each with its change
    from the run before, and what changed in the environment (vLLM, torch, driver, model, serve args)."""
    from soak.analysis import load_gates
    from soak.analysis.history import build_history, from_stored

    store = open_store_or_none(locations)
    stored = store.list_runs(limit=limit, labels=labels)[::-1] if store else []
    try:
        rows = build_history([from_stored(run) for run in stored], load_gates(Path(gates) if gates else None), checks)
    except ValueError as exc:
        raise ConfigError(f"invalid --check: {exc}") from None
    if html_file:
        _write_html(rows, labels, Path(html_file))
    if json_output:
        print_json([row.to_dict() for row in rows])
    else:
        _print(rows)


def _write_html(rows: list[HistoryRow], labels: dict[str, str], path: Path) -> None:
    from soak.report.history import render_history

    click.echo(f"writing {path} ({len(rows)} runs)…", err=True)
    click.echo(f"history: {render_history(rows, labels, path)}", err=True)


def _print(rows: list[HistoryRow]) -> None:
    """The table, then each run's changed verdicts and environment."""
    from rich.console import Console
    from rich.table import Table

    from soak.report.history import cells, change_text, columns

    if not rows:
        click.echo("no runs match", err=True)
        return
    table = Table(title="soak history (oldest first; changes against the run before)")
    for index, column in enumerate(columns(rows)):
        table.add_column(column, no_wrap=index in (0, 3))  # run ids and labels stay whole, to be copied
    for row in rows:
        table.add_row(*[cell["text"] + (f"\n{cell['delta']}" if cell["delta"] else "") for cell in cells(row)])
    console = Console(width=200)
    console.print(table)
    for row in rows:
        changes = [f"{c.check} {c.baseline} → {c.current}" for c in row.verdict_changes]
        changes += [change_text(change) for change in row.environment_changes]
        if changes:
            console.print(f"{row.run.run_id} against {row.previous}: {'; '.join(changes)}", markup=False,
                          highlight=False)
