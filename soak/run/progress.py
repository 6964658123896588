"""A run's `Progress` read back from the database (for `soak status`, from any process).

The same fields, with the same meaning, as the live progress of `soak start` (soak.run.conductor): counts and
P99s cover the windows after the warm-up.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from soak.contracts import P99Ms, Progress, measured_rate_rps, stage_at
from soak.store.histograms import merged_percentiles
from soak.store.models import ALL_SCENARIOS, ERROR_CLASSES, LatencyWindowRow, ProcessSample, RequestWindowRow
from soak.store.store import Store
from soak.units import format_duration

PROGRESS_METRICS = tuple(P99Ms.model_fields)  # ttft, e2e


def _latest_server_rss_bytes(store: Store, run_id: str) -> int | None:
    latest = select(func.max(ProcessSample.t_s)).where(ProcessSample.run_id == run_id,
                                                       ProcessSample.role == "server").scalar_subquery()
    query = select(ProcessSample).where(ProcessSample.run_id == run_id, ProcessSample.role == "server",
                                        ProcessSample.t_s == latest)
    samples = store.scalars(query)
    return sum(s.rss_bytes or 0 for s in samples) if samples else None


def _measured_counts(store: Store, run_id: str) -> tuple[int, int]:
    """(requests, errors) of the windows after the warm-up."""
    windows = [row for row in store.read_rows(RequestWindowRow, run_id, scenario=ALL_SCENARIOS)
               if row.window_index >= 0]
    requests = sum(row.requests for row in windows)
    errors = sum(getattr(row, "err_" + name) for row in windows for name in ERROR_CLASSES)
    return requests, errors


def _measured_p99_ms(store: Store, run_id: str) -> P99Ms:
    """P99s of the merged histograms after the warm-up; 0.0 before the first sample, as the live line shows."""
    p99 = {}
    for metric in PROGRESS_METRICS:
        rows = store.read_rows(LatencyWindowRow, run_id, scenario=ALL_SCENARIOS, metric=metric)
        p99[metric] = merged_percentiles(row.hist for row in rows if row.window_index >= 0)["p99"] or 0.0
    return P99Ms(**p99)


def read_progress(store: Store, run_id: str) -> Progress:
    """Elapsed and remaining time, requests, errors, P99s and server memory of a run."""
    run = store.get_run(run_id)
    elapsed_s = run.elapsed_s()
    requests, errors = _measured_counts(store, run_id)
    return Progress(
        stage=stage_at(elapsed_s, run.warmup_s) if run.status == "running" else None,
        run_id=run_id, status=run.status, verdict=run.verdict, elapsed_s=elapsed_s,
        duration_s=run.planned_duration_s, remaining_s=max(run.planned_duration_s - elapsed_s, 0.0),
        requests=requests, errors=errors, rate_rps=measured_rate_rps(requests, elapsed_s, run.warmup_s),
        p99_ms=_measured_p99_ms(store, run_id), server_rss_bytes=_latest_server_rss_bytes(store, run_id),
        heartbeat_at=run.heartbeat_at, out_dir=run.out_dir,
    )


def status_lines(progress: Progress) -> list[tuple[str, Any]]:
    """The lines `soak status` prints: durations spelled out, memory in MiB, an open verdict as —."""
    rss, e2e = progress.server_rss_bytes, progress.p99_ms.e2e if progress.p99_ms else None
    return [
        ("run", progress.run_id), ("status", progress.status), ("verdict", progress.verdict or "—"),
        ("elapsed", format_duration(progress.elapsed_s or 0.0)),
        ("remaining", format_duration(progress.remaining_s or 0.0)),
        ("requests", progress.requests), ("errors", progress.errors),
        ("p99_e2e_ms_since_warmup", None if e2e is None else round(e2e, 1)),
        ("server_rss_mib", None if rss is None else round(rss / 2**20, 1)),
        ("heartbeat_at", progress.heartbeat_at), ("out_dir", progress.out_dir),
    ]
