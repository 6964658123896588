"""Commands over stored runs: `runs`, `status`, `report`, `close`, `compare` (none of them imports Locust)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from soak.cli.common import VERDICT_EXIT, location_options, open_store_or_none, print_json
from soak.errors import ConfigError, UnknownRunError
from soak.units import format_duration

if TYPE_CHECKING:
    from soak.analysis.baseline import ComparisonRow
    from soak.contracts import Summary
    from soak.locations import Locations
    from soak.store import Store
    from soak.store.records import StoredRun


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*["—" if value is None else str(value) for value in row])
    Console(width=160).print(table)


def label_option(help_text: str, flag: str = "--label") -> Callable:
    """`flag` KEY=VALUE, repeatable, parsed into one `labels` dict (a malformed one is a ConfigError)."""

    def parse(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
        from soak.config import parse_labels

        try:
            return parse_labels(values)
        except ValueError as exc:
            raise ConfigError(f"invalid {flag}: {exc}") from None

    return click.option(flag, "labels", metavar="KEY=VALUE", multiple=True, callback=parse, help=help_text)


def labels_text(labels: dict[str, str]) -> str:
    """`gpu=h200 release=1.4.2`, or an empty string."""
    return " ".join(f"{key}={value}" for key, value in labels.items())


@click.command()
@location_options
@click.option("--limit", type=int, default=50, show_default=True, help="Show at most this many runs.")
@label_option("Only runs with this label (repeatable: runs with all of them).")
@click.option("--json", "json_output", is_flag=True, help="Print the runs as JSON.")
def runs(locations: Locations, limit: int, labels: dict[str, str], json_output: bool) -> None:
    """List runs, newest first, with status, verdict and labels."""
    store = open_store_or_none(locations)
    found = store.list_runs(limit=limit, labels=labels) if store else []
    if store is None and not json_output:
        click.echo(f"no runs yet: there is no database at {locations.db_url}", err=True)
    if json_output:
        print_json([{k: getattr(r, k) for k in ("id", "status", "verdict", "started_at", "ended_at", "duration_s",
                                                "target_kind", "model", "schedule_name", "out_dir", "labels", "fleet_id",
                                                "replica")}
                    for r in found])
        return
    _table("soak runs", ["run", "status", "verdict", "started (UTC)", "duration", "target", "model", "labels"], [
        [r.id, r.status, r.verdict, r.started_at[:19], _duration_text(r),
         _target_text(r), r.model, labels_text(r.labels)] for r in found])


def _target_text(run: StoredRun) -> str:
    """The target's kind; for a replica's run, which replica of which fleet."""
    return f"{run.target_kind}: {run.replica} of {run.fleet_id}" if run.fleet_id else run.target_kind


def _duration_text(run: StoredRun) -> str:
    """How long the run took, or for one still running how long it has run so far."""
    if run.status == "running" or run.duration_s is None:
        return f"{format_duration(run.elapsed_s())} so far"
    return format_duration(run.duration_s)


def _resolve_run_id(store: Store, run_id: str | None) -> str:
    run_id = run_id or store.latest_run_id()
    if run_id is None:
        raise UnknownRunError("there are no runs in this database yet")
    return run_id


@click.command()
@click.argument("run_id", required=False)
@location_options
@click.option("--json", "json_output", is_flag=True, help="Print the progress as JSON.")
def status(run_id: str | None, locations: Locations, json_output: bool) -> None:
    """Show a run's progress from the database (default: the newest run)."""
    from soak.run.progress import read_progress, status_lines
    from soak.store import Store

    store = Store.open(locations, read_only=True)
    progress = read_progress(store, _resolve_run_id(store, run_id))
    if json_output:
        print_json(progress.model_dump(mode="json"))
        return
    for key, value in status_lines(progress):
        click.echo(f"{key:>18}: {value}")


@click.command()
@click.argument("run_id")
@location_options
@click.option("--baseline", metavar="RUN", help="Add a before/after table against this run.")
@click.option("--gates", metavar="FILE", type=click.Path(dir_okay=False), help="Gates file (TOML).")
@click.option("--junit", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also write JUnit XML: a case for the run's verdict, then one per check.")
@click.option("--report-dir", metavar="DIR", type=click.Path(file_okay=False),
              help="Write report.html and summary.json here and leave the run's own files and stored verdict "
                   "as they are. Default: the run's folder, or RUN_FOLDER/vs-BASELINE with --baseline.")
@click.option("--json", "json_output", is_flag=True, help="Print summary.json to stdout.")
@click.option("--pdf", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also print the report to this PDF (needs Chromium; charts become static images).")
@click.option("--paper", type=click.Choice(["a4", "letter"]), help="Paper size of --pdf (default a4).")
def report(run_id: str, locations: Locations, baseline: str | None, gates: str | None, junit: str | None,
           report_dir: str | None, json_output: bool, pdf: str | None, paper: str | None) -> None:
    """Rebuild a run's report.html and summary.json from the database alone.

    --out/--db say where runs are stored, not where this report goes: use --report-dir for that.
    A report with --baseline goes to a vs-BASELINE folder inside the run's folder, so the run's own
    summary.json is never overwritten by a comparison. A run still under way gets
    report-in-progress.html and summary-in-progress.json, marked in progress; the run itself is left alone.
    """
    if paper and not pdf:
        raise click.UsageError("--paper goes with --pdf FILE")
    if _is_fleet(run_id, locations):
        _report_fleet(run_id, locations, report_dir, json_output, refused=[
            (baseline, "--baseline"), (junit, "--junit"), (pdf, "--pdf"), (gates, "--gates")])
        return
    if pdf:
        from soak.report.pdf import require_chromium

        require_chromium()  # before the analysis, so a missing browser fails at once
    summary = _finalise(run_id, locations, baseline, gates, close=False,
                        report_dir=Path(report_dir) if report_dir else None)
    if pdf:
        _print_pdf(summary, Path(pdf), paper or "a4")
    _emit(summary, junit, json_output, exit_with_verdict=False)


def _is_fleet(run_id: str, locations: Locations) -> bool:
    from soak.run.fleet import FLEET_KIND
    from soak.store import Store

    return Store.open(locations, read_only=True).get_run(run_id).target_kind == FLEET_KIND


def _report_fleet(run_id: str, locations: Locations, report_dir: str | None, json_output: bool,
                  refused: list[tuple[Any, str]]) -> None:
    """A fleet run's report and summary.json again, from its replicas' stored summaries."""
    from soak.cli.start import print_fleet_verdict
    from soak.run.fleet_summary import finalise_fleet
    from soak.store import Store

    flag = next((flag for value, flag in refused if value), None)
    if flag:
        raise ConfigError(f"run {run_id} is a fleet run: {flag} goes with `soak report` of one of its replicas' runs")
    store = Store.open(locations, create=False)
    if store.get_run(run_id).status == "running":
        raise ConfigError(f"fleet run {run_id} is still running: `soak report` of a replica's run shows it so far")
    fleet = finalise_fleet(store, run_id, report_dir=Path(report_dir) if report_dir else None)
    print_fleet_verdict(fleet)
    if json_output:
        print_json(fleet.to_json_dict())


def _print_pdf(summary: Summary, pdf: Path, paper: str) -> None:
    from soak.report.pdf import print_pdf

    click.echo(f"printing the report to {pdf} ({paper}) with headless Chromium…", err=True)
    print_pdf(Path(summary.report_html), pdf, paper)
    click.echo(f"pdf: {pdf}", err=True)


@click.command()
@click.argument("run_id")
@location_options
@click.option("--gates", metavar="FILE", type=click.Path(dir_okay=False), help="Gates file (TOML).")
@click.option("--json", "json_output", is_flag=True, help="Print summary.json to stdout.")
def close(run_id: str, locations: Locations, gates: str | None, json_output: bool) -> None:
    """Finalise an aborted run (analysis and report on what was collected); ends its left-behind server."""
    if _is_fleet(run_id, locations):
        raise ConfigError(f"run {run_id} is a fleet run: close its replicas' runs (`soak runs` lists them), then "
                          f"`soak report {run_id}`")
    summary = _finalise(run_id, locations, None, gates, close=True)
    _emit(summary, None, json_output, exit_with_verdict=True)


def _finalise(run_id: str, locations: Locations, baseline: str | None, gates: str | None,
              close: bool, report_dir: Path | None = None) -> Summary:
    from soak.run.finalise import finalise_run
    from soak.store import Store

    store = Store.open(locations, create=False)  # it stores the verdict, in a database that must exist
    run = store.get_run(run_id)
    if close:
        from soak.run.close import close_run

        return close_run(store, run, Path(gates) if gates else None)
    stopped_early = run.status != "completed"
    if baseline and report_dir is None:
        report_dir = Path(run.out_dir) / f"vs-{baseline}"
    if run.status == "running":
        from soak.run.in_progress import write_in_progress_report

        click.echo(f"run {run_id} is still running: an in-progress report of what is stored so far (the run "
                   "writes its own report when it ends)", err=True)
        return write_in_progress_report(store, run_id, Path(gates) if gates else None, baseline, report_dir)
    return finalise_run(store, run_id, stopped_early=stopped_early, gates_file=Path(gates) if gates else None,
                        baseline=baseline, report_dir=report_dir)


def _emit(summary: Summary, junit: str | None, json_output: bool, exit_with_verdict: bool) -> None:
    if junit:
        from soak.run.junit import write_junit

        write_junit(summary, Path(junit))
    click.echo(f"verdict: {summary.verdict} — {summary.verdict_reason}", err=True)
    click.echo(f"report: {summary.report_html}", err=True)
    if json_output:
        print_json(summary.to_json_dict())
    if exit_with_verdict:
        sys.exit(VERDICT_EXIT.get(summary.verdict, 3))


@click.command()
@click.argument("run_a")
@click.argument("run_b")
@location_options
@click.option("--gates", metavar="FILE", type=click.Path(dir_okay=False), help="Gates file with tolerances.")
@click.option("--json", "json_output", is_flag=True, help="Print the comparison as JSON.")
def compare(run_a: str, run_b: str, locations: Locations, gates: str | None, json_output: bool) -> None:
    """Compare run B against baseline run A: each key metric's delta, marked regressed/improved/within noise."""
    from soak.analysis import compare_baseline, load_gates
    from soak.contracts import stored_summary
    from soak.store import Store

    store = Store.open(locations, read_only=True)
    summaries = []
    for run_id in (run_a, run_b):
        run = store.get_run(run_id)
        if not run.summary_json:
            raise UnknownRunError(f"run {run_id} has no summary yet: finalise it with `soak close {run_id}`")
        summaries.append(stored_summary(run.summary_json, run.id))
    finding, rows = compare_baseline(summaries[1], summaries[0], load_gates(Path(gates) if gates else None))
    if json_output:
        print_json({"baseline": run_a, "current": run_b, "finding": finding.to_dict(),
                    "rows": [row.as_dict() for row in rows]})
        return
    _table(f"{run_b} against baseline {run_a}", ["metric", "unit", "baseline", "current", "delta", "tolerance",
                                                  "status"],
           [_compare_cells(r) for r in rows])
    click.echo(f"{finding.verdict}: {finding.evidence}")


def _compare_cells(row: ComparisonRow) -> list[Any]:
    """One table row of `soak compare`, numbers rounded to what they mean."""
    delta = None if row.delta_pct is None else f"{row.delta_pct:+.1f} %"
    return [row.name, row.unit, f"{row.baseline:.4g}", f"{row.current:.4g}", delta, row.tolerance_text, row.status]

