"""Labels, export and prune on a real SQLite database whose runs are written through the models.

A "running" run is one whose soak PID is alive on this host: the test process itself. A dead PID is that of a
child process that has already exited.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select, update

from soak.errors import ConfigError
from soak.store import Store
from soak.store.export import export_run
from soak.store.models import EventRow, ProcessSample, Run, RunLabel
from soak.store.prune import plan_prune, prune

pytestmark = pytest.mark.timeout(120)
NOW = datetime.now(UTC)
SAMPLES = 2000


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)
    return child.pid


def add_run(store, out: Path, run_id: str, age: timedelta, pid: int, labels: dict[str, str],
            summary: dict | None = None) -> Path:
    """A run row started `age` ago, its labels, events and process samples, and its folder with a file."""
    folder = out / run_id
    folder.mkdir(parents=True)
    (folder / "report.html").write_text("<html></html>")
    started = NOW - age
    with store.engine.begin() as connection:
        connection.execute(insert(Run), [{
            "id": run_id, "status": "running" if pid == os.getpid() else "completed",
            "started_at": started.isoformat(), "t0_epoch_s": started.timestamp(), "planned_duration_s": 60.0,
            "duration_s": 60.0, "warmup_s": 10.0, "window_s": 5.0, "soak_pid": pid, "out_dir": str(folder),
            "target_kind": "reference", "model": "soak-reference", "config_json": "{}",
            "environment_json": json.dumps({"host": socket.gethostname()}),
            "summary_json": json.dumps(summary) if summary else None, "verdict": "PASS"}])
        if labels:
            connection.execute(insert(RunLabel), [{"run_id": run_id, "key": k, "value": v} for k, v in labels.items()])
        connection.execute(insert(EventRow), [{"run_id": run_id, "t_s": 1.0, "at": started.isoformat(),
                                               "kind": "server_start", "message": "a, \"quoted\"\nline",
                                               "data_json": json.dumps({"pid": 1})}])
        connection.execute(insert(ProcessSample), [
            {"run_id": run_id, "t_s": float(i), "role": "server", "pid": 10, "ppid": None, "name": "python",
             "rss_bytes": 2**30 + i, "pss_bytes": None, "uss_bytes": None, "fds": 7, "threads": 3,
             "cpu_percent": 1.5} for i in range(SAMPLES)])
    return folder


@pytest.fixture
def store(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    summary = {"findings": [{"check": "leak.rss", "verdict": "PASS", "value": 1.5, "unit": "bytes/h",
                             "ci": [0.5, 2.5], "threshold": 10, "evidence": "flat, \"quoted\""}]}
    folders = {
        "old": add_run(store, tmp_path, "20260101T000000Z-0001", timedelta(days=120), dead_pid(),
                       {"release": "1.4.1", "model": "m"}, summary),
        "old_kept": add_run(store, tmp_path, "20260102T000000Z-0002", timedelta(days=100), dead_pid(),
                            {"release": "1.4.2", "model": "m"}),
        "old_running": add_run(store, tmp_path, "20260103T000000Z-0003", timedelta(days=95), os.getpid(), {}),
        "new": add_run(store, tmp_path, "20261201T000000Z-0004", timedelta(days=2), dead_pid(), {"model": "m"}),
    }
    return store, folders


def test_runs_filter_on_every_label_given(store):
    store, _ = store
    ids = lambda labels: [run.id for run in store.list_runs(labels=labels)]  # noqa: E731
    assert ids({"model": "m"}) == ["20261201T000000Z-0004", "20260102T000000Z-0002", "20260101T000000Z-0001"]
    assert ids({"model": "m", "release": "1.4.1"}) == ["20260101T000000Z-0001"]
    assert ids({"model": "other"}) == []
    assert store.get_run("20260102T000000Z-0002").labels == {"model": "m", "release": "1.4.2"}


def test_prune_plan_keeps_the_running_and_labelled_runs(store):
    store, _ = store
    plan = plan_prune(store, 90 * 86400, {"release": "1.4.2"})
    assert [run.id for run in plan.delete] == ["20260101T000000Z-0001"]
    assert [run.id for run in plan.kept_running] == ["20260103T000000Z-0003"]
    assert [run.id for run in plan.kept_labelled] == ["20260102T000000Z-0002"]


def test_prune_deletes_every_row_and_the_folder_and_gives_the_space_back(store):
    store, folders = store
    with store.engine.begin() as connection:  # no run writing now, so the VACUUM goes ahead (the next test: skipped)
        connection.execute(update(Run).where(Run.id == "20260103T000000Z-0003").values(status="completed"))
    before = store.size_bytes()
    result = prune(store, plan_prune(store, 90 * 86400))
    assert result.deleted == ["20260101T000000Z-0001", "20260102T000000Z-0002", "20260103T000000Z-0003"]
    assert not folders["old"].exists() and not folders["old_kept"].exists() and not folders["old_running"].exists()
    assert folders["new"].exists()
    with store.engine.connect() as connection:
        for model in (ProcessSample, EventRow, RunLabel):
            left = connection.execute(select(model.run_id).distinct()).scalars().all()
            assert "20260101T000000Z-0001" not in left and "20260102T000000Z-0002" not in left
        assert connection.execute(select(func.count()).select_from(Run)).scalar() == 1
    assert result.db_bytes_before == before and result.db_bytes_after < before
    assert result.vacuum_skipped_for == []


def test_prune_skips_the_vacuum_while_a_run_is_writing_and_says_so(store):
    store, folders = store
    said: list[str] = []
    result = prune(store, plan_prune(store, 90 * 86400), say=said.append)
    assert result.deleted == ["20260101T000000Z-0001", "20260102T000000Z-0002"] and folders["old_running"].exists()
    assert result.vacuum_skipped_for == ["20260103T000000Z-0003"]
    assert any(line.startswith("VACUUM skipped: run 20260103T000000Z-0003 is writing") for line in said), said
    assert not any("(VACUUM)" in line for line in said)


def test_export_csv_reads_back_with_the_stored_values(store, tmp_path):
    store, _ = store
    exported = export_run(store, "20260101T000000Z-0001", tmp_path / "csv", "csv")
    assert {path.name for path, _ in exported.files} >= {"runs.csv", "findings.csv", "process_samples.csv",
                                                         "events.csv", "latency_windows.csv", "request_windows.csv"}
    with open(tmp_path / "csv" / "process_samples.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == SAMPLES and int(rows[-1]["rss_bytes"]) == 2**30 + SAMPLES - 1
    assert rows[0]["pss_bytes"] == "" and datetime.fromisoformat(rows[1]["time"]).tzinfo is not None
    with open(tmp_path / "csv" / "events.csv", newline="") as handle:
        assert next(csv.DictReader(handle))["message"] == "a, \"quoted\"\nline"
    with open(tmp_path / "csv" / "findings.csv", newline="") as handle:
        finding = next(csv.DictReader(handle))
    assert (finding["check"], float(finding["ci_low"]), finding["evidence"]) == ("leak.rss", 0.5, "flat, \"quoted\"")
    with open(tmp_path / "csv" / "runs.csv", newline="") as handle:
        assert json.loads(next(csv.DictReader(handle))["labels"]) == {"model": "m", "release": "1.4.1"}


def test_export_parquet_keeps_types(store, tmp_path):
    parquet = pytest.importorskip("pyarrow.parquet")
    store, _ = store
    export_run(store, "20260101T000000Z-0001", tmp_path / "pq", "parquet")
    table = parquet.read_table(tmp_path / "pq" / "process_samples.parquet")
    assert table.num_rows == SAMPLES
    assert str(table.schema.field("rss_bytes").type) == "int64"
    assert str(table.schema.field("time").type) == "timestamp[ms, tz=UTC]"
    assert table.column("rss_bytes")[5].as_py() == 2**30 + 5 and table.column("pss_bytes")[0].as_py() is None


def test_an_unknown_format_is_a_config_error(store, tmp_path):
    store, _ = store
    with pytest.raises(ConfigError, match="unknown export format 'xlsx'"):
        export_run(store, "20260101T000000Z-0001", tmp_path / "x", "xlsx")


def test_parquet_without_pyarrow_names_the_extra_and_writes_nothing(store, tmp_path):
    store, _ = store
    url = store.engine.url.render_as_string()
    # A fresh interpreter in which pyarrow cannot be imported, as on a machine without the extra.
    program = ("import sys; sys.modules['pyarrow'] = None; from soak.cli import main; "
               "main(['export', '20260101T000000Z-0001', '--db', sys.argv[1], '--format', 'parquet', "
               "'--export-dir', sys.argv[2]], prog_name='soak')")
    result = subprocess.run([sys.executable, "-c", program, url, str(tmp_path / "none")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "soak: error: --format parquet needs pyarrow, which is not installed: pip install 'soak[parquet]'"]
    assert not (tmp_path / "none").exists()


def test_a_run_that_reads_running_when_its_turn_comes_is_kept(store):
    store, folders = store
    plan = plan_prune(store, 90 * 86400)
    assert "20260101T000000Z-0001" in [run.id for run in plan.delete]
    with store.engine.begin() as connection:  # its soak came back to life since the plan (as `soak close` might race)
        connection.execute(update(Run).where(Run.id == "20260101T000000Z-0001").values(status="running",
                                                                                        soak_pid=os.getpid()))
    result = prune(store, plan)
    assert "20260101T000000Z-0001" not in result.deleted and folders["old"].exists()
    assert "20260101T000000Z-0001" in [run.id for run in plan.kept_running]
