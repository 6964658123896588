"""Building `summary.json` (schema soak.run.summary/1) from the database and the findings."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from soak.store.models import ALL_SCENARIOS, ERROR_CLASSES, LatencyWindow, RequestWindow
from soak.store.queries import read_rows
from soak.telemetry.latency import decode_histogram, new_histogram

SCHEMA = "soak.run.summary/1"
SUMMARY_METRICS = ("ttft", "itl", "e2e")


def request_totals(engine: Engine, run_id: str) -> dict[str, Any]:
    """Requests, errors (cancelled and expected 4xx are not errors), error rate and output tokens."""
    rows = read_rows(engine, RequestWindow, run_id, scenario=ALL_SCENARIOS)
    requests = sum(row["requests"] for row in rows)
    errors = sum(row["err_" + name] for row in rows for name in ERROR_CLASSES)
    cancelled = sum(row["cancelled"] for row in rows)
    judged = requests - cancelled
    return {
        "requests": requests, "errors": errors, "error_rate": errors / judged if judged else 0.0,
        "output_tokens": sum(row["output_tokens"] for row in rows), "cancelled": cancelled,
        "errors_by_class": {name: sum(row["err_" + name] for row in rows) for name in ERROR_CLASSES},
    }


def merged_percentiles(windows: list[dict[str, Any]]) -> dict[str, float | None]:
    """P50/P95/P99 (ms) of the merged histograms of the given window rows."""
    merged = new_histogram()
    for row in windows:
        if row["hist"]:
            merged.add(decode_histogram(row["hist"]))
    if merged.get_total_count() == 0:
        return {"p50": None, "p95": None, "p99": None, "count": 0}
    return {f"p{p}": round(merged.get_value_at_percentile(p) / 1000.0, 3) for p in (50, 95, 99)} | {
        "count": merged.get_total_count()}


def latency_summary(engine: Engine, run_id: str) -> dict[str, dict[str, float | None]]:
    """Run-wide percentiles after warm-up, per metric."""
    result = {}
    for metric in SUMMARY_METRICS:
        rows = read_rows(engine, LatencyWindow, run_id, scenario=ALL_SCENARIOS, metric=metric)
        result[metric] = merged_percentiles([row for row in rows if row["window_index"] >= 0])
    return result


def build_summary(run: dict[str, Any], engine: Engine, findings: list[dict[str, Any]], verdict: str,
                  reason: str, report_html: str | None) -> dict[str, Any]:
    """The summary.json document (docs/summary.md)."""
    return {
        "schema": SCHEMA,
        "run_id": run["id"],
        "status": run["status"],
        "started_at": run["started_at"],
        "ended_at": run["ended_at"],
        "duration_s": run["duration_s"],
        "planned_duration_s": run["planned_duration_s"],
        "target": {"kind": run["target_kind"], "url": run["target_url"], "model": run["model"]},
        "verdict": verdict,
        "verdict_reason": reason,
        "findings": findings,
        "totals": request_totals(engine, run["id"]),
        "latency_ms": latency_summary(engine, run["id"]),
        "report_html": report_html,
    }
