"""A run's progress read back from the database (for `soak status`, from any process)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, select

from soak.store.models import ALL_SCENARIOS, ERROR_CLASSES, LatencyWindow, ProcessSample, RequestWindow
from soak.store.queries import get_run, reading
from soak.units import format_duration


def _latest_server_rss_bytes(engine: Engine, run_id: str) -> int | None:
    latest = select(func.max(ProcessSample.t_s)).where(ProcessSample.run_id == run_id,
                                                       ProcessSample.role == "server").scalar_subquery()
    query = select(ProcessSample).where(ProcessSample.run_id == run_id, ProcessSample.role == "server",
                                        ProcessSample.t_s == latest)
    with reading(engine) as rows:
        samples = rows(query)
    return sum(s.rss_bytes or 0 for s in samples) if samples else None


def _window_counts(engine: Engine, run_id: str) -> tuple[int, int, float | None]:
    """(requests, errors, P99 E2E ms of the newest window)."""
    with reading(engine) as rows:
        windows = rows(select(RequestWindow).where(RequestWindow.run_id == run_id,
                                                   RequestWindow.scenario == ALL_SCENARIOS))
        newest = rows(select(LatencyWindow).where(
            LatencyWindow.run_id == run_id, LatencyWindow.scenario == ALL_SCENARIOS, LatencyWindow.metric == "e2e"
        ).order_by(LatencyWindow.window_index.desc()).limit(1))
    requests = sum(w.requests for w in windows)
    errors = sum(getattr(w, "err_" + name) for w in windows for name in ERROR_CLASSES)
    return requests, errors, (newest[0].p99_ms if newest else None)


def read_progress(engine: Engine, run_id: str) -> dict[str, Any]:
    """Elapsed and remaining time, requests, errors, latest P99 and server memory of a run."""
    run = get_run(engine, run_id)
    started = datetime.fromisoformat(run["started_at"])
    end = datetime.fromisoformat(run["ended_at"]) if run["ended_at"] else datetime.now(UTC)
    elapsed_s = (end - started).total_seconds()
    requests, errors, p99_ms = _window_counts(engine, run_id)
    rss = _latest_server_rss_bytes(engine, run_id)
    return {
        "run": run_id, "status": run["status"], "verdict": run["verdict"] or "—",
        "elapsed": format_duration(elapsed_s),
        "remaining": format_duration(max(run["planned_duration_s"] - elapsed_s, 0)),
        "requests": requests, "errors": errors,
        "p99_e2e_ms_latest": None if p99_ms is None else round(p99_ms, 1),
        "server_rss_mib": None if rss is None else round(rss / 2**20, 1),
        "heartbeat_at": run["heartbeat_at"], "out_dir": run["out_dir"],
    }
