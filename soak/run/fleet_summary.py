"""A fleet run's verdict, summary.json and report, built from its replicas' stored runs and summaries alone.

Each replica's run was judged like any run; here the fleet compares them (`soak.analysis.fleet`: a replica
whose leak slope or P99 stands out among its peers' is SUSPECT) and takes the worst verdict, naming the replica.
Used at the end of a fleet `soak start` and by `soak report FLEET_RUN`.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from soak.analysis.fleet import FleetMetric, Outlier, fleet_outliers
from soak.config import ReplicaSpec, RunConfig
from soak.contracts import FleetOutlier, FleetSummary, ReplicaOutcome, Summary, Verdict, stored_summary
from soak.store.models import Run
from soak.store.records import StoredRun
from soak.store.store import Store

# Worst first: the fleet's verdict is the first of these any replica has.
SEVERITY = (Verdict.FAIL, Verdict.INVALID, Verdict.SUSPECT, Verdict.INCONCLUSIVE, Verdict.PASS)
LEAK_CHECK = "leak.rss"
LEAK_FLOOR_OF_THRESHOLD = 0.1  # a leak slope's spread floor: a tenth of the peers' median leak.rss threshold
LATENCY_RELATIVE_FLOOR = 0.1  # a P99's spread floor: a tenth of the peers' median P99 (so ≥ 1.35 × median)
LATENCY_ABSOLUTE_FLOOR_MS = 1.0
MIN_P99_SAMPLES = 100  # a P99 of fewer requests is little more than their maximum: not compared


def replica_outcome(spec: ReplicaSpec, run: StoredRun | None, start_error: str | None = None,
                    role: str = "replica") -> ReplicaOutcome:
    """The fleet table's row of one replica, from its run's stored summary; INVALID with the reason when it
    has no run or no summary."""
    summary = stored_summary(run.summary_json, run.id) if run is not None else None
    base = {"name": spec.name, "url": spec.url, "weight": spec.weight, "role": role, "run_id": run.id if run else None,
            "status": run.status if run else None}
    if summary is None:
        verdict, reason = Verdict.INVALID, (f"its run never opened: {start_error or 'soak could not start it'}"
                                            if run is None else f"run {run.id} has no summary (`soak close {run.id}` "
                                            "finalises it)")
        if run is not None and run.status == "running":
            verdict, reason = Verdict.INCONCLUSIVE, f"run {run.id} is still running"
        return ReplicaOutcome(**base, verdict=verdict, verdict_reason=reason, leak_slope=None,
                              leak_unit=None, ttft_p99_ms=None, e2e_p99_ms=None, latency_samples=None, requests=None, errors=None,
                              report_html=None)
    leak = summary.finding(LEAK_CHECK)
    return ReplicaOutcome(**base, verdict=summary.verdict, verdict_reason=summary.verdict_reason,
                          leak_slope=_number(leak.value) if leak else None, leak_unit=leak.unit if leak else None,
                          ttft_p99_ms=summary.latency_ms.ttft.p99, e2e_p99_ms=summary.latency_ms.e2e.p99,
                          latency_samples=min(summary.latency_ms.ttft.count, summary.latency_ms.e2e.count),
                          requests=summary.totals.requests, errors=summary.totals.errors,
                          report_html=summary.report_html)


def _number(value: float | int | None) -> float | None:
    return None if value is None else float(value)


def comparison_metrics(summaries: list[Summary]) -> list[tuple[FleetMetric, str]]:
    """What the fleet compares, with the ReplicaOutcome field each reads: leak.rss's slope (floor: a tenth of
    the median threshold), P99 TTFT and P99 E2E (floor: a tenth of the median P99)."""
    leaks = [s.finding(LEAK_CHECK) for s in summaries]
    thresholds = [float(f.threshold) for f in leaks if f is not None and f.threshold]
    unit = next((f.unit for f in leaks if f is not None), "")
    leak_floor = LEAK_FLOOR_OF_THRESHOLD * statistics.median(thresholds) if thresholds else 0.0
    return [(FleetMetric(f"{LEAK_CHECK} slope", unit, absolute_floor=leak_floor), "leak_slope"),
            (FleetMetric("P99 TTFT", "ms", LATENCY_RELATIVE_FLOOR, LATENCY_ABSOLUTE_FLOOR_MS), "ttft_p99_ms"),
            (FleetMetric("P99 E2E", "ms", LATENCY_RELATIVE_FLOOR, LATENCY_ABSOLUTE_FLOOR_MS), "e2e_p99_ms")]


def mark_outliers(outcomes: list[ReplicaOutcome], metrics: list[tuple[FleetMetric, str]]) -> list[ReplicaOutcome]:
    """Each outcome with its outliers among the replicas that have a summary; a PASS or INCONCLUSIVE replica
    with one becomes SUSPECT, saying which figure and by how much."""
    judged = [o for o in outcomes if o.requests is not None and o.role != "router"]  # replicas with a summary
    found: dict[str, list[Outlier]] = {}
    for metric, attribute in metrics:
        values = {o.name: getattr(o, attribute) for o in judged
                  if attribute == "leak_slope" or (o.latency_samples or 0) >= MIN_P99_SAMPLES}
        for outlier in fleet_outliers(values, metric):
            found.setdefault(outlier.replica, []).append(outlier)
    return [_with_outliers(outcome, found.get(outcome.name, [])) for outcome in outcomes]


def _with_outliers(outcome: ReplicaOutcome, outliers: list[Outlier]) -> ReplicaOutcome:
    if not outliers:
        return outcome
    rows = [FleetOutlier(metric=o.metric.name, value=o.value, median=o.median, robust_z=o.robust_z,
                         unit=o.metric.unit) for o in outliers]
    update: dict = {"outliers": rows}
    if outcome.verdict in (Verdict.PASS, Verdict.INCONCLUSIVE):
        update.update(verdict=Verdict.SUSPECT, verdict_reason=f"an outlier among its peers: {outliers[0].describe()}")
    return outcome.model_copy(update=update)


def fleet_verdict(outcomes: list[ReplicaOutcome]) -> tuple[Verdict, str]:
    """The worst replica verdict, and every replica that has it named with its reason."""
    worst = next((v for v in SEVERITY if any(o.verdict == v for o in outcomes)), Verdict.PASS)
    named = [o for o in outcomes if o.verdict == worst]
    if worst == Verdict.PASS:
        return worst, f"all {len(outcomes)} replicas PASS"
    reasons = "; ".join(f"{'router' if o.role == 'router' else 'replica ' + o.name}: {o.verdict_reason}"
                        for o in named)
    return worst, f"{len(named)} of {len(outcomes)} replicas {worst.value}: {reasons}"


def fleet_members(fleet: StoredRun) -> list[tuple[ReplicaSpec, str]]:
    """The runs a fleet was started with, each with its role: its router first when it had one (its stored
    config holds the replicas named and resolved)."""
    target = RunConfig.model_validate_json(fleet.config_json).target
    if not target.router:
        return [(spec, "replica") for spec in target.replicas]
    return [(spec, "router" if n == 0 else "observed") for n, spec in enumerate(target.members())]


def build_fleet_summary(store: Store, fleet: StoredRun, start_errors: dict[str, str] | None = None) -> FleetSummary:
    """The fleet's summary from its replicas' stored runs: outcomes, outliers, the worst verdict."""
    runs = {run.replica: run for run in store.fleet_runs(fleet.id)}
    outcomes = [replica_outcome(spec, runs.get(spec.name), (start_errors or {}).get(spec.name), role)
                for spec, role in fleet_members(fleet)]
    summaries = [stored_summary(run.summary_json, run.id) for run in runs.values() if run.summary_json]
    outcomes = mark_outliers(outcomes, comparison_metrics([s for s in summaries if s is not None]))
    verdict, reason = fleet_verdict(outcomes)
    return FleetSummary(fleet_id=fleet.id, status=fleet.status, started_at=fleet.started_at, ended_at=fleet.ended_at,
                        planned_duration_s=fleet.planned_duration_s, verdict=verdict, verdict_reason=reason,
                        replicas=outcomes, report_html=None)


def finalise_fleet(store: Store, fleet_id: str, start_errors: dict[str, str] | None = None,
                   report_dir: Path | None = None) -> FleetSummary:
    """Build the fleet's summary, write its report.html and summary.json (in its folder, or `report_dir`), and
    store its verdict (not with `report_dir`, like `finalise_run`)."""
    from soak.report.fleet import render_fleet_report

    fleet = store.get_run(fleet_id)
    summary = build_fleet_summary(store, fleet, start_errors)
    folder = Path(report_dir or fleet.out_dir)
    summary.report_html = str(render_fleet_report(summary, folder / "report.html", store))
    (folder / "summary.json").write_text(json.dumps(summary.to_json_dict(), indent=2) + "\n", encoding="utf-8")
    if report_dir is None:
        store_fleet_verdict(store, summary)
    return summary


def store_fleet_verdict(store: Store, summary: FleetSummary) -> None:
    """The fleet's verdict in its row; its summary stays in the file (the row's summary_json is a run's)."""
    from sqlalchemy import update

    with store.writing() as session:
        session.execute(update(Run).where(Run.id == summary.fleet_id)
                        .values(verdict=summary.verdict.value, verdict_reason=summary.verdict_reason))
