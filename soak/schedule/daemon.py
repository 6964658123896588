"""`soak daemon`: the one live scheduler of a run database, firing its schedules.

Each fire runs `soak start ARGS --out OUT --db DB` as a child process with `SOAK_SCHEDULE_NAME` set, one at a
time per daemon, never while another run holds `<out>/.soak.lock`; whatever happens is written to
`schedule_events` and, when the schedule names a webhook variable, notified.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy.exc import SQLAlchemyError

from soak.errors import SoakError, StorageError
from soak.run.locking import hold_daemon_lock, run_lock_holder, run_lock_path
from soak.schedule.clock import iso, utc_now
from soak.schedule.events import TRIGGER_CRON, TRIGGER_RUN_NOW, RunNowRequest, record_event, take_requests
from soak.schedule.jobs import DEFAULT_MISFIRE_GRACE_S, ScheduleSpec, make_scheduler, spec_of
from soak.schedule.outcome import FireOutcome, read_outcome
from soak.store.schedule_models import (
    EVENT_FAILED,
    EVENT_FINISHED,
    EVENT_MISSED,
    EVENT_NOTIFIED,
    EVENT_NOTIFY_FAILED,
    EVENT_SKIPPED,
    EVENT_STARTED,
    EVENT_STOPPING,
)
from soak.store.store import Store

log = logging.getLogger("soak.schedule")

SCHEDULE_ENV = "SOAK_SCHEDULE_NAME"
DEFAULT_POLL_S = 5.0
# soak start stops load and writes its report within 30 s of SIGTERM; the rest is the server's shutdown.
DEFAULT_STOP_TIMEOUT_S = 90.0
SOAK_COMMAND = (sys.executable, "-m", "soak")  # the daemon's own interpreter and installation
# Runs are one at a time, but a second schedule's fire needs a thread to be recorded as skipped meanwhile.
FIRE_THREADS = 4


@dataclass(frozen=True)
class DaemonSettings:
    """Where the daemon works and how it stops."""

    out_dir: Path
    db_url: str
    on_stop: Literal["wait", "stop"] = "stop"
    poll_s: float = DEFAULT_POLL_S
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S
    soak_command: tuple[str, ...] = field(default=SOAK_COMMAND)  # argv before "start"
    config_file: Path | None = None  # the daemon's own --config, handed on so its runs read the same file


def fire_scheduled(spec: dict[str, Any]) -> None:
    """The job function the job table names; a daemon never runs it (its executor calls its own fire).

    Reaching it means a scheduler other than a daemon's ran the job: say so and leave the fire alone.
    """
    log.error("schedule %s fired outside a running daemon; ignored", spec.get("name"))


class Daemon:
    """Runs the database's schedules: one run at a time, never over a held run lock, every outcome recorded."""

    def __init__(self, store: Store, settings: DaemonSettings):
        self.store = store
        self.settings = settings
        self.on_stop = settings.on_stop
        self.scheduler: Any = None
        self._stop_requested = threading.Event()
        self._stopping = threading.Event()
        self._run_slot = threading.Lock()  # one scheduled run at a time, whichever schedule
        self._children: dict[int, tuple[str, subprocess.Popen]] = {}
        # Reentrant: the signal handler reads the children on the main thread, which may hold it already.
        self._children_changed = threading.Condition(threading.RLock())
        self._threads: list[threading.Thread] = []
        self.ready = threading.Event()

    # lifecycle
    def run(self, install_signals: bool = True) -> None:
        """Serve until asked to stop; raises DaemonLockHeldError when another daemon serves this folder."""
        with hold_daemon_lock(self.settings.out_dir):
            self.scheduler = self._start_scheduler()
            if install_signals and threading.current_thread() is threading.main_thread():
                for signum in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, lambda s, _frame: self.request_stop(s))
            try:
                self._announce()
                self.ready.set()
                self._loop()
            finally:
                self._shutdown()

    def _start_scheduler(self) -> Any:
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED

        from soak.schedule.executor import FireExecutor

        # Due jobs come back to this daemon through its own executor: no process global names the daemon.
        scheduler = make_scheduler(self.store, FireExecutor(self._fire_stored, FIRE_THREADS))
        scheduler.add_listener(self._on_scheduler_event, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_ERROR)
        try:
            scheduler.start()
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot open the schedule table: {getattr(exc, 'orig', None) or exc}") from None
        return scheduler

    def _announce(self) -> None:
        jobs = [job for job in self.scheduler.get_jobs() if job.next_run_time is not None]
        upcoming = min(jobs, key=lambda job: job.next_run_time, default=None)
        next_text = f"; next: {upcoming.id} at {iso(upcoming.next_run_time)}" if upcoming else ""
        log.info("ready: %d schedule(s), on stop: %s, runs in %s%s", len(self.scheduler.get_jobs()), self.on_stop,
                 self.settings.out_dir, next_text)

    def _loop(self) -> None:
        # Other commands edit the job table behind the scheduler's back: wake it each poll to re-read it.
        while True:
            try:
                self._start_requested_runs()
            except SoakError as exc:  # a busy or briefly unreachable database must not end the daemon
                log.warning("cannot read run-now requests: %s", exc)
            self.scheduler.wakeup()
            if self._stop_requested.wait(self.settings.poll_s):
                return

    def request_stop(self, signum: int | None = None) -> None:
        """First call: stop (per --on-stop). A second call turns `wait` into `stop`."""
        if self._stop_requested.is_set() and self.on_stop == "wait":
            log.info("second stop request: stopping the runs in progress")
            self.on_stop = "stop"
            self._signal_children(signal.SIGTERM)
        name = signal.Signals(signum).name if signum else "request"
        log.info("stop requested (%s)", name)
        self._stop_requested.set()

    def _shutdown(self) -> None:
        self._stopping.set()
        self.scheduler.pause()  # no new fires; those that race in are refused by _stopping
        for pid, (name, _child) in self._running().items():
            record_event(self.store, name, EVENT_STOPPING, f"daemon stopping; run pid {pid} will "
                         + ("be stopped (SIGTERM) and finalised" if self.on_stop == "stop" else "finish first"),
                         pid=pid)
        if self.on_stop == "stop":
            self._stop_children()
        self._wait_children()
        self._join_fires()
        # APScheduler processes due jobs once more as it shuts down; without its store it cannot consume a fire
        # that fell due while we were paused, so the next daemon still runs it (or records it missed).
        self.scheduler.remove_jobstore("default", shutdown=False)
        self.scheduler.shutdown(wait=True)
        log.info("stopped")

    def _running(self) -> dict[int, tuple[str, subprocess.Popen]]:
        with self._children_changed:
            return dict(self._children)

    def _signal_children(self, signum: int) -> None:
        for pid, (_name, child) in self._running().items():
            if child.poll() is None:
                log.info("sending %s to run pid %d", signal.Signals(signum).name, pid)
                child.send_signal(signum)

    def _stop_children(self) -> None:
        """SIGTERM each run, give them stop_timeout_s together to write their reports, then SIGKILL."""
        self._signal_children(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.stop_timeout_s
        for pid, (_name, child) in self._running().items():
            try:
                child.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                log.warning("run pid %d did not stop within %.0f s; killing it (finalise it with `soak close`)",
                            pid, self.settings.stop_timeout_s)
                child.kill()

    def _wait_children(self) -> None:
        # Timed waits keep the main thread responsive to a second SIGTERM while runs finish.
        with self._children_changed:
            while self._children:
                self._children_changed.wait(timeout=1.0)

    def _join_fires(self) -> None:
        """Let run-now fires record and notify their outcome (cron fires are joined by the scheduler)."""
        for thread in list(self._threads):
            while thread.is_alive():
                thread.join(timeout=1.0)

    # scheduler callbacks
    def _on_scheduler_event(self, event: Any) -> None:
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED

        # Job events carry one scheduled time, submission events (max instances) a list of them.
        times = getattr(event, "scheduled_run_times", None) or [getattr(event, "scheduled_run_time", None)]
        scheduled = iso(times[-1].astimezone(UTC)) if times[-1] else None
        if event.code == EVENT_JOB_MISSED:
            record_event(self.store, event.job_id, EVENT_MISSED, "the daemon was not running (or was busy) at "
                         "the fire time, past the misfire grace time", trigger=TRIGGER_CRON, scheduled_for=scheduled)
        elif event.code == EVENT_JOB_ERROR:
            record_event(self.store, event.job_id, EVENT_FAILED, f"{type(event.exception).__name__}: "
                         f"{event.exception}", trigger=TRIGGER_CRON, scheduled_for=scheduled)
        else:
            record_event(self.store, event.job_id, EVENT_SKIPPED, "the previous fire of this schedule is still "
                         "running", trigger=TRIGGER_CRON, scheduled_for=scheduled)

    def _start_requested_runs(self) -> None:
        for request in take_requests(self.store):
            name = request.schedule_name
            job = self.scheduler.get_job(name)
            if job is None:
                record_event(self.store, name, EVENT_SKIPPED, "run-now for a schedule that no longer exists",
                             trigger=TRIGGER_RUN_NOW)
                continue
            if self._request_too_old(request, job):
                record_event(self.store, name, EVENT_MISSED, f"run-now requested at {request.requested_at} "
                             "is older than the misfire grace time", trigger=TRIGGER_RUN_NOW)
                continue
            thread = threading.Thread(target=self.fire, args=(spec_of(job), TRIGGER_RUN_NOW),
                                      name=f"run-now-{name}", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    @staticmethod
    def _request_too_old(request: RunNowRequest, job: Any) -> bool:
        age_s = (utc_now() - datetime.fromisoformat(request.requested_at)).total_seconds()
        grace_s = job.misfire_grace_time if job.misfire_grace_time is not None else DEFAULT_MISFIRE_GRACE_S
        return age_s > grace_s

    # one fire
    def _fire_stored(self, spec: dict[str, Any]) -> None:
        """A cron fire: the executor calls this with the job's stored kwargs."""
        self.fire(ScheduleSpec.from_dict(spec), TRIGGER_CRON)

    def fire(self, spec: ScheduleSpec, trigger: str) -> None:
        """Run the schedule's soak once, unless something else is running; record and notify the outcome."""
        try:
            self._fire(spec, trigger)
        except Exception as exc:  # a thread's exception would vanish; record it instead
            log.exception("fire of %s failed", spec.name)
            record_event(self.store, spec.name, EVENT_FAILED, f"daemon error: {type(exc).__name__}: {exc}",
                         trigger=trigger)

    def _fire(self, spec: ScheduleSpec, trigger: str) -> None:
        if self._stopping.is_set():
            record_event(self.store, spec.name, EVENT_SKIPPED, "the daemon is stopping", trigger=trigger)
            return
        if not self._run_slot.acquire(blocking=False):
            busy = ", ".join(f"{name} (pid {pid})" for pid, (name, _c) in self._running().items()) or "another"
            record_event(self.store, spec.name, EVENT_SKIPPED, f"scheduled run {busy} is still in progress",
                         trigger=trigger)
            return
        try:
            outcome = self._run_unless_locked(spec, trigger)
        finally:
            self._run_slot.release()
        if outcome is not None:
            self._notify(spec, outcome)

    def _run_unless_locked(self, spec: ScheduleSpec, trigger: str) -> FireOutcome | None:
        holder = run_lock_holder(self.settings.out_dir)
        if holder is not None:
            by = f"pid {holder}" if holder else "another process"
            record_event(self.store, spec.name, EVENT_SKIPPED, f"{run_lock_path(self.settings.out_dir)} is held "
                         f"by {by}: a run with an embedded server is in progress", trigger=trigger, pid=holder or None)
            return None
        return self._run_child(spec, trigger)

    def _db_has_password(self) -> bool:
        from sqlalchemy.engine import make_url

        return bool(make_url(self.settings.db_url).password)

    def start_argv(self, spec: ScheduleSpec) -> list[str]:
        """The child's command line: soak start with the schedule's arguments, in this daemon's folder and DB."""
        # A database password would show in `ps`; such a URL goes through SOAK_DB instead (see start_env).
        db = [] if self._db_has_password() else ["--db", self.settings.db_url]
        # SOAK_CONFIG reaches the child through the environment; a --config flag has to be passed on.
        config = ["--config", os.path.abspath(self.settings.config_file)] if self.settings.config_file else []
        return [*self.settings.soak_command, "start", *spec.start_args, *config, "--out", str(self.settings.out_dir),
                *db]

    def start_env(self, spec: ScheduleSpec) -> dict[str, str]:
        """The daemon's environment plus the schedule's name (and the database URL when it holds a password)."""
        env = {**os.environ, SCHEDULE_ENV: spec.name}
        if self._db_has_password():
            env["SOAK_DB"] = self.settings.db_url
        return env

    def _log_path(self, spec: ScheduleSpec) -> Path:
        folder = self.settings.out_dir / "schedule-logs" / spec.name
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{utc_now().strftime('%Y%m%dT%H%M%SZ')}-{time.monotonic_ns() % 10**6:06d}.log"

    def _spawn(self, spec: ScheduleSpec, log_path: Path) -> subprocess.Popen:
        workdir = spec.workdir if spec.workdir and Path(spec.workdir).is_dir() else None
        env = self.start_env(spec)
        with open(log_path, "ab") as log_file:
            # A session of its own: a Ctrl-C meant for the daemon reaches the run only as the daemon decides.
            return subprocess.Popen(self.start_argv(spec), stdin=subprocess.DEVNULL, stdout=log_file,
                                    stderr=subprocess.STDOUT, env=env, cwd=workdir, start_new_session=True)

    def _run_child(self, spec: ScheduleSpec, trigger: str) -> FireOutcome:
        log_path = self._log_path(spec)
        spawned_epoch_s = time.time()
        child = self._spawn(spec, log_path)
        with self._children_changed:
            self._children[child.pid] = (spec.name, child)
        record_event(self.store, spec.name, EVENT_STARTED, f"soak start running; output in {log_path}",
                     trigger=trigger, pid=child.pid)
        try:
            exit_code = child.wait()
        finally:
            with self._children_changed:
                self._children.pop(child.pid, None)
                self._children_changed.notify_all()
        return self._record_outcome(spec, trigger, child.pid, exit_code, spawned_epoch_s, log_path)

    def _record_outcome(self, spec: ScheduleSpec, trigger: str, pid: int, exit_code: int,
                        spawned_epoch_s: float, log_path: Path) -> FireOutcome:
        outcome = read_outcome(self.store, self.settings.out_dir, pid, spawned_epoch_s, exit_code, log_path)
        record_event(self.store, spec.name, EVENT_FINISHED if outcome.has_verdict else EVENT_FAILED,
                     outcome.event_message(), trigger=trigger, pid=pid, run_id=outcome.run_id,
                     exit_code=exit_code, verdict=outcome.verdict)
        return outcome

    def _notify(self, spec: ScheduleSpec, outcome: FireOutcome) -> None:
        from soak.run.notify import notify

        if not spec.notify_env:
            return
        url = os.environ.get(spec.notify_env, "").strip()
        if not url:
            record_event(self.store, spec.name, EVENT_NOTIFY_FAILED, f"${spec.notify_env} is not set in the "
                         "daemon's environment", run_id=outcome.run_id)
            return
        delivered = notify(url, outcome.payload(), schedule_name=spec.name)
        record_event(self.store, spec.name, EVENT_NOTIFIED if delivered else EVENT_NOTIFY_FAILED,
                     f"webhook from ${spec.notify_env}" + ("" if delivered else " did not accept the summary"),
                     run_id=outcome.run_id)


def run_daemon(store: Store, settings: DaemonSettings) -> None:
    """Serve the schedules of `store`'s database until SIGTERM/SIGINT."""
    Daemon(store, settings).run()
