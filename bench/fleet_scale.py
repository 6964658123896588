"""Benchmark: a fleet of 8 replicas × 24 h at 1 Hz against the 72 h single-server budgets (database size, report
build time), with one 72 h single-server run built and timed in the same process as the baseline.

Each replica is `bench/report_render.py`'s synthetic run (3 server processes + soak, 1 GPU, server gauges, latency
and request windows, hourly idle probes) over `--hours`, stored as a replica's run under one fleet row in one
SQLite database, with its summary stored the way `finalise_run` stores it. The 72 h run gets a database of its own.
Rows go in in the order soak's writers commit them: second by second, and in a fleet every replica's second before
the next (each replica's writer commits every 0.25 s), so one replica's samples lie spread among its peers' and its
index entries go into the middle of the index, as in a real fleet's database. `--one-after-another` builds every
run with `report_render.build_run` instead (a whole run at a time, table by table, process by process), to show
what that order changes.

The budgets, judged on CPU seconds (the machine is shared; wall seconds are printed beside them):

- each replica's report (`render_report` of its run, in the fleet's database) takes no longer than the 72 h
  run's report; the slowest replica is judged;
- the fleet's own report (`finalise_fleet`, what `soak report FLEET_RUN` runs: the fleet's summary from its
  replicas' stored summaries, its report.html and summary.json) takes no longer than the 72 h run's report;
- `soak report` of a replica's run (`finalise_run`: the analysis from the database, then the report) takes no
  longer than `soak report` of the 72 h run; timed for the first replica (they are alike) unless `--no-analysis`;
- the fleet's database costs at most 1.05 × the 72 h run's bytes per day, per replica-day (the WAL
  checkpointed into the file first). The 5 % is room for what a run stores that does not grow with its samples
  (its row and summary, and at least 48 windows of HDR histograms however short it is), which weighs more in a
  shorter run; a day of samples must cost what it costs in the single-server run. The fleet's whole database is
  printed too, but not held to the 72 h figure: it holds replicas × hours / 72 times the server-hours.

    python bench/fleet_scale.py [--replicas 8] [--hours 24] [--baseline-hours 72] [--one-after-another]
                                [--no-analysis]
    python bench/fleet_scale.py --replicas 2 --hours 1 --baseline-hours 3    # a quick smoke run
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from functools import partial
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
from report_render import (
    MIB,
    build_run,
    event_rows,
    gpu_and_server_rows,
    insert_batched,
    process_rows,
    run_lengths,
    run_row,
    summary,
    window_bounds,
    window_rows,
)

from soak.config import resolve_config
from soak.report import render_report
from soak.run.finalise import finalise_run, store_verdict
from soak.run.fleet import FLEET_KIND, plan_fleet
from soak.run.fleet_summary import finalise_fleet
from soak.store import Store
from soak.store.models import EventRow, LatencyWindowRow, ProcessSample, RequestWindowRow, Run, RunLabel

DATABASE_ALLOWANCE = 1.05  # per replica-day against the 72 h run's per day (see the docstring)
NON_SAMPLE_TABLES = {model.__tablename__ for model in (Run, RunLabel, EventRow, LatencyWindowRow, RequestWindowRow)}
# Ids as long as soak's own (`new_run_id`): each sample row and its index entry hold one.
FLEET_ID = "20261204T200000Z-f000"
BASELINE_ID = "20261204T200000Z-a000"
SAMPLES_AT_ONCE_S = 3600.0  # the samples of this many seconds are made and ordered in memory at a time
PROGRESS_EVERY_S = 6 * 3600.0


def say(line: str) -> None:
    """A progress line, at once (the full size takes minutes)."""
    print(line, flush=True)


def timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """The call's result, wall seconds and CPU seconds."""
    start, cpu_start = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - start, time.process_time() - cpu_start


def database_bytes(store: Store) -> tuple[int, int]:
    """The SQLite file's size with the WAL checkpointed into it, and the part of it in the tables and indexes
    that are not samples (runs, labels, events, windows)."""
    connection = store.engine.raw_connection()  # a checkpoint outside any transaction, as `Store.vacuum` does
    try:
        cursor = connection.cursor()
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = cursor.execute("SELECT d.name, d.pgsize, m.tbl_name FROM dbstat AS d "
                               "LEFT JOIN sqlite_schema AS m ON m.name = d.name").fetchall()
    finally:
        connection.close()
    other = sum(size for name, size, table in pages if (table or name) in NON_SAMPLE_TABLES)
    return store.size_bytes() or 0, other


def write_as_sampled(store: Store, runs: list[tuple[str, dict]], hours: float) -> None:
    """Runs of `hours` sampled side by side, each a (run id, fields of its row) with a seed of its own: their
    samples written second by second, each second run by run and process by process, as their writers commit
    them; then each run's events and windows (hundreds of rows a run, against hundreds of thousands of samples)."""
    duration_s, warmup_s, window_s = run_lengths(hours)
    rngs = [np.random.default_rng(seed) for seed in range(1, len(runs) + 1)]
    insert_batched(store, Run, [run_row(run_id, duration_s, warmup_s, window_s) | fields for run_id, fields in runs])
    for start_s in np.arange(0.0, duration_s, SAMPLES_AT_ONCE_S).tolist():
        t_s = np.arange(start_s, min(start_s + SAMPLES_AT_ONCE_S, duration_s), 1.0)
        made = [{ProcessSample: process_rows(run_id, t_s, rng), **gpu_and_server_rows(run_id, t_s, rng)}
                for (run_id, _), rng in zip(runs, rngs)]
        for model in made[0]:
            # A stable sort by time keeps, within each second, the runs' order and each run's processes' order.
            insert_batched(store, model, sorted(chain.from_iterable(rows[model] for rows in made), key=itemgetter("t_s")))
        if (start_s + SAMPLES_AT_ONCE_S) % PROGRESS_EVERY_S == 0:
            say(f"  {len(runs)} run(s): samples written to {(start_s + SAMPLES_AT_ONCE_S) / 3600:g} h of {hours:g} h")
    for (run_id, _), rng in zip(runs, rngs):
        insert_batched(store, EventRow, event_rows(run_id, duration_s, warmup_s))
        latency, requests = window_rows(run_id, window_bounds(duration_s, warmup_s, window_s), rng)
        insert_batched(store, LatencyWindowRow, latency)
        insert_batched(store, RequestWindowRow, requests)


def write_runs(store: Store, runs: list[tuple[str, dict]], hours: float, one_after_another: bool) -> None:
    """The runs' rows, in the order soak writes them, or with `report_render.build_run` a whole run at a time."""
    if not one_after_another:
        write_as_sampled(store, runs, hours)
        return
    for seed, (run_id, fields) in enumerate(runs, start=1):
        build_run(store, run_id, hours, seed=seed, **fields)


def fleet_config_json(folder: Path, replicas: int, hours: float) -> tuple[str, list[tuple[str, str]]]:
    """The fleet row's stored config (its replicas named and resolved, as `soak start` stores it) and each
    replica's (name, url)."""
    targets = [f"gpu-{n}=http://10.0.0.{n + 1}:8000" for n in range(replicas)]
    config = resolve_config({"duration": f"{hours * 3600:g}s", "target": targets, "out": str(folder)}, environ={})
    plan = plan_fleet(config, FLEET_ID)
    return plan.config.model_dump_json(), [(spec.name, spec.url) for spec, _ in plan.replicas]


def build_fleet(store: Store, folder: Path, replicas: int, hours: float, one_after_another: bool
                ) -> list[tuple[str, str]]:
    """The fleet row and one synthetic replica run per replica; returns each replica's (run id, name)."""
    duration_s, warmup_s, window_s = run_lengths(hours)
    config_json, specs = fleet_config_json(folder, replicas, hours)
    fleet_folder = folder / FLEET_ID
    with store.writing() as session:
        session.add(Run(id=FLEET_ID, status="completed", started_at="2026-12-04T20:00:00+00:00", t0_epoch_s=1.8e9,
                        ended_at="2026-12-05T20:00:00+00:00", planned_duration_s=duration_s, duration_s=duration_s,
                        warmup_s=warmup_s, window_s=window_s, soak_pid=1, out_dir=str(fleet_folder),
                        target_kind=FLEET_KIND, target_url=" ".join(url for _, url in specs),
                        config_json=config_json, environment_json="{}"))
    runs = [(f"20261204T200000Z-b{n:03x}", name, url) for n, (name, url) in enumerate(specs)]
    write_runs(store, [(run_id, {"fleet_id": FLEET_ID, "replica": name, "target_kind": "external", "target_url": url,
                                 "out_dir": str(fleet_folder / run_id)}) for run_id, name, url in runs],
               hours, one_after_another)
    return [(run_id, name) for run_id, name, _ in runs]


def replica_report(store: Store, run_id: str, hours: float) -> dict[str, float]:
    """Store the replica's summary as `finalise_run` does (its report's path in it), then time its report."""
    run_summary = summary(store, run_id, run_lengths(hours)[1])
    out = Path(store.get_run(run_id).out_dir) / "report.html"
    run_summary.report_html = str(out)
    store_verdict(store, run_id, run_summary)
    path, wall_s, cpu_s = timed(lambda: render_report(store, run_id, run_summary, out))
    return {"wall_s": wall_s, "cpu_s": cpu_s, "bytes": path.stat().st_size}


def soak_report(store: Store, run_id: str, folder: Path) -> dict[str, Any]:
    """Time `soak report RUN` of a run (analysis and report) into a folder of its own, leaving its stored summary
    as it is."""
    run_summary, wall_s, cpu_s = timed(partial(finalise_run, store, run_id, stopped_early=False,
                                               report_dir=folder / "soak-report" / run_id))
    say(f"  `soak report {run_id}` (analysis and report): {cpu_s:.1f} s CPU ({wall_s:.1f} s wall), "
        f"{run_summary.verdict.value}")
    return {"wall_s": wall_s, "cpu_s": cpu_s}


def baseline(folder: Path, hours: float, one_after_another: bool, analysis: bool) -> dict[str, Any]:
    """The single-server run of `hours` in a database of its own: its size and its report's time."""
    store = Store.open(f"sqlite:///{folder}/single.db")
    try:
        _, build_s, _ = timed(partial(write_runs, store, [(BASELINE_ID, {"out_dir": str(folder / BASELINE_ID)})],
                                      hours, one_after_another))
        db_bytes, other_bytes = database_bytes(store)
        say(f"single server {hours:g} h: database built in {build_s:.1f} s, {db_bytes / MIB:.1f} MiB "
            f"({other_bytes / MIB:.1f} MiB of it not samples)")
        report = replica_report(store, BASELINE_ID, hours)
        say(f"single server {hours:g} h: report {report['cpu_s']:.2f} s CPU ({report['wall_s']:.2f} s wall), "
            f"{report['bytes'] / MIB:.2f} MiB")
        analysed = soak_report(store, BASELINE_ID, folder) if analysis else None
        return {**report, "db_bytes": db_bytes, "other_bytes": other_bytes, "soak_report": analysed}
    finally:
        store.close()


def fleet(folder: Path, replicas: int, hours: float, one_after_another: bool, analysis: bool) -> dict[str, Any]:
    """The fleet in its database: its size, each replica's report time, and the fleet report's."""
    store = Store.open(f"sqlite:///{folder}/fleet.db")
    try:
        say(f"fleet {replicas} × {hours:g} h: building")
        runs, build_s, _ = timed(partial(build_fleet, store, folder, replicas, hours, one_after_another))
        db_bytes, other_bytes = database_bytes(store)
        say(f"fleet {replicas} × {hours:g} h: database built in {build_s:.1f} s, {db_bytes / MIB:.1f} MiB "
            f"({other_bytes / MIB:.1f} MiB of it not samples)")
        reports = {}
        for run_id, name in runs:
            reports[name] = replica_report(store, run_id, hours)
            say(f"  replica {name}: report {reports[name]['cpu_s']:.2f} s CPU ({reports[name]['wall_s']:.2f} s wall)")
        fleet_summary, wall_s, cpu_s = timed(lambda: finalise_fleet(store, FLEET_ID))
        say(f"fleet: `soak report {FLEET_ID}` (finalise_fleet) {cpu_s:.3f} s CPU ({wall_s:.3f} s wall), "
            f"{fleet_summary.verdict.value}, page {Path(fleet_summary.report_html).stat().st_size / 1024:.0f} KiB")
        analysed = soak_report(store, runs[0][0], folder) if analysis else None
        return {"db_bytes": db_bytes, "other_bytes": other_bytes, "reports": reports,
                "fleet": {"wall_s": wall_s, "cpu_s": cpu_s}, "soak_report": analysed}
    finally:
        store.close()


def budgets(single: dict, fleet_result: dict, args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """Each budget's name, its line with the figures and ratio, and whether it holds."""
    replica_days, single_days = args.replicas * args.hours / 24, args.baseline_hours / 24
    per_day, single_per_day = fleet_result["db_bytes"] / replica_days, single["db_bytes"] / single_days
    samples_ratio = ((fleet_result["db_bytes"] - fleet_result["other_bytes"]) / replica_days
                     / ((single["db_bytes"] - single["other_bytes"]) / single_days))
    slowest = max(fleet_result["reports"].values(), key=lambda report: report["cpu_s"])
    own = fleet_result["fleet"]
    results = [
        ("replica report", f"slowest replica's report {slowest['cpu_s']:.2f} s CPU vs {single['cpu_s']:.2f} s for "
         f"{args.baseline_hours:g} h: ×{slowest['cpu_s'] / single['cpu_s']:.2f} (budget ≤ ×1)",
         slowest["cpu_s"] <= single["cpu_s"]),
        ("fleet report", f"fleet's report {own['cpu_s']:.3f} s CPU vs {single['cpu_s']:.2f} s: "
         f"×{own['cpu_s'] / single['cpu_s']:.3f} (budget ≤ ×1)", own["cpu_s"] <= single["cpu_s"]),
        ("database", f"database per replica-day {per_day / MIB:.1f} MiB vs {single_per_day / MIB:.1f} MiB a day "
         f"for {args.baseline_hours:g} h: ×{per_day / single_per_day:.3f} (budget ≤ ×{DATABASE_ALLOWANCE}; "
         f"samples alone ×{samples_ratio:.3f})",
         per_day <= DATABASE_ALLOWANCE * single_per_day),
    ]
    replica_run, single_run = fleet_result["soak_report"], single["soak_report"]
    if replica_run and single_run:
        results.append(("soak report of a replica", f"`soak report` of a replica's run {replica_run['cpu_s']:.1f} s "
                        f"CPU vs {single_run['cpu_s']:.1f} s for {args.baseline_hours:g} h: "
                        f"×{replica_run['cpu_s'] / single_run['cpu_s']:.2f} (budget ≤ ×1)",
                        replica_run["cpu_s"] <= single_run["cpu_s"]))
    return results


def print_comparison(single: dict, fleet_result: dict, args: argparse.Namespace) -> None:
    """Figures against the baseline with ratios, then whether the fleet stays within the budgets."""
    cpu = [report["cpu_s"] for report in fleet_result["reports"].values()]
    wall = [report["wall_s"] for report in fleet_result["reports"].values()]
    say(f"database: fleet {fleet_result['db_bytes'] / MIB:.1f} MiB in all vs {single['db_bytes'] / MIB:.1f} MiB: "
        f"×{fleet_result['db_bytes'] / single['db_bytes']:.2f}, for ×{args.replicas * args.hours / args.baseline_hours:.2f}"
        " the server-hours")
    say(f"replica reports: {min(cpu):.2f}–{max(cpu):.2f} s CPU ({min(wall):.2f}–{max(wall):.2f} s wall), "
        f"×{min(cpu) / single['cpu_s']:.2f}–×{max(cpu) / single['cpu_s']:.2f} of the {args.baseline_hours:g} h report; "
        f"all {len(cpu)} together {sum(cpu):.1f} s CPU (×{sum(cpu) / single['cpu_s']:.2f})")
    results = budgets(single, fleet_result, args)
    for _, line, holds in results:
        say(f"{'within' if holds else 'OVER'}: {line}")
    over = [name for name, _, holds in results if not holds]
    say(f"fleet {args.replicas} × {args.hours:g} h: " + (f"NOT within the single-server budgets (over: {', '.join(over)})"
                                                         if over else "within the single-server budgets"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--hours", type=float, default=24.0, help="each replica's run")
    parser.add_argument("--baseline-hours", type=float, default=72.0, help="the single-server run")
    parser.add_argument("--one-after-another", action="store_true",
                        help="write each run whole, as report_render.py does, not second by second")
    parser.add_argument("--no-analysis", action="store_true", help="leave out `soak report` (analysis and report)")
    args = parser.parse_args()
    say(f"rows written {'a whole run at a time' if args.one_after_another else 'second by second, as soak writes them'}")
    with tempfile.TemporaryDirectory() as folder:
        single = baseline(Path(folder), args.baseline_hours, args.one_after_another, not args.no_analysis)
        fleet_result = fleet(Path(folder), args.replicas, args.hours, args.one_after_another, not args.no_analysis)
        print_comparison(single, fleet_result, args)


if __name__ == "__main__":
    main()
