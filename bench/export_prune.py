"""`soak export` and `soak prune` on a synthetic long run, against plain baselines measured in the same run.

A run of `--hours` at 1 Hz with 4 processes sampled (the biggest table of a real run) is written through the
models into a fresh SQLite file. Then:

- export: `export_run` to CSV (and Parquet when pyarrow is installed) against a bare `sqlite3` cursor piped into
  `csv.writer` for the same process_samples table — rows/s of each and soak's share of the baseline's speed;
- prune: deleting that run with `prune` (every table, then VACUUM) against a bare `DELETE … WHERE run_id` on
  process_samples alone; the file's size before and after.

    python bench/export_prune.py [--hours 24]
"""

from __future__ import annotations

import argparse
import csv
import sqlite3
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

from soak.store import Store
from soak.store.export import export_run
from soak.store.models import ProcessSample, Run
from soak.store.prune import plan_prune, prune

RUN_ID = "20260101T000000Z-bench"
PROCESSES = 4


def build(db_path: Path, hours: float) -> int:
    """The run row and its process samples; returns the number of sample rows."""
    store = Store.open(f"sqlite:///{db_path}")
    seconds = int(hours * 3600)
    with store.engine.begin() as connection:
        connection.execute(insert(Run), [{
            "id": RUN_ID, "status": "completed", "started_at": "2026-01-01T00:00:00+00:00", "t0_epoch_s": 1.767e9,
            "planned_duration_s": float(seconds), "warmup_s": 60.0, "window_s": 300.0, "out_dir": "/nonexistent",
            "target_kind": "reference", "config_json": "{}", "environment_json": "{}"}])
        for start in range(0, seconds, 20_000):
            connection.execute(insert(ProcessSample), [
                {"run_id": RUN_ID, "t_s": float(t), "role": "server", "pid": 100 + p, "ppid": 1, "name": f"proc{p}",
                 "rss_bytes": 2**30 + t, "pss_bytes": 2**29, "uss_bytes": 2**28, "fds": 40, "threads": 12,
                 "cpu_percent": 12.5} for t in range(start, min(start + 20_000, seconds)) for p in range(PROCESSES)])
    store.close()
    return seconds * PROCESSES


def bare_csv(db_path: Path, out: Path) -> float:
    started = time.perf_counter()
    connection = sqlite3.connect(db_path)
    cursor = connection.execute("select * from process_samples where run_id = ? order by t_s", (RUN_ID,))
    with open(out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([column[0] for column in cursor.description])
        writer.writerows(cursor)
    connection.close()
    return time.perf_counter() - started


def soak_export(db_path: Path, folder: Path, fmt: str) -> float:
    store = Store.open(f"sqlite:///{db_path}")
    started = time.perf_counter()
    export_run(store, RUN_ID, folder, fmt)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        rows = build(folder / "soak.db", args.hours)
        size_mib = (folder / "soak.db").stat().st_size / 2**20
        print(f"synthetic run: {args.hours:g} h at 1 Hz, {rows:,} process samples, database {size_mib:.1f} MiB")
        baseline_s = bare_csv(folder / "soak.db", folder / "bare.csv")
        print(f"bare sqlite3 → csv.writer (process_samples): {baseline_s:.2f} s, {rows / baseline_s:,.0f} rows/s")
        for fmt in ("csv", "parquet"):
            try:
                elapsed = soak_export(folder / "soak.db", folder / fmt, fmt)
            except Exception as exc:  # parquet without pyarrow: say so and go on
                print(f"soak export --format {fmt}: skipped ({exc})")
                continue
            print(f"soak export --format {fmt} (every table): {elapsed:.2f} s, {rows / elapsed:,.0f} rows/s, "
                  f"{baseline_s / elapsed:.2f}× the bare csv's speed")
        bench_prune(folder, rows)


def bench_prune(folder: Path, rows: int) -> None:
    """Bare DELETE on a copy, then soak's prune (all tables, VACUUM) on the original."""
    copy = folder / "copy.db"
    copy.write_bytes((folder / "soak.db").read_bytes())
    started = time.perf_counter()
    connection = sqlite3.connect(copy)
    connection.execute("delete from process_samples where run_id = ?", (RUN_ID,))
    connection.commit()
    connection.close()
    bare_s = time.perf_counter() - started
    store = Store.open(f"sqlite:///{folder / 'soak.db'}")
    started = time.perf_counter()
    result = prune(store, plan_prune(store, 0.0))
    elapsed = time.perf_counter() - started
    print(f"bare DELETE of {rows:,} samples: {bare_s:.2f} s; soak prune (every table + VACUUM): {elapsed:.2f} s "
          f"({elapsed / bare_s:.1f}×), database {result.db_bytes_before / 2**20:.1f} → "
          f"{result.db_bytes_after / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
