"""The report of a run still under way: what is stored so far, marked in progress, without touching the run.

It only reads the database: it takes no lock, stores no verdict and changes no status, and it writes
`report-in-progress.html` and `summary-in-progress.json`, never the `report.html` and `summary.json` the run
writes when it ends. The live view (soak.web) renders the same summary.
"""

from __future__ import annotations

import json
from pathlib import Path

from soak.contracts import Summary
from soak.run.finalise import analyse_stored_run, apply_baseline_verdict, baseline_comparison
from soak.run.summary import build_summary
from soak.store.records import StoredRun
from soak.store.store import Store
from soak.units import format_duration

IN_PROGRESS_HTML = "report-in-progress.html"
IN_PROGRESS_JSON = "summary-in-progress.json"


def in_progress_summary(store: Store, run: StoredRun, gates_file: Path | None = None) -> Summary:
    """The summary of what a running run has stored so far, marked `in_progress`; its verdict is provisional.

    The checks judge the data as it stands (not as a run stopped early: the run has not stopped), and the
    reason says how far the run has got.
    """
    findings, verdict, reason = analyse_stored_run(store, run, stopped_early=False, gates_file=gates_file)
    summary = build_summary(run, store, findings, verdict, reason, report_html=None)
    summary.in_progress = True
    return summary


def mark_provisional(summary: Summary, run: StoredRun) -> None:
    """Prefix the verdict's reason with how far the run has got, so no one reads it as the final word."""
    so_far = f"{format_duration(run.elapsed_s())} of {format_duration(run.planned_duration_s)}"
    summary.verdict_reason = f"provisional, the run is in progress ({so_far}): {summary.verdict_reason}"


def write_in_progress_report(store: Store, run_id: str, gates_file: Path | None = None,
                             baseline: str | None = None, report_dir: Path | None = None) -> Summary:
    """Write report-in-progress.html and summary-in-progress.json of a running run (to `report_dir`, else the
    run's folder) and return the summary; the run's row and its own files are left as they are."""
    from soak.report import render_report
    from soak.report.render import write_atomically

    run = store.get_run(run_id)
    summary = in_progress_summary(store, run, gates_file)
    comparison = baseline_comparison(store, summary, baseline, gates_file)
    apply_baseline_verdict(summary, gates_file)
    mark_provisional(summary, run)
    folder = Path(report_dir or run.out_dir)
    summary.report_html = str(folder / IN_PROGRESS_HTML)
    render_report(store, run_id, summary, folder / IN_PROGRESS_HTML, baseline=comparison)
    write_atomically(json.dumps(summary.to_json_dict(), indent=2, default=str) + "\n", folder / IN_PROGRESS_JSON)
    return summary
