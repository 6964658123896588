"""The daemon in-process, firing a stand-in for `soak start`: outcomes, overlap refusal, stopping, notifying."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from soak.cli.schedule import validate_start_args
from soak.run.locking import hold_run_lock
from soak.schedule.daemon import Daemon, DaemonSettings, fire_scheduled
from soak.schedule.events import TRIGGER_RUN_NOW, list_events
from soak.schedule.jobs import JOB_FUNC, JobTable, ScheduleSpec, add_schedule, list_schedules, request_run_now
from soak.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "schedule"))
from schedule_helpers import WebhookReceiver, wait_until

pytestmark = pytest.mark.timeout(90)

# Stand-in for `soak start`: argv is `start --mode M --out OUT --db DB`. "finish" writes a run row and a
# summary as soak start would; "fail" exits 2 before any run; "hang" waits for SIGTERM, then finalises.
FAKE_START = textwrap.dedent('''
    import json, os, signal, sys, threading, time
    from datetime import UTC, datetime
    from pathlib import Path
    from sqlalchemy.orm import Session
    from soak.store import Store
    from soak.store.models import Run

    args = sys.argv[1:]
    mode, out, db = (args[args.index(flag) + 1] for flag in ("--mode", "--out", "--db"))
    Path(out, "env-" + mode).write_text(os.environ.get("SOAK_SCHEDULE_NAME", ""))
    if mode == "fail":
        print("soak: error: target unreachable", file=sys.stderr)
        sys.exit(2)
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + str(os.getpid())[-4:]
    run_dir = Path(out, run_id)
    run_dir.mkdir(parents=True)
    store = Store.open(db)
    now = datetime.now(UTC).isoformat()
    with Session(store.engine) as session, session.begin():
        session.add(Run(id=run_id, status="running", started_at=now, t0_epoch_s=time.time(),
                        planned_duration_s=20, warmup_s=1, window_s=5, soak_pid=os.getpid(),
                        out_dir=str(run_dir), target_kind="external", config_json="{}", environment_json="{}",
                        schedule_name=os.environ.get("SOAK_SCHEDULE_NAME")))
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    status, verdict = "completed", "PASS"
    if mode == "hang":
        Path(out, "hanging").write_text(str(os.getpid()))
        stopped.wait(60)
        status, verdict = "aborted", "INCONCLUSIVE"
    summary = {"schema": "soak.run.summary/1", "run_id": run_id, "status": status, "verdict": verdict,
               "verdict_reason": "stand-in", "report_html": str(run_dir / "report.html")}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with Session(store.engine) as session, session.begin():
        run = session.get(Run, run_id)
        run.status, run.verdict, run.summary_json = status, verdict, json.dumps(summary)
    sys.exit({"PASS": 0, "INCONCLUSIVE": 3}[verdict])
''')


@pytest.fixture
def fake_start(tmp_path):
    script = tmp_path / "fake_start.py"
    script.write_text(FAKE_START)
    return script


@pytest.fixture
def out(tmp_path):
    return tmp_path / "out"


@pytest.fixture
def store(out):
    return Store.open(f"sqlite:///{out / 'soak.db'}")


class RunningDaemon:
    """A Daemon serving in a thread of the test process."""

    def __init__(self, store, settings: DaemonSettings):
        self.daemon = Daemon(store, settings)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        wait_until(lambda: self.daemon.ready.is_set() or not self.thread.is_alive(), 20, "the daemon to start")
        assert self.error is None, self.error

    def _serve(self) -> None:
        try:
            self.daemon.run(install_signals=False)
        except BaseException as exc:  # surfaced to the test
            self.error = exc

    def stop(self, timeout_s: float = 30) -> None:
        self.daemon.request_stop()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "daemon did not stop"
        assert self.error is None, self.error


def settings(out: Path, fake_start: Path, **overrides) -> DaemonSettings:
    return DaemonSettings(out_dir=out, db_url=f"sqlite:///{out / 'soak.db'}", poll_s=0.1,
                          soak_command=(sys.executable, str(fake_start)), **overrides)


def spec(mode: str, name: str = "nightly", notify_env: str | None = None) -> ScheduleSpec:
    return ScheduleSpec(name=name, cron="0 3 * * *", timezone="UTC", start_args=("--mode", mode),
                        notify_env=notify_env)


def kinds(store, name: str = "nightly") -> list[str]:
    return [event.kind for event in reversed(list_events(store, name))]


def events_with(store, kind: str, name: str = "nightly"):
    return lambda: [e for e in list_events(store, name) if e.kind == kind]


def test_a_fire_runs_start_records_the_run_and_notifies(store, out, fake_start, monkeypatch):
    with WebhookReceiver() as hook:
        monkeypatch.setenv("SOAK_TEST_HOOK", hook.url)
        running = RunningDaemon(store, settings(out, fake_start))
        try:
            running.daemon.fire(spec("finish", notify_env="SOAK_TEST_HOOK"), TRIGGER_RUN_NOW)
            body = hook.bodies.get(timeout=10)
        finally:
            running.stop()
    assert kinds(store) == ["started", "finished", "notified"]
    finished = next(e for e in list_events(store) if e.kind == "finished")
    assert finished.exit_code == 0 and finished.verdict == "PASS" and finished.run_id
    assert body["run_id"] == finished.run_id and body["verdict"] == "PASS"
    assert "nightly" in body["text"] and "PASS" in body["text"]
    assert (out / "env-finish").read_text() == "nightly"  # SOAK_SCHEDULE_NAME reached the run
    assert any("SECRET-TOKEN" in e.message for e in list_events(store)) is False


def test_a_run_that_fails_before_starting_is_recorded_and_notified(store, out, fake_start, monkeypatch):
    with WebhookReceiver() as hook:
        monkeypatch.setenv("SOAK_TEST_HOOK", hook.url)
        running = RunningDaemon(store, settings(out, fake_start))
        try:
            running.daemon.fire(spec("fail", notify_env="SOAK_TEST_HOOK"), TRIGGER_RUN_NOW)
            body = hook.bodies.get(timeout=10)
        finally:
            running.stop()
    failed = next(e for e in list_events(store) if e.kind == "failed")
    assert failed.exit_code == 2 and failed.run_id is None
    assert "target unreachable" in failed.message
    assert body["status"] == "crashed" and body["verdict"] is None and "target unreachable" in body["text"]


def test_a_missing_webhook_variable_is_recorded(store, out, fake_start, monkeypatch):
    monkeypatch.delenv("SOAK_TEST_HOOK", raising=False)
    running = RunningDaemon(store, settings(out, fake_start))
    try:
        running.daemon.fire(spec("fail", notify_env="SOAK_TEST_HOOK"), TRIGGER_RUN_NOW)
    finally:
        running.stop()
    assert kinds(store)[-1] == "notify_failed"
    assert "$SOAK_TEST_HOOK is not set" in list_events(store)[0].message


def test_a_fire_is_skipped_while_the_run_lock_is_held(store, out, fake_start):
    running = RunningDaemon(store, settings(out, fake_start))
    try:
        with hold_run_lock(out):
            running.daemon.fire(spec("finish"), TRIGGER_RUN_NOW)
    finally:
        running.stop()
    [skipped] = list_events(store)
    assert skipped.kind == "skipped" and ".soak.lock" in skipped.message
    assert not (out / "env-finish").exists()


def test_only_one_scheduled_run_at_a_time_and_stop_finalises_it(store, out, fake_start):
    running = RunningDaemon(store, settings(out, fake_start, on_stop="stop"))
    first = threading.Thread(target=running.daemon.fire, args=(spec("hang"), TRIGGER_RUN_NOW))
    first.start()
    wait_until(lambda: (out / "hanging").exists(), 20, "the first run to start")
    running.daemon.fire(spec("finish", name="other"), TRIGGER_RUN_NOW)
    assert kinds(store, "other") == ["skipped"]
    assert "nightly" in list_events(store, "other")[0].message
    running.stop()
    first.join(10)
    assert kinds(store) == ["started", "stopping", "finished"]
    finished = list_events(store)[0]
    assert finished.exit_code == 3 and finished.verdict == "INCONCLUSIVE"


def test_on_stop_wait_lets_the_run_finish_and_a_second_stop_ends_it(store, out, fake_start):
    running = RunningDaemon(store, settings(out, fake_start, on_stop="wait"))
    first = threading.Thread(target=running.daemon.fire, args=(spec("hang"), TRIGGER_RUN_NOW))
    first.start()
    pid = int(wait_until(lambda: (out / "hanging").exists() and (out / "hanging").read_text(), 20, "the run"))
    running.daemon.request_stop()
    wait_until(events_with(store, "stopping"), 10, "the stopping event")
    assert running.thread.is_alive() and not events_with(store, "finished")()  # still waiting for the run
    running.daemon.request_stop()  # a second stop turns "wait" into "stop"
    running.thread.join(30)
    first.join(10)
    assert not running.thread.is_alive()
    finished = events_with(store, "finished")()[0]
    assert finished.pid == pid and finished.exit_code == 3


def test_run_now_requests_reach_the_daemon_and_the_run_shows_in_list(store, out, fake_start):
    add_schedule(store, ScheduleSpec(name="nightly", cron="0 3 * * *", timezone="UTC",
                                      start_args=("--target", "http://127.0.0.1:9", "--duration", "20s")),
                 check_start_args=validate_start_args)
    daemon_settings = settings(out, fake_start)
    # Replace the (validated) stored arguments' effect: the stand-in reads --mode, defaulting via the spec.
    running = RunningDaemon(store, daemon_settings)
    try:
        request = request_run_now(store, "nightly", out)
        assert request.daemon_pid is not None
        wait_until(events_with(store, "failed"), 20, "the requested run to end")
    finally:
        running.stop()
    assert kinds(store) == ["started", "failed"]  # the stand-in has no --mode here: it exits with an error
    [listed] = list_schedules(store)
    assert listed.last_event.kind == "failed"


def add_stand_in_job(store, mode: str, next_run_time, misfire_grace_s: float = 3600) -> None:
    """A job whose arguments only the stand-in understands (add_schedule would validate them as soak start's)."""
    from apscheduler.triggers.cron import CronTrigger

    JobTable(store).add(spec(mode), CronTrigger(hour=3, timezone="UTC"), misfire_grace_s, next_run_time)


def test_cron_fires_go_through_the_scheduler(store, out, fake_start):
    add_stand_in_job(store, "finish", datetime.now(UTC) + timedelta(seconds=0.5))
    running = RunningDaemon(store, settings(out, fake_start))
    try:
        wait_until(events_with(store, "finished"), 30, "the cron fire to finish")
    finally:
        running.stop()
    assert kinds(store) == ["started", "finished"]
    [listed] = list_schedules(store)
    assert listed.last_run.verdict == "PASS"
    assert datetime.fromisoformat(listed.schedule.next_fire_at).hour == 3


def test_a_fire_missed_past_the_grace_time_is_recorded(store, out, fake_start):
    add_stand_in_job(store, "finish", datetime.now(UTC) - timedelta(hours=2), misfire_grace_s=60)
    list_schedules(store)  # reading the table must not consume the overdue fire
    running = RunningDaemon(store, settings(out, fake_start))
    try:
        wait_until(events_with(store, "missed"), 20, "the missed event")
    finally:
        running.stop()
    assert kinds(store) == ["missed"]
    assert not (out / "env-finish").exists()
    assert datetime.fromisoformat(list_schedules(store)[0].schedule.next_fire_at) > datetime.now(UTC)


def test_only_one_daemon_per_folder(store, out, fake_start):
    from soak.run.locking import DaemonLockHeldError

    running = RunningDaemon(store, settings(out, fake_start))
    try:
        with pytest.raises(DaemonLockHeldError):
            Daemon(store, settings(out, fake_start)).run(install_signals=False)
    finally:
        running.stop()


def test_summary_json_written_by_the_run_is_what_is_sent(store, out, fake_start, monkeypatch):
    with WebhookReceiver() as hook:
        monkeypatch.setenv("SOAK_TEST_HOOK", hook.url)
        running = RunningDaemon(store, settings(out, fake_start))
        try:
            running.daemon.fire(spec("finish", notify_env="SOAK_TEST_HOOK"), TRIGGER_RUN_NOW)
            body = hook.bodies.get(timeout=10)
        finally:
            running.stop()
    on_disk = json.loads((out / body["run_id"] / "summary.json").read_text())
    assert {k: body[k] for k in on_disk} == on_disk


def test_a_fire_due_while_stopping_is_left_for_the_next_daemon(store, out, fake_start):
    running = RunningDaemon(store, settings(out, fake_start, on_stop="wait"))
    first = threading.Thread(target=running.daemon.fire, args=(spec("hang", name="long"), TRIGGER_RUN_NOW))
    first.start()
    wait_until(lambda: (out / "hanging").exists(), 20, "the long run to start")
    running.daemon.request_stop()
    wait_until(events_with(store, "stopping", "long"), 10, "the daemon to pause")
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    add_stand_in_job(store, "finish", due)
    running.daemon.request_stop()
    running.thread.join(30)
    first.join(10)
    assert not running.thread.is_alive()
    assert JobTable(store).get("nightly").next_run_time == due
    assert kinds(store) == []


def test_a_database_password_never_reaches_the_command_line(out, fake_start):
    daemon = Daemon(None, DaemonSettings(out_dir=out, db_url="postgresql+psycopg://soak:s3cret@db/soak",
                                         soak_command=(sys.executable, str(fake_start))))
    argv = daemon.start_argv(spec("finish"))
    assert "s3cret" not in " ".join(argv) and argv[-2:] == ["--out", str(out)]
    env = daemon.start_env(spec("finish"))
    assert env["SOAK_DB"].endswith("s3cret@db/soak") and env["SOAK_SCHEDULE_NAME"] == "nightly"
    plain = Daemon(None, settings(out, fake_start)).start_argv(spec("finish"))
    assert plain[-4:] == ["--out", str(out), "--db", f"sqlite:///{out / 'soak.db'}"]


def test_the_daemons_config_file_reaches_its_runs(out, fake_start, tmp_path):
    config = tmp_path / "soak.toml"
    argv = Daemon(None, settings(out, fake_start, config_file=config)).start_argv(spec("finish"))
    assert argv[argv.index("--config") + 1] == str(config)
    assert argv[-4:] == ["--out", str(out), "--db", f"sqlite:///{out / 'soak.db'}"]  # flags still win
    assert "--config" not in Daemon(None, settings(out, fake_start)).start_argv(spec("finish"))


def test_stored_jobs_name_a_function_that_still_resolves():
    from apscheduler.util import ref_to_obj

    assert JOB_FUNC == "soak.schedule:fire_scheduled"  # existing databases hold this text
    assert ref_to_obj(JOB_FUNC) is fire_scheduled


def test_the_fire_executor_calls_its_own_fire_with_the_job_kwargs():
    from apscheduler.jobstores.memory import MemoryJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    from soak.schedule.executor import FireExecutor

    fired = []
    scheduler = BackgroundScheduler(jobstores={"default": MemoryJobStore()}, timezone=UTC,
                                    executors={"default": FireExecutor(lambda **kwargs: fired.append(kwargs), 1)})
    scheduler.start()
    try:
        scheduler.add_job(JOB_FUNC, id="nightly", kwargs={"spec": spec("finish").to_dict()})
        wait_until(lambda: fired, 10, "the job to fire")
    finally:
        scheduler.shutdown(wait=True)
    assert fired == [{"spec": spec("finish").to_dict()}]
