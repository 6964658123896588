"""Storage outages injected into real runs (docs/robustness.md, "When the database fails").

Each test is a real `soak start` against the reference server with a planted leak, judged on short windows, while
its database goes away: a real PostgreSQL restarted and then stopped for a minute; SQLite held by another process's
exclusive lock for 30 s while `soak prune`, `soak report` and `soak export` run against it; the database's own small
file system filled up and freed; and filled for longer than the outage budget. Within the budget the run goes on,
leak.rss is FAIL as it is without the fault, and every request the client counted is in the database; beyond it
the run stops with exit 4 and one line naming the full volume, and the database stays consistent.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from support.require import skip_or_fail
from support.storage_faults import fill, hold_exclusive_lock, private_postgres, small_volume

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(480)]

REPO = Path(__file__).resolve().parents[2]
# As test_stop_on_fail.py: windows of 5 s after a 20 s warm-up, so 140 s give leak.rss the 20 windows it needs,
# and a leak the reference server plants (256 KiB a request, time-scaled ×60) that fails it.
LEAKY = ["--warmup", "20s", "--window", "5s", "--sample-every", "1s", "--rate", "4", "--scenario", "chat_short",
         "--no-idle-probes", "--time-scale", "60", "--reference-fault", "rss-leak=256KiB", "--keep-requests",
         "--forensics", "off", "--json"]


class LiveRun:
    """A `soak start` running in the background, its output in files (no pipe to fill up)."""

    def __init__(self, folder: Path, db_url: str, *args: str):
        folder.mkdir(parents=True, exist_ok=True)
        self.db_url, self.stdout, self.stderr = db_url, folder / "stdout.txt", folder / "stderr.txt"
        with open(self.stdout, "w") as out, open(self.stderr, "w") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "soak", "start", *LEAKY, *args, "--db", db_url],
                                            cwd=REPO, stdout=out, stderr=err, text=True)
        self.run_id, self.t0 = self._started()

    def _started(self, timeout_s: float = 180) -> tuple[str, float]:
        """(run id, start epoch seconds), once the run's row is in the database (the one running)."""
        engine = create_engine(self.db_url)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                assert self.process.poll() is None, self.stderr.read_text()[-3000:]
                try:
                    with engine.connect() as connection:
                        row = connection.execute(text("select id, t0_epoch_s from runs where status = 'running'")).first()
                    if row:
                        return row[0], row[1]
                except Exception:  # no schema yet
                    pass
                time.sleep(0.5)
        finally:
            engine.dispose()
        raise AssertionError("the run never opened")

    def at(self, t_s: float) -> None:
        """Wait until the run is `t_s` seconds old (it must still be running)."""
        while time.time() < self.t0 + t_s:
            assert self.process.poll() is None, self.stderr.read_text()[-3000:]
            time.sleep(0.2)

    def said(self, words: str, timeout_s: float = 60) -> None:
        """Wait until the run's progress lines say `words`."""
        deadline = time.monotonic() + timeout_s
        while words not in self.stderr.read_text():
            assert time.monotonic() < deadline, f"never said {words!r}: {self.stderr.read_text()[-2000:]}"
            time.sleep(0.2)

    def finish(self, timeout_s: float = 300) -> tuple[int, str, str]:
        try:
            self.process.wait(timeout=timeout_s)
        finally:
            if self.process.poll() is None:
                self.process.kill()  # the run we started, by its PID
                self.process.wait()
        return self.process.returncode, self.stdout.read_text(), self.stderr.read_text()


def rows(db_url: str, sql: str, **params) -> list[tuple]:
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql), params)]
    finally:
        engine.dispose()


def request_counts(db_url: str, run_id: str) -> tuple[int, int, int]:
    """(requests the client counted, as its run_end event records them; requests in the stored windows; kept rows)."""
    (data,), = rows(db_url, "select data_json from events where run_id = :r and kind = 'run_end'", r=run_id)
    (windows,), = rows(db_url, "select sum(requests) from request_windows where run_id = :r and scenario = '*'",
                       r=run_id)
    (kept,), = rows(db_url, "select count(*) from requests where run_id = :r", r=run_id)
    return json.loads(data)["requests"], windows, kept


def outages(db_url: str, run_id: str) -> list[tuple[str, float, dict]]:
    """The run's storage outage events: (kind, t_s, data)."""
    found = rows(db_url, "select kind, t_s, data_json from events where run_id = :r and kind like 'storage_outage%' "
                         "order by t_s", r=run_id)
    return [(kind, t_s, json.loads(data or "{}")) for kind, t_s, data in found]


def verdicts(summary: dict) -> dict[str, str]:
    return {finding["check"]: finding["verdict"] for finding in summary["findings"]}


def assert_leak_failed_and_nothing_lost(result: tuple[int, str, str], db_url: str, run_id: str) -> tuple[int, ...]:
    """The run ended on its verdict with leak.rss FAIL, and every request the client counted was stored."""
    returncode, stdout, stderr = result
    assert returncode == 1, stderr[-3000:]
    summary = json.loads(stdout)
    assert summary["stop_reason"] == "completed" and verdicts(summary)["leak.rss"] == "FAIL", stderr[-3000:]
    counted = request_counts(db_url, run_id)
    assert counted[0] > 200 and len(set(counted)) == 1, counted
    return counted


@pytest.fixture
def cluster():
    """A private PostgreSQL cluster of this test's own (stopping the machine's would fail other tests)."""
    context = private_postgres()
    try:
        found = context.__enter__()
    except (OSError, subprocess.SubprocessError) as exc:
        skip_or_fail(f"cannot run a private PostgreSQL here ({exc})")
    yield found
    context.__exit__(None, None, None)


@pytest.fixture
def volume():
    """A 32 MiB tmpfs of this test's own, for the database."""
    context = small_volume("32m")
    try:
        found = context.__enter__()
    except (OSError, subprocess.SubprocessError) as exc:
        skip_or_fail(f"cannot mount a small tmpfs here (mount refused: {exc})")
    yield found
    context.__exit__(None, None, None)


def test_postgres_restarted_and_then_stopped_for_a_minute(tmp_path, cluster):
    run = LiveRun(tmp_path, cluster.url, "--duration", "140s", "--out", str(tmp_path / "out"))
    run.at(30)
    cluster.restart()
    run.at(45)
    cluster.stop()
    run.said("storage outage: ")
    time.sleep(60)
    cluster.start()
    result = run.finish()
    counted = assert_leak_failed_and_nothing_lost(result, cluster.url, run.run_id)
    found = outages(cluster.url, run.run_id)
    ends = [data for kind, _, data in found if kind == "storage_outage_end"]
    assert len(ends) == len(found) / 2 and max(end["lasted_s"] for end in ends) >= 55, found
    longest = max(ends, key=lambda end: end["lasted_s"])
    assert 40 <= longest["started_s"] <= 80 and longest["rows_held"] > 100, longest  # recorded at its real time
    assert "storage back after" in result[2]
    print(f"\nPostgreSQL: {len(ends)} outages, longest {longest['lasted_s']:.1f} s holding {longest['rows_held']} rows "
          f"(~{longest['bytes_held'] / 2**20:.2f} MiB); requests counted/in windows/kept: {counted}")


def plant_finished_run(db_url: str, out: Path) -> str:
    """A finished run two days old (its soak long gone) for `soak prune` to delete beside the live one."""
    from soak.store import Store
    from soak.store.models import Run

    run_id = "20200101T000000Z-0old"
    with Store.open(db_url) as store, store.engine.begin() as connection:
        connection.execute(Run.__table__.insert(), [{
            "id": run_id, "status": "completed", "started_at": "2020-01-01T00:00:00+00:00", "t0_epoch_s": 0.0,
            "planned_duration_s": 60.0, "warmup_s": 5.0, "window_s": 5.0, "out_dir": str(out / run_id),
            "target_kind": "reference", "config_json": "{}", "environment_json": "{}"}])
    return run_id


def test_sqlite_locked_exclusively_for_30s_while_prune_report_and_export_run(tmp_path, soak_cli):
    out = tmp_path / "out"
    db_url = f"sqlite:///{out / 'soak.db'}"
    old_id = plant_finished_run(db_url, out)
    run = LiveRun(tmp_path, db_url, "--duration", "140s", "--out", str(out))
    run.at(35)
    holder = hold_exclusive_lock(out / "soak.db", 30)
    try:
        pruned_during = soak_cli("prune", "--older-than", "1d", "--json", "--out", str(out), timeout_s=120)
        report = soak_cli("report", run.run_id, "--out", str(out), timeout_s=180)
        export = soak_cli("export", run.run_id, "--out", str(out), "--export-dir", str(tmp_path / "export"),
                          timeout_s=120)
        history = soak_cli("history", "--json", "--out", str(out), timeout_s=120)
    finally:
        holder.wait(timeout=120)  # it lets go after its 30 s
    pruned_after = soak_cli("prune", "--older-than", "1d", "--json", "--out", str(out), timeout_s=120)
    result = run.finish()
    assert report.returncode == 0 and export.returncode == 0, (report.stderr[-2000:], export.stderr[-2000:])
    assert history.returncode in (0, 4) and len(history.stderr.strip().splitlines()) <= 2, history.stderr  # one line
    # While the lock is held prune cannot delete (one line, exit 4); afterwards it does, and leaves the VACUUM alone.
    assert pruned_during.returncode in (0, 4) and len(pruned_during.stderr.strip().splitlines()) <= 2, pruned_during.stderr
    after = json.loads(pruned_after.stdout)
    assert pruned_after.returncode == 0 and after["deleted"] == [old_id], pruned_after.stderr
    assert after["vacuum_skipped_for"] == [run.run_id] and "VACUUM skipped" in pruned_after.stderr
    counted = assert_leak_failed_and_nothing_lost(result, db_url, run.run_id)
    ends = [data for kind, _, data in outages(db_url, run.run_id) if kind == "storage_outage_end"]
    assert ends and max(end["lasted_s"] for end in ends) >= 20, ends
    longest = max(ends, key=lambda end: end["lasted_s"])
    print(f"\nSQLite lock: outage {longest['lasted_s']:.1f} s holding {longest['rows_held']} rows; prune during the "
          f"lock exit {pruned_during.returncode}; requests counted/in windows/kept: {counted}")


def integrity(db_path: Path) -> str:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return db.execute("pragma integrity_check").fetchone()[0]
    finally:
        db.close()


def test_the_database_volume_full_for_20s_then_freed(tmp_path, volume):
    db_url = f"sqlite:///{volume / 'soak.db'}"
    run = LiveRun(tmp_path, db_url, "--duration", "140s", "--out", str(tmp_path / "out"))
    run.at(40)
    filler = fill(volume)
    run.said("storage outage: the volume mounted at")
    time.sleep(20)
    filler.unlink()
    result = run.finish()
    counted = assert_leak_failed_and_nothing_lost(result, db_url, run.run_id)
    found = outages(db_url, run.run_id)
    assert integrity(volume / "soak.db") == "ok"
    start = next(data for kind, _, data in found if kind == "storage_outage_start")
    end = next(data for kind, _, data in found if kind == "storage_outage_end")
    assert start["volume"] == str(volume) and end["lasted_s"] >= 15 and end["rows_held"] > 50, found
    print(f"\nfull volume, freed: outage {end['lasted_s']:.1f} s holding {end['rows_held']} rows; "
          f"requests counted/in windows/kept: {counted}")


def test_the_database_volume_full_beyond_the_budget_stops_the_run(tmp_path, volume):
    db_url = f"sqlite:///{volume / 'soak.db'}"
    run = LiveRun(tmp_path, db_url, "--duration", "400s", "--storage-outage-for", "10s", "--out", str(tmp_path / "out"))
    run.at(145)  # 25 windows after the warm-up are stored: the report of them can judge the leak
    fill(volume)
    returncode, _, stderr = run.finish()
    checked = integrity(volume / "soak.db")
    (committed,), = rows(db_url, "select count(*) from requests")
    assert returncode == 4, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("soak: error: storage outage beyond its budget (the volume mounted at " + str(volume)), last
    assert "could not be written and are lost" in last and "report of it: " in last, last
    lost = int(last.split("load was stopped; ")[1].split()[0])
    assert checked == "ok" and committed > 200 and lost > 0
    summary = json.loads((tmp_path / "out" / run.run_id / "summary.json").read_text())
    assert verdicts(summary)["leak.rss"] == "FAIL" and summary["status"] == "aborted"
    print(f"\nfull volume beyond the budget: exit 4, {lost} rows lost, {committed} requests committed before; "
          f"integrity_check {checked}")
