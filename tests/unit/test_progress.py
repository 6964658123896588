"""The live progress of `soak start` and the one `soak status` reads back agree, field for field."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import insert

from soak.contracts import Progress, Stage
from soak.run.conductor import Conductor
from soak.run.progress import read_progress
from soak.store import Store
from soak.store.models import Base
from soak.store.writer import columns
from soak.telemetry.latency import LatencyWindows

RUN_ID = "20261202T101500Z-3f9a"
WARMUP_S, WINDOW_S, DURATION_S, ELAPSED_S = 10.0, 5.0, 60.0, 30.0
RSS_BYTES = (300 << 20, 23 << 20)  # the server tree: two processes


def record(t0: float, t_s: float, error_class: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(scenario="chat", intended_t=t0 + t_s, ttft_ms=20.0 + t_s, itl_ms=(4.0, 5.0),
                           e2e_ms=200.0 + 10 * t_s, queue_ms=0.0, lag_ms=1.0, output_tokens=12, prompt_tokens=30,
                           error_class=error_class, expected_error=False)


def fed_windows(t0: float) -> LatencyWindows:
    """Requests every half second of the first 28 s (the warm-up included), two of them timing out."""
    windows = LatencyWindows(t0, WARMUP_S, WINDOW_S)
    for i in range(56):
        windows.add(record(t0, 0.5 * i, "timeout" if i in (5, 40) else None))
    return windows


def stored_run(tmp_path: Any, t0: float, windows: LatencyWindows) -> Any:
    """The same run as the database holds it: run row, flushed windows, one sample of the server tree."""
    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    tables = Base.metadata.tables
    started_at = datetime.fromtimestamp(t0, UTC).isoformat(timespec="milliseconds")
    latency, requests = windows.flush_windows(ELAPSED_S)
    with store.engine.begin() as connection:
        connection.execute(insert(tables["runs"]), [{
            "id": RUN_ID, "status": "running", "started_at": started_at, "t0_epoch_s": t0,
            "heartbeat_at": datetime.now(UTC).isoformat(timespec="milliseconds"),  # fresh: the run reads as running
            "planned_duration_s": DURATION_S, "warmup_s": WARMUP_S, "window_s": WINDOW_S, "out_dir": str(tmp_path),
            "target_kind": "reference", "config_json": "{}", "environment_json": "{}"}])
        connection.execute(insert(tables["latency_windows"]), [{"run_id": RUN_ID, **columns(w)} for w in latency])
        connection.execute(insert(tables["request_windows"]), [{"run_id": RUN_ID, **columns(w)} for w in requests])
        connection.execute(insert(tables["process_samples"]), [
            {"run_id": RUN_ID, "t_s": 29.0, "role": "server", "pid": 100 + i, "name": "srv", "rss_bytes": rss}
            for i, rss in enumerate(RSS_BYTES)])
    return store


def live_progress(t0: float, windows: LatencyWindows, tmp_path: Any) -> Progress:
    """What the conductor hands its progress printer, from the same requests and samples."""
    conductor = Conductor.__new__(Conductor)  # only the state _progress reads; nothing is started
    conductor.config = SimpleNamespace(warmup_s=WARMUP_S, duration_s=DURATION_S)
    conductor.state = SimpleNamespace(
        run_id=RUN_ID, run_dir=tmp_path, status="running", windows=windows, load=SimpleNamespace(in_flight=3),
        telemetry=SimpleNamespace(latest=SimpleNamespace(server_rss_bytes=sum(RSS_BYTES))))
    return conductor._progress(ELAPSED_S)


def _fields(progress: Progress | dict[str, Any]) -> dict[str, Any]:
    return progress if isinstance(progress, dict) else progress.model_dump()


def test_live_and_stored_progress_have_one_set_of_fields_and_agree(tmp_path):
    t0 = time.time() - ELAPSED_S
    windows = fed_windows(t0)
    live = _fields(live_progress(t0, windows, tmp_path))
    stored = _fields(read_progress(stored_run(tmp_path, t0, windows), RUN_ID))
    assert set(live) == set(stored)
    for name in ("run_id", "status", "stage", "duration_s", "requests", "errors", "server_rss_bytes"):
        assert live[name] == stored[name], name
    assert (live["stage"], live["requests"], live["errors"]) == (Stage.MEASURING, 36, 1)  # after warm-up only
    for name in ("elapsed_s", "remaining_s", "rate_rps"):
        assert stored[name] == pytest.approx(live[name], rel=0.05), name
    for metric in ("ttft", "e2e"):
        assert stored["p99_ms"][metric] == pytest.approx(live["p99_ms"][metric], abs=1e-3), metric


def test_status_prints_the_same_lines_as_before(tmp_path):
    from soak.run.progress import status_lines

    t0 = time.time() - ELAPSED_S
    progress = read_progress(stored_run(tmp_path, t0, fed_windows(t0)), RUN_ID)
    lines = dict(status_lines(progress))
    assert list(lines) == ["run", "status", "verdict", "elapsed", "remaining", "requests", "errors",
                           "p99_e2e_ms_since_warmup", "server_rss_mib", "heartbeat_at", "out_dir"]
    assert lines["verdict"] == "—" and lines["server_rss_mib"] == 323.0 and lines["requests"] == 36
