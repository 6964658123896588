"""`soak export` and `soak prune`: take a run's tables out of the database, and age old runs out of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from soak.cli.common import location_options, print_json
from soak.cli.runs import label_option, labels_text

if TYPE_CHECKING:
    from soak.locations import Locations
    from soak.store import Store
    from soak.store.prune import PrunePlan, PruneResult
    from soak.store.records import StoredRun


@click.command()
@click.argument("run_id")
@location_options
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet", "openmetrics"]), default="csv", show_default=True,
              help="csv needs nothing more; parquet needs pyarrow (pip install 'soak[parquet]'); openmetrics writes one "
                   "RUN_ID.om.txt for `promtool tsdb create-blocks-from openmetrics` (docs/observability.md).")
@click.option("--export-dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Write the files here. Default: RUN_FOLDER/export. (--out says where runs are stored.)")
def export(run_id: str, locations: Locations, fmt: str, export_dir: str | None) -> None:
    """Write a run's windows, samples, events and findings as one CSV or Parquet file per table
    (columns: docs/export.md), or its series as one OpenMetrics file to backfill Prometheus with."""
    from soak.store import Store

    store = Store.open(locations, read_only=True)
    folder = Path(export_dir) if export_dir else Path(store.get_run(run_id).out_dir) / "export"
    if fmt == "openmetrics":
        _export_openmetrics(store, run_id, folder)
        return
    from soak.store.export import export_run

    exported = export_run(store, run_id, folder, fmt,
                          on_table=lambda name: click.echo(f"exporting {name}…", err=True))
    for path, rows in exported.files:
        click.echo(f"{rows:>9,} rows  {path}")


def _export_openmetrics(store: Store, run_id: str, folder: Path) -> None:
    """The run's series as one OpenMetrics file; each family's name on stderr as it is read, the file on stdout."""
    from soak.metrics.openmetrics import export_openmetrics

    exported = export_openmetrics(store, run_id, folder,
                                  on_family=lambda name: click.echo(f"exporting {name}…", err=True))
    click.echo(f"{exported.samples:>9,} samples  {exported.path}")


@click.command()
@location_options
@click.option("--older-than", "older_than", metavar="D", required=True,
              help="Delete runs started more than this long ago, e.g. 90d, 12h.")
@label_option("Keep runs with this label whatever their age, e.g. release=1.4.2 (repeatable: any of them).",
              flag="--keep-label")
@click.option("--dry-run", is_flag=True, help="Say what would be deleted and delete nothing.")
@click.option("--json", "json_output", is_flag=True, help="Print what was (or would be) deleted as JSON.")
def prune(locations: Locations, older_than: str, labels: dict[str, str], dry_run: bool, json_output: bool) -> None:
    """Delete old runs: every row they own and their folders, then VACUUM a SQLite database.

    A run still running is never touched, however old.
    """
    from soak.errors import MissingDatabaseError
    from soak.store import Store
    from soak.store.prune import plan_prune
    from soak.store.prune import prune as prune_runs
    from soak.units import parse_duration

    try:
        store = Store.open(locations, create=False, read_only=dry_run)
    except MissingDatabaseError:
        click.echo(f"nothing to prune: there is no database at {locations.db_url}", err=True)
        return
    plan = plan_prune(store, parse_duration(older_than), labels)
    result = None if dry_run else prune_runs(store, plan, say=lambda text: click.echo(text, err=True))
    if json_output:
        print_json(_prune_json(plan, result))
    else:
        _print_prune(plan, result)


def _run_line(run: StoredRun) -> str:
    return f"{run.id}  {run.status:<9}  {run.verdict or '—':<12}  {labels_text(run.labels)}".rstrip()


def _print_prune(plan: PrunePlan, result: PruneResult | None) -> None:
    gone = plan.delete if result is None else [run for run in plan.delete if run.id in result.deleted]
    verb = "would delete" if result is None else "deleted"
    click.echo(f"{verb} {len(gone)} runs started before {plan.cutoff}")
    for run in gone:
        click.echo(f"  {_run_line(run)}")
    for title, runs in (("kept, still running", plan.kept_running), ("kept, labelled", plan.kept_labelled)):
        for run in runs:
            click.echo(f"  {title}: {_run_line(run)}")
    if result and result.db_bytes_before is not None:
        click.echo(f"database {result.db_bytes_before / 2**20:.1f} MiB → {result.db_bytes_after / 2**20:.1f} MiB")


def _prune_json(plan: PrunePlan, result: PruneResult | None) -> dict[str, Any]:
    ids = lambda runs: [run.id for run in runs]  # noqa: E731 - a one-line helper
    return {"cutoff": plan.cutoff, "dry_run": result is None, "would_delete": ids(plan.delete),
            "deleted": result.deleted if result else [],
            "kept_running": ids(plan.kept_running), "kept_labelled": ids(plan.kept_labelled),
            "folders_removed": result.folders_removed if result else [],
            "db_bytes_before": result.db_bytes_before if result else None,
            "db_bytes_after": result.db_bytes_after if result else None,
            "vacuum_skipped_for": result.vacuum_skipped_for if result else []}
