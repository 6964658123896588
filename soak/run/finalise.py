"""Finalising a run from the database alone: analysis → verdict → summary.json → report.html.

Used at the end of `soak start`, by `soak close` for an aborted run, and by `soak report`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soak.contracts import Summary, SummaryFinding, Verdict, stored_summary
from soak.run.environment import dumps
from soak.run.summary import build_summary
from soak.store.models import Run
from soak.store.records import StoredRun
from soak.store.store import Store

if TYPE_CHECKING:
    from soak.analysis.baseline import BaselineComparison
    from soak.analysis.findings import Finding

log = logging.getLogger(__name__)


def analyse_stored_run(store: Store, run: StoredRun, stopped_early: bool, gates_file: Path | None
                       ) -> tuple[list[SummaryFinding], Verdict, str]:
    """(findings, overall verdict, reason) for a stored run."""
    from soak.analysis import analyse, load_gates, overall_verdict
    from soak.analysis.loader import load_run_data

    gates = load_gates(gates_file)
    data = load_run_data(store, run, stopped_early=stopped_early)
    findings = analyse(data, gates)
    verdict, reason = overall_verdict(findings, gates, stopped_early=stopped_early)
    return [SummaryFinding.model_validate(finding.to_dict()) for finding in findings], verdict, reason


def baseline_comparison(store: Store, summary: Summary, baseline_id: str | None, gates_file: Path | None
                        ) -> BaselineComparison | None:
    """Compare with a baseline run's stored summary; adds the `baseline.regression` finding."""
    if not baseline_id:
        return None
    from soak.analysis import compare_baseline, load_gates
    from soak.analysis.baseline import BaselineComparison

    baseline_run = store.get_run(baseline_id)
    if not baseline_run.summary_json:
        return BaselineComparison(baseline_id, note="the baseline run has no summary yet")
    finding, rows = compare_baseline(summary, stored_summary(baseline_run.summary_json, baseline_id), load_gates(gates_file))
    summary.findings.append(SummaryFinding.model_validate(finding.to_dict()))
    return BaselineComparison(baseline_id, tuple(rows))


def apply_baseline_verdict(summary: Summary, gates_file: Path | None = None, stopped_early: bool = False) -> None:
    """With a baseline, form the run's verdict again over every finding, `baseline.regression` included: its
    FAIL (`fail_on_regression`) fails the run, its SUSPECT holds back a PASS when it is required, and on a run
    whose client was late it reads INVALID like every check that compares what the client timed."""
    if summary.finding("baseline.regression") is None:
        return
    from soak.analysis import load_gates, overall_verdict
    from soak.analysis.saturation import scope_to_client

    findings = scope_to_client([_judged(finding) for finding in summary.findings])
    summary.findings = [_rescoped(original, scoped) for original, scoped in zip(summary.findings, findings, strict=True)]
    summary.verdict, summary.verdict_reason = overall_verdict(findings, load_gates(gates_file), stopped_early)


def _judged(finding: SummaryFinding) -> Finding:
    """A summary's finding as the verdict reads it: verdict, figures, sentences and details (its evidence
    records, which no verdict reads, left out)."""
    from soak.analysis.findings import Finding

    return Finding(check=finding.check, verdict=finding.verdict, value=finding.value, unit=finding.unit,
                   ci=None if finding.ci is None else tuple(finding.ci), threshold=finding.threshold,
                   evidence=finding.evidence, percentile_used=finding.percentile_used,
                   detection_limit=finding.detection_limit, next_step=finding.next_step,
                   details=dict(finding.details or {}))


def _rescoped(finding: SummaryFinding, scoped: Finding) -> SummaryFinding:
    """`finding` with what scoping to the client changed in `scoped`: its verdict, evidence, next step, details."""
    if scoped.verdict == finding.verdict:
        return finding
    return finding.model_copy(update={"verdict": scoped.verdict, "evidence": scoped.evidence,
                                      "next_step": scoped.next_step, "details": scoped.to_dict().get("details")})


def write_outputs(store: Store, run: StoredRun, summary: Summary, baseline: dict[str, Any] | None,
                  report_dir: Path | None = None) -> None:
    """report.html and summary.json in `report_dir`, by default the run's folder (the summary records
    where the report is)."""
    from soak.report import render_report

    run_dir = Path(report_dir or run.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    report_path = run_dir / "report.html"
    summary.report_html = str(report_path)
    render_report(store, run.id, summary, report_path, baseline=baseline)
    document = summary.to_json_dict()
    (run_dir / "summary.json").write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")


def store_verdict(store: Store, run_id: str, summary: Summary, status: str | None = None) -> None:
    """Save the verdict and summary in the run's row (directly: finalising happens after the writer closed)."""
    from sqlalchemy import update

    fields: dict[str, Any] = {"verdict": summary.verdict.value, "verdict_reason": summary.verdict_reason,
                              "summary_json": dumps(summary.to_json_dict())}
    if status:
        fields["status"] = status
    with store.writing() as session:
        session.execute(update(Run).where(Run.id == run_id).values(**fields))


def finalise_run(store: Store, run_id: str, stopped_early: bool, gates_file: Path | None = None,
                 baseline: str | None = None, status: str | None = None, report_dir: Path | None = None,
                 duration_s: float | None = None) -> Summary:
    """Analyse a stored run, write its summary and report, store the verdict; returns the summary.

    With `report_dir` the report and summary go there and the run's own record — its folder's
    summary.json and the verdict in the database — is left as it was. With `duration_s` the run is judged as that
    long (a run whose end its database never took).
    """
    run = store.get_run(run_id)
    if status:
        run = dataclasses.replace(run, status=status)
    if duration_s is not None:
        run = dataclasses.replace(run, duration_s=duration_s)
    findings, verdict, reason = analyse_stored_run(store, run, stopped_early, gates_file)
    summary = build_summary(run, store, findings, verdict, reason, report_html=None)
    comparison = baseline_comparison(store, summary, baseline, gates_file)
    apply_baseline_verdict(summary, gates_file, stopped_early)
    write_outputs(store, run, summary, comparison, report_dir)
    if report_dir is None:
        store_verdict(store, run_id, summary, status)
    return summary
