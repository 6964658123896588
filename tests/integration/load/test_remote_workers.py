"""`soak worker` processes joining a `soak start --expect-workers N` over Locust's master/worker protocol: real
subprocesses on 127.0.0.1, a real reference server, a real SQLite store."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soak.analysis.loader import build_windows
from soak.config import RunConfig
from soak.load.plan import RatePlan, Segment, plan_arrivals
from soak.load.shape import LOOKAHEAD_S
from soak.load.worker import SharedBoard
from soak.store import Store

SHORT_RUN = ["--warmup", "5s", "--window", "5s", "--sample-every", "1s", "--no-idle-probes", "--canary-every", "0"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def soak_process(*args: str, log: Path) -> subprocess.Popen:
    with open(log, "w") as handle:
        return subprocess.Popen([sys.executable, "-m", "soak", *args], stdout=handle, stderr=subprocess.STDOUT)


def start_run(out: Path, port: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "soak", "start", *SHORT_RUN, "--out", str(out), "--json",
                             "--master-bind", f"127.0.0.1:{port}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_workers(count: int, port: int, folder: Path) -> list[subprocess.Popen]:
    return [soak_process("worker", "--master", f"127.0.0.1:{port}", "--connect-timeout", "2m",
                         log=folder / f"worker{index}.log") for index in range(count)]


def finish(process: subprocess.Popen, timeout_s: float) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()


def end_all(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def sent_by(log: Path) -> int:
    """The requests a worker says it sent (its last line: `done: N requests sent`)."""
    line = next(line for line in log.read_text().splitlines() if "done:" in line)
    return int(line.split("done:")[1].split()[0])


def events_of(out: Path, kind: str) -> list[dict]:
    db = sqlite3.connect(out / "soak.db")
    try:
        rows = db.execute("select t_s, data_json from events where kind = ? order by t_s", (kind,)).fetchall()
    finally:
        db.close()
    return [{"t_s": t_s, **json.loads(data)} for t_s, data in rows]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_remote_workers_join_and_send_every_measured_request_and_a_third_is_turned_away(tmp_path):
    port = free_port()
    workers = start_workers(3, port, tmp_path)
    run = start_run(tmp_path / "out", port, "--duration", "25s", "--rate", "4", "--expect-workers", "2",
                    "--worker-wait", "90s")
    try:
        stdout, stderr = finish(run, 200)
        codes = [worker.wait(timeout=30) for worker in workers]
    finally:
        end_all([run, *workers])
    assert run.returncode in (0, 1, 3), stderr
    assert sorted(codes) == [0, 0, 2]  # the third to say hello was turned away
    turned_away = codes.index(2)
    assert "turned this worker away" in (tmp_path / f"worker{turned_away}.log").read_text()
    summary = json.loads(stdout)
    assert summary["workers"] == {"joined": 2, "remote": 2, "lost": []}
    [joined] = events_of(tmp_path / "out", "workers_joined")
    kept = [index for index in range(3) if index != turned_away]
    assert sorted(w["pid"] for w in joined["workers"]) == sorted(workers[index].pid for index in kept)
    sent = [sent_by(tmp_path / f"worker{index}.log") for index in kept]
    assert min(sent) > 10  # both took a share of 4 req/s over ~25 s
    assert summary["totals"]["requests"] == sum(sent)  # every request measured came from the remote workers
    assert "waiting for load workers: 0/2 joined" in stderr  # the wait shows its progress


@pytest.mark.timeout(120)
def test_workers_that_never_come_fail_the_start_with_one_line_and_exit_2(tmp_path):
    port = free_port()
    started = time.monotonic()
    run = start_run(tmp_path / "out", port, "--duration", "30s", "--expect-workers", "2", "--worker-wait", "3s")
    stdout, stderr = finish(run, 110)
    assert run.returncode == 2
    errors = [line for line in stderr.splitlines() if line.startswith("soak: error:")]
    assert errors == [f"soak: error: only 0 of 2 load workers joined within 3s (the master listened on "
                      f"127.0.0.1:{port}); start `soak worker --master 127.0.0.1:{port}` on each worker host, "
                      "or allow longer with --worker-wait"]
    assert time.monotonic() - started < 90
    assert stdout == ""
    db = sqlite3.connect(tmp_path / "out" / "soak.db")
    try:
        assert db.execute("select count(*) from runs").fetchone()[0] == 0  # no half-run was opened
    finally:
        db.close()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_worker_that_cannot_prepare_the_run_closes_it_with_its_report(tmp_path):
    master_dir, worker_dir = tmp_path / "master", tmp_path / "worker"
    master_dir.mkdir(), worker_dir.mkdir()
    scenario = Path(__file__).resolve().parents[3] / "scenarios" / "chat_short.py"
    (master_dir / "my_scenario.py").write_text(scenario.read_text())  # a relative path only the master can see
    port = free_port()
    worker = subprocess.Popen([sys.executable, "-m", "soak", "worker", "--master", f"127.0.0.1:{port}",
                               "--connect-timeout", "2m"], cwd=worker_dir, stderr=subprocess.PIPE, text=True)
    run = subprocess.Popen([sys.executable, "-m", "soak", "start", *SHORT_RUN, "--duration", "5m", "--out",
                            str(tmp_path / "out"), "--master-bind", f"127.0.0.1:{port}", "--expect-workers", "1",
                            "--scenario", "my_scenario.py"], cwd=master_dir, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = finish(run, 120)
        _, worker_err = finish(worker, 30)
    finally:
        end_all([run, worker])
    assert run.returncode == 2 and worker.returncode == 2
    [error] = [line for line in stderr.splitlines() if line.startswith("soak: error:")]
    assert "could not prepare the run" in error and "my_scenario.py" in error
    assert "was closed as aborted (report: " in error
    report = Path(error.split("(report: ")[1].rstrip(")"))
    assert report.exists()
    db = sqlite3.connect(tmp_path / "out" / "soak.db")
    try:
        assert db.execute("select status from runs").fetchall() == [("aborted",)]
    finally:
        db.close()
    assert "could not prepare the run" in worker_err.splitlines()[-1]


@pytest.mark.timeout(120)
def test_ctrl_c_while_waiting_for_workers_ends_the_wait_and_tells_the_worker_that_came(tmp_path):
    port, master_log = free_port(), tmp_path / "master.log"
    [worker] = start_workers(1, port, tmp_path)
    run = soak_process("start", *SHORT_RUN, "--duration", "5m", "--out", str(tmp_path / "out"), "--master-bind",
                       f"127.0.0.1:{port}", "--expect-workers", "2", "--worker-wait", "10m", log=master_log)
    try:
        deadline = time.monotonic() + 90
        while "1/2 joined" not in master_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)  # polling the master's progress line for the worker having joined
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 2
        assert worker.wait(timeout=30) == 2
    finally:
        end_all([run, worker])
    assert master_log.read_text().splitlines()[-1] == (
        "soak: error: stopped while waiting for load workers (1/2 joined); no run was opened")
    assert "turned this worker away: the run did not start: stopped while waiting" in (
        tmp_path / "worker0.log").read_text()


@pytest.mark.timeout(60)
def test_a_worker_with_no_master_gives_up_with_one_line_and_exit_2(soak_cli):
    started = time.monotonic()
    result = soak_cli("worker", "--master", f"127.0.0.1:{free_port()}", "--connect-timeout", "2s", timeout_s=50)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("soak: error: no soak master answered at 127.0.0.1:")
    assert time.monotonic() - started < 30


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_worker_is_an_event_and_its_share_moves_to_the_other(tmp_path):
    port, out, rate = free_port(), tmp_path / "out", 6.0
    workers = start_workers(2, port, tmp_path)
    run = start_run(out, port, "--duration", "45s", "--rate", f"{rate:g}", "--expect-workers", "2",
                    "--worker-wait", "90s")
    try:
        killed = workers[1]
        _wait_for_window(out, index=2, timeout_s=120)
        killed.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not events_of(out, "worker_lost") and time.monotonic() < deadline:
            time.sleep(0.25)
        (tmp_path / "late").mkdir()
        [late] = start_workers(1, port, tmp_path / "late")  # a replacement is refused: shares are settled
        workers.append(late)
        assert late.wait(timeout=60) == 2
        stdout, stderr = finish(run, 200)
        assert workers[0].wait(timeout=30) == 0
    finally:
        end_all([run, *workers])
    summary = json.loads(stdout)
    [lost] = summary["workers"]["lost"]
    assert (lost["pid"], lost["on_loss"]) == (killed.pid, "redistributed")
    assert lost["why"] in ("its heartbeat stopped", "it left the master")
    [event] = events_of(out, "worker_lost")
    assert event["pid"] == killed.pid and event["remaining"] == 1 and event["share"] == 1.0
    assert "has already started" in (tmp_path / "late" / "worker0.log").read_text()
    report = Path(summary["report_html"]).read_text()
    assert f"pid {killed.pid}) was lost at" in report and "2 of them soak worker processes" in report
    windows = _windows(out)
    assert any(w.excluded == "worker_lost" for w in windows)  # the silence is left out of trends
    after = [w for w in windows if w.start_s > event["t_s"] + 2 and w.excluded is None]
    assert len(after) >= 2, "the run should go on after the loss"
    counts = _requests_per_window(out)
    per_window = [counts.get(w.index, 0) for w in after]
    # The survivor took the whole rate (6 req/s × 5 s = 30 planned per window), not the half it had (15).
    assert sum(per_window) / len(per_window) > 0.7 * rate * 5


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_stopped_by_sigterm_hands_over_its_records_and_leaves(tmp_path):
    port, out = free_port(), tmp_path / "out"
    workers = start_workers(2, port, tmp_path)
    # 60 s: a busy machine that stores window 1 late still leaves the worker's leaving well inside the run
    run = start_run(out, port, "--duration", "60s", "--rate", "6", "--expect-workers", "2", "--worker-wait", "90s")
    try:
        _wait_for_window(out, index=1, timeout_s=120)
        workers[1].send_signal(signal.SIGTERM)
        assert workers[1].wait(timeout=30) == 0  # it drained and handed over its records
        stdout, _ = finish(run, 200)
        assert workers[0].wait(timeout=30) == 0
    finally:
        end_all([run, *workers])
    summary = json.loads(stdout)
    [lost] = summary["workers"]["lost"]
    assert lost["pid"] == workers[1].pid and lost["on_loss"] == "redistributed"
    assert lost["why"] == "it left the master after handing over its last records"
    assert "stopped by SIGTERM" in (tmp_path / "worker1.log").read_text()
    sent = [sent_by(tmp_path / f"worker{index}.log") for index in range(2)]
    assert summary["totals"]["requests"] == sum(sent)  # nothing the leaving worker sent was lost


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_worker_that_comes_back_after_it_was_declared_lost_is_turned_away(tmp_path):
    port, out = free_port(), tmp_path / "out"
    workers = start_workers(2, port, tmp_path)
    run = start_run(out, port, "--duration", "35s", "--rate", "4", "--expect-workers", "2", "--worker-wait", "90s")
    try:
        _wait_for_window(out, index=1, timeout_s=120)
        workers[1].send_signal(signal.SIGSTOP)  # silent: no heartbeat, no status
        deadline = time.monotonic() + 30
        while not events_of(out, "worker_lost") and time.monotonic() < deadline:
            time.sleep(0.25)
        workers[1].send_signal(signal.SIGCONT)
        assert workers[1].wait(timeout=60) == 2
        stdout, _ = finish(run, 200)
    finally:
        end_all([run, *workers])
    [lost] = json.loads(stdout)["workers"]["lost"]
    assert (lost["pid"], lost["why"], lost["on_loss"]) == (workers[1].pid, "its heartbeat stopped", "redistributed")
    assert "turned this worker away: it was declared lost" in (tmp_path / "worker1.log").read_text()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_losing_the_last_worker_ends_the_run_early(tmp_path):
    port, out = free_port(), tmp_path / "out"
    [worker] = start_workers(1, port, tmp_path)
    run = start_run(out, port, "--duration", "10m", "--rate", "4", "--expect-workers", "1", "--worker-wait", "90s")
    try:
        _wait_for_window(out, index=0, timeout_s=120)
        worker.send_signal(signal.SIGKILL)
        stdout, _ = finish(run, 120)  # the run ends on its own, long before its 10 minutes
    finally:
        end_all([run, worker])
    summary = json.loads(stdout)
    assert summary["status"] == "aborted" and summary["verdict"] != "PASS"
    assert summary["stop_reason"].startswith("every load worker was lost")
    [lost] = summary["workers"]["lost"]
    assert (lost["pid"], lost["on_loss"]) == (worker.pid, "run_ended")
    assert summary["duration_s"] < 120


def _wait_for_window(out: Path, index: int, timeout_s: float) -> None:
    """Poll the store until a request window of `index` has requests."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _requests_per_window(out).get(index):
            return
        time.sleep(0.25)
    raise AssertionError(f"window {index} never got requests")


def _requests_per_window(out: Path) -> dict[int, int]:
    try:
        db = sqlite3.connect(out / "soak.db")
        try:
            rows = db.execute("select window_index, requests from request_windows where scenario = '*'").fetchall()
        finally:
            db.close()
    except sqlite3.OperationalError:
        return {}  # not created yet
    return {index: requests for index, requests in rows}


def _windows(out: Path) -> tuple:
    with Store.open(f"sqlite:///{out / 'soak.db'}", read_only=True) as store:
        (run,) = store.list_runs()
        events = store.read_events(run.id)
    return build_windows(run, min(run.duration_s, run.planned_duration_s), events)


def test_a_larger_share_takes_effect_from_now_and_scales_the_rate():
    board = SharedBoard(share=0.5)
    board.update({"segments": [[time.time() - 10, 8.0]]})
    board.reshare(1.0)
    now = time.time()
    assert board.plan.rate_at(now - 5) == pytest.approx(4.0)  # the past keeps its share
    assert board.plan.rate_at(now + 1) == pytest.approx(8.0)  # from now on: the whole rate
    board.update({"segments": [[now + 5, 2.0]]})
    assert board.plan.rate_at(now + 6) == pytest.approx(2.0)  # later segments come at the new share
    assert Segment(now + 5, 2.0) in board.plan.segments


@pytest.mark.timeout(120)
@pytest.mark.parametrize("burstiness", [None, 2.0], ids=["poisson-shares", "dealt-times"])
def test_a_local_worker_that_dies_is_lost_and_the_other_takes_the_whole_rate(mock_server, burstiness):
    import psutil
    from loadtools import make_config, run_load, wait_for

    model = mock_server.model(ttft_ms=20, itl_ms=5, tokens=5)
    config = make_config(duration_s=20, rate_rps=20, seed=5, workers=2, burstiness=burstiness)

    def kill_one(run) -> None:
        assert wait_for(lambda: len(run.records) >= 10, timeout_s=30)  # both workers are under way
        children = [p for p in psutil.Process().children() if "soak.load.worker" in " ".join(p.cmdline())]
        assert len(children) == 2
        children[1].kill()
        assert wait_for(lambda: run.events_of("worker_lost"), timeout_s=10)
        run.killed_at = time.time()

    run = run_load(config, mock_server.url, model, during=kill_one)
    [lost] = run.events_of("worker_lost")
    assert lost["why"] == "its process exited with code -9" and lost["local"] is True
    assert (lost["remaining"], lost["share"], lost["on_loss"]) == (1, 1.0, "redistributed")
    assert run.counters.workers == 1
    # Times already dealt to the lost worker reach at most one look-ahead past its loss; after that the survivor
    # sends every arrival. Dealt times come from one seeded clock, so the plan says exactly which those are.
    phases = run.handle.phase_plan
    start_t, end_t = run.killed_at + LOOKAHEAD_S, phases.end_t - 0.5
    assert end_t - start_t > 3
    sent = [r for r in run.records if start_t < r.intended_t < end_t]
    if burstiness is None:  # each worker draws its own share: the survivor's stream is its own, at the whole rate
        assert len(sent) > 0.7 * 20 * (end_t - start_t)  # the whole 20 req/s, not its old 10
    else:
        plan = RatePlan(phases.segments(phases.t0, phases.end_t + 1.0))
        planned = [t for t in plan_arrivals(plan, 5, end_t, burstiness) if t > start_t]
        assert len(sent) >= 0.95 * len(planned) > 0, (len(sent), len(planned))


def test_a_worker_clock_more_than_a_quarter_second_off_is_noted():
    from soak.load.pool import Member, WorkerPool, _warn_clock_offsets

    members = {"a": Member("a", 0, "h1", 11, clock_offset_s=0.1), "b": Member("b", 1, "h2", 12, clock_offset_s=-0.8)}
    said: list[str] = []
    _warn_clock_offsets(WorkerPool(environment=None, address="h0:5557", expected=2, members=members), said.append)
    assert said == ["note: the clock of load worker 1 (h2, pid 12) is -0.80 s off this host's; its arrivals run "
                    "that much early or late (synchronise the clocks, e.g. with NTP)"]


def test_workers_are_never_sent_the_database_url():
    from soak.config import resolve_config
    from soak.load.distributed import worker_view

    config = resolve_config({"duration": "1m", "db": "postgresql://soak:s3cret@db.internal/soak",
                             "expect_workers": 1}, environ={})
    sent = worker_view(config)
    assert "s3cret" not in sent and "db.internal" not in sent
    assert RunConfig.model_validate_json(sent).load == config.load  # the worker still gets the whole load
