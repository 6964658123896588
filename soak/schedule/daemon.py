"""Scheduled soak runs: cron parsing (Sunday = 0), the persistent job store, and the daemon that fires them.

A schedule is one APScheduler job in the run database's `apscheduler_jobs` table: its id is the schedule's
name, its trigger the parsed cron, its kwargs the schedule (cron text, time zone, `soak start` arguments, the
name of the webhook variable). `soak schedule …` commands edit that table through a scheduler started paused;
`soak daemon` runs the one live scheduler of the database and notices their edits by waking it every poll.

Each fire runs `soak start ARGS --out OUT --db DB` as a child process with `SOAK_SCHEDULE_NAME` set, one at a
time per daemon, never while another run holds `<out>/.soak.lock`; whatever happens is written to
`schedule_events`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from soak.errors import EXIT_USAGE, ConfigError, SoakError, StorageError
from soak.run.locking import daemon_lock_path, hold_daemon_lock, lock_holder, run_lock_holder, run_lock_path
from soak.store.schedule_models import (
    EVENT_FAILED,
    EVENT_FINISHED,
    EVENT_MISSED,
    EVENT_NOTIFIED,
    EVENT_NOTIFY_FAILED,
    EVENT_SKIPPED,
    EVENT_STARTED,
    EVENT_STOPPING,
    ScheduleEvent,
    ScheduleRequest,
)

log = logging.getLogger("soak.schedule")

JOBS_TABLE = "apscheduler_jobs"
JOB_FUNC = "soak.schedule:fire_scheduled"
SCHEDULE_ENV = "SOAK_SCHEDULE_NAME"
# A fire up to an hour late (daemon restarting, host rebooting at 20:00 on a Friday) still runs; later than
# that it is recorded as missed. Coalescing turns a weekend of missed fires into (at most) one run.
DEFAULT_MISFIRE_GRACE_S = 3600.0
DEFAULT_POLL_S = 5.0
# soak start stops load and writes its report within 30 s of SIGTERM; the rest is the server's shutdown.
DEFAULT_STOP_TIMEOUT_S = 90.0
TRIGGER_CRON, TRIGGER_RUN_NOW = "cron", "run-now"
SOAK_COMMAND = (sys.executable, "-m", "soak")  # the daemon's own interpreter and installation
LOCATION_FLAGS = ("--out", "--db")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnknownScheduleError(SoakError):
    """A schedule name the job store does not hold."""

    exit_code = EXIT_USAGE


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """ISO-8601 in the moment's own zone (UTC for database columns), seconds precision."""
    return None if moment is None else moment.isoformat(timespec="seconds")


# -- cron --------------------------------------------------------------------------------------------

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
# Cron numbering: Sunday = 0 (and 7). APScheduler 3 numbers Monday = 0, so soak only ever hands it names.
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _day_number(text: str) -> int:
    """A day-of-week token as a cron number 0–7: a digit or a three-letter English name."""
    token = text.strip().lower()
    if token.isdigit() and 0 <= int(token) <= 7:
        return int(token)
    if token in DAY_NAMES:
        return DAY_NAMES.index(token)
    raise ValueError(f"day-of-week {text!r} is not 0–7 (Sunday = 0 or 7) or a day name")


def _day_item_numbers(item: str) -> set[int]:
    """Days (0–6) of one comma item: `*`, `N`, `A-B`, each optionally `/STEP` (as in Vixie cron)."""
    base, _, step_text = item.partition("/")
    if step_text and not step_text.isdigit() or step_text == "0":
        raise ValueError(f"bad step in day-of-week {item!r}")
    step = int(step_text or 1)
    if base == "*":
        first, last = 0, 6
    elif "-" in base:
        first, last = (_day_number(part) for part in base.split("-", 1))
        if first > last:
            raise ValueError(f"day-of-week range {base!r} runs backwards (write it as two items)")
    else:
        first = _day_number(base)
        last = 7 if step_text else first  # "5/2" means 5 to the end, stepping 2
    return {day % 7 for day in range(first, last + 1, step)}


def weekday_names(field_text: str) -> str:
    """A cron day-of-week field as APScheduler day names: `0` → `sun`, `1-5` → `mon,tue,wed,thu,fri`."""
    days: set[int] = set()
    for item in field_text.split(","):
        if not item:
            raise ValueError(f"empty item in day-of-week {field_text!r}")
        days |= _day_item_numbers(item)
    if days == set(range(7)):
        return "*"
    return ",".join(DAY_NAMES[day] for day in sorted(days))


def parse_timezone(name: str | None) -> tzinfo:
    """A zoneinfo zone by IANA name; the host's zone when None. Unknown names are a ConfigError."""
    if name is None:
        return ZoneInfo(host_timezone_name())
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {name!r}: give an IANA name such as Europe/Berlin or UTC") from None


def host_timezone_name() -> str:
    """The host's IANA zone name (what cron on this host would use), UTC when the host has none."""
    try:
        from tzlocal import get_localzone_name

        name = get_localzone_name() or "UTC"
        ZoneInfo(name)
        return name
    except Exception:  # noqa: BLE001 - tzlocal raises assorted errors on hosts without a zone; UTC is cron's fallback
        return "UTC"


def _cron_fields(expression: str) -> list[str]:
    text = CRON_ALIASES.get(expression.strip().lower(), expression)
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
    return fields


def cron_trigger(expression: str, timezone: tzinfo):  # noqa: ANN201 - an APScheduler trigger
    """Parse a five-field crontab line (Sunday = 0) into an APScheduler trigger in `timezone`.

    As in cron, when both day-of-month and day-of-week are restricted a day matching either fires.
    Raises ConfigError with one line when the expression is invalid or can never fire.
    """
    from apscheduler.triggers.combining import OrTrigger
    from apscheduler.triggers.cron import CronTrigger

    try:
        minute, hour, day, month, day_of_week = _cron_fields(expression)
        weekdays = weekday_names(day_of_week)

        def make(day_field: str, weekday_field: str) -> CronTrigger:
            return CronTrigger(minute=minute, hour=hour, day=day_field, month=month,
                               day_of_week=weekday_field, timezone=timezone)

        if day.startswith("*") or day_of_week.startswith("*"):
            trigger = make(day, weekdays)
        else:
            trigger = OrTrigger([make(day, "*"), make("*", weekdays)])
    except ValueError as exc:
        raise ConfigError(f"invalid cron expression {expression!r}: {exc}") from None
    if trigger.get_next_fire_time(None, datetime.now(timezone)) is None:
        raise ConfigError(f"invalid cron expression {expression!r}: it never fires")
    return trigger


# -- schedules ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule as stored in its job's kwargs (plain types, so old pickles survive code changes)."""

    name: str
    cron: str
    timezone: str
    start_args: tuple[str, ...] = ()
    notify_env: str | None = None
    workdir: str | None = None  # relative paths in start_args are read from here, as at `add` time

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["start_args"] = list(self.start_args)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduleSpec:
        known = {key: data.get(key) for key in cls.__dataclass_fields__}
        known["start_args"] = tuple(known.get("start_args") or ())
        return cls(**known)


def check_names(name: str, notify_env: str | None) -> None:
    """Schedule names go into file names and notify variables into os.environ lookups: keep both plain."""
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"invalid schedule name {name!r}: use letters, digits, '.', '_' or '-' (≤ 128)")
    if notify_env is not None and not ENV_NAME_PATTERN.fullmatch(notify_env):
        raise ConfigError(f"--notify-env wants an environment variable name, not {notify_env!r}")


def _given_location_flag(args: Sequence[str]) -> str | None:
    for arg in args:
        for flag in LOCATION_FLAGS:
            if arg == flag or arg.startswith(flag + "="):
                return flag
    return None


def validate_start_args(args: Sequence[str]):  # noqa: ANN201 - RunConfig
    """Parse `args` with the real `soak start` parser and resolve the config, without running anything.

    The daemon adds --out and --db itself (the schedule's own database), so giving them here is refused.
    """
    import click

    from soak.cli.start import start, start_flags
    from soak.config import resolve_config

    flag = _given_location_flag(args)
    if flag:
        raise ConfigError(f"{flag} is not a start argument of a schedule: give it to `soak schedule add` and "
                          "`soak daemon` (the run goes to the schedule's own folder and database)")
    try:
        ctx = start.make_context("start", list(args), resilient_parsing=False)
    except click.exceptions.Exit:
        raise ConfigError("the start arguments asked for help or the version instead of a run") from None
    except click.ClickException as exc:
        raise ConfigError(f"invalid start arguments: {exc.format_message()}") from None
    options = dict(ctx.params)
    options.pop("json_output", None)
    return resolve_config(start_flags(options))


def make_scheduler(engine: Engine, max_workers: int = 4):  # noqa: ANN201 - BackgroundScheduler
    """A (not yet started) scheduler whose one job store is the run database."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    store = SQLAlchemyJobStore(engine=engine, tablename=JOBS_TABLE)
    return BackgroundScheduler(jobstores={"default": store},
                               executors={"default": ThreadPoolExecutor(max_workers)},
                               job_defaults={"coalesce": True, "max_instances": 1,
                                             "misfire_grace_time": int(DEFAULT_MISFIRE_GRACE_S)},
                               timezone=UTC)


class JobTable:
    """APScheduler's job table, read and edited through its job store with a scheduler that never starts.

    A started scheduler, even a paused one, processes due jobs once while it shuts down, so a `schedule list`
    through one could eat a fire meant for the daemon. Only the daemon starts a scheduler on this table.
    """

    def __init__(self, engine: Engine):
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

        self.scheduler = make_scheduler(engine, max_workers=1)  # builds and restores Job objects only
        self.store = SQLAlchemyJobStore(engine=engine, tablename=JOBS_TABLE)
        try:
            self.store.start(self.scheduler, "default")
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot open the schedule table: {getattr(exc, 'orig', None) or exc}") from None

    def get(self, name: str) -> Any:
        """The job of schedule `name`; UnknownScheduleError when there is none."""
        job = self.store.lookup_job(name)
        if job is None:
            raise UnknownScheduleError(f"unknown schedule {name!r}")
        return job

    def all(self) -> list[Any]:
        return self.store.get_all_jobs()

    def add(self, spec: ScheduleSpec, trigger: Any, misfire_grace_s: float, next_run_time: datetime) -> Any:
        """Store a new job; ConfigError when the name is taken."""
        from apscheduler.job import Job
        from apscheduler.jobstores.base import ConflictingIdError

        job = Job(self.scheduler, id=spec.name, name=spec.name, func=JOB_FUNC, trigger=trigger,
                  executor="default", args=(), kwargs={"spec": spec.to_dict()},
                  misfire_grace_time=int(misfire_grace_s), coalesce=True, max_instances=1,
                  next_run_time=next_run_time)
        try:
            self.store.add_job(job)
        except ConflictingIdError:
            raise ConfigError(f"schedule {spec.name!r} already exists: remove it first") from None
        return job

    def set_next_run_time(self, job: Any, when: datetime | None) -> Any:
        """None pauses the job (what APScheduler's pause_job does)."""
        job._modify(next_run_time=when)  # noqa: SLF001 - the scheduler's own modify_job does exactly this
        self.store.update_job(job)
        return job

    def remove(self, name: str) -> None:
        self.get(name)
        self.store.remove_job(name)


def _spec_of(job: Any) -> ScheduleSpec:
    return ScheduleSpec.from_dict(job.kwargs["spec"])


def describe_job(job: Any) -> dict[str, Any]:
    """A job as the plain dict `schedule list` shows."""
    spec = _spec_of(job)
    return {"name": spec.name, "cron": spec.cron, "timezone": spec.timezone, "paused": job.next_run_time is None,
            "next_fire_at": iso(job.next_run_time), "start_args": list(spec.start_args),
            "notify_env": spec.notify_env, "misfire_grace_s": job.misfire_grace_time, "workdir": spec.workdir}


def add_schedule(engine: Engine, spec: ScheduleSpec, misfire_grace_s: float = DEFAULT_MISFIRE_GRACE_S,
                 first_fire_at: datetime | None = None) -> dict[str, Any]:
    """Validate and store a new schedule; ConfigError when the name is taken or anything is invalid.

    `first_fire_at` (tests, demos) overrides the first fire time; later fires follow the cron.
    """
    check_names(spec.name, spec.notify_env)
    trigger = cron_trigger(spec.cron, parse_timezone(spec.timezone))
    validate_start_args(spec.start_args)
    next_run_time = first_fire_at or trigger.get_next_fire_time(None, utc_now())
    return describe_job(JobTable(engine).add(spec, trigger, misfire_grace_s, next_run_time))


def get_schedule(engine: Engine, name: str) -> dict[str, Any]:
    """One schedule; UnknownScheduleError when there is none."""
    return describe_job(JobTable(engine).get(name))


def remove_schedule(engine: Engine, name: str) -> None:
    """Delete a schedule and its pending run-now requests (its event history stays)."""
    JobTable(engine).remove(name)
    with writing(engine) as session:
        session.execute(update(ScheduleRequest).where(ScheduleRequest.schedule_name == name,
                                                      ScheduleRequest.handled_at.is_(None))
                        .values(handled_at=iso(utc_now())))


def pause_schedule(engine: Engine, name: str) -> dict[str, Any]:
    """Stop firing until resumed (a run in progress is not touched)."""
    table = JobTable(engine)
    return describe_job(table.set_next_run_time(table.get(name), None))


def resume_schedule(engine: Engine, name: str) -> dict[str, Any]:
    """Fire again from the next cron time after now (fires missed while paused are not made up)."""
    table = JobTable(engine)
    job = table.get(name)
    return describe_job(table.set_next_run_time(job, job.trigger.get_next_fire_time(None, utc_now())))


def request_run_now(engine: Engine, name: str, out_dir: Path) -> dict[str, Any]:
    """Queue a fire for the daemon (paused schedules too); says which daemon, if any, will take it."""
    get_schedule(engine, name)
    with writing(engine) as session:
        request = ScheduleRequest(schedule_name=name, requested_at=iso(utc_now()))
        session.add(request)
        session.flush()
        request_id = request.id
    return {"request_id": request_id, "schedule": name, "daemon_pid": lock_holder(daemon_lock_path(out_dir))}


# -- events, requests and last runs -----------------------------------------------------------------

@contextmanager
def writing(engine: Engine) -> Iterator[Session]:
    """A short write transaction; database errors become StorageError."""
    try:
        with Session(engine) as session, session.begin():
            yield session
    except SQLAlchemyError as exc:
        raise StorageError(f"cannot write the database: {getattr(exc, 'orig', None) or exc}") from None


def record_event(engine: Engine, name: str, kind: str, message: str = "", **fields: Any) -> None:
    """Append one row to `schedule_events` and say it in the daemon's log."""
    log.info("%s: %s%s", name, kind, f" — {message}" if message else "")
    with writing(engine) as session:
        session.add(ScheduleEvent(schedule_name=name, at=iso(utc_now()), kind=kind, message=message, **fields))


def list_events(engine: Engine, name: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Events, newest first, of one schedule or of all."""
    from soak.store.queries import reading, row_to_dict

    query = select(ScheduleEvent).order_by(ScheduleEvent.id.desc()).limit(limit)
    if name is not None:
        query = query.where(ScheduleEvent.schedule_name == name)
    with reading(engine) as rows:
        return [row_to_dict(event) for event in rows(query)]


def take_requests(engine: Engine) -> list[dict[str, Any]]:
    """Claim every pending run-now request (marking it handled) and return them, oldest first."""
    now = iso(utc_now())
    with writing(engine) as session:
        pending = list(session.scalars(select(ScheduleRequest).where(ScheduleRequest.handled_at.is_(None))
                                       .order_by(ScheduleRequest.id)))
        for request in pending:
            request.handled_at = now
        return [{"id": r.id, "schedule_name": r.schedule_name, "requested_at": r.requested_at} for r in pending]


def last_run(engine: Engine, name: str) -> dict[str, Any] | None:
    """The newest run tagged with this schedule (or, failing that, named by its events), with verdict."""
    from soak.store.models import Run
    from soak.store.queries import effective_status, reading, row_to_dict

    query = select(Run).where(Run.schedule_name == name).order_by(Run.id.desc()).limit(1)
    with reading(engine) as rows:
        found = [row_to_dict(run) for run in rows(query)]
        if not found:
            run_ids = select(ScheduleEvent.run_id).where(ScheduleEvent.schedule_name == name,
                                                         ScheduleEvent.run_id.is_not(None))
            found = [row_to_dict(run) for run in rows(select(Run).where(Run.id.in_(run_ids))
                                                          .order_by(Run.id.desc()).limit(1))]
    if not found:
        return None
    run = found[0]
    return {"id": run["id"], "status": effective_status(run), "verdict": run["verdict"],
            "started_at": run["started_at"], "ended_at": run["ended_at"]}


def list_schedules(engine: Engine) -> list[dict[str, Any]]:
    """Every schedule by name, with next fire time, last run (and verdict) and last daemon event."""
    schedules = sorted((describe_job(job) for job in JobTable(engine).all()), key=lambda s: s["name"])
    for schedule in schedules:
        schedule["last_run"] = last_run(engine, schedule["name"])
        events = list_events(engine, schedule["name"], limit=1)
        schedule["last_event"] = ({k: events[0][k] for k in ("at", "kind", "message", "run_id", "exit_code")}
                                  if events else None)
    return schedules


# -- what a fire produced ---------------------------------------------------------------------------

def _run_started_by(engine: Engine, pid: int, since_epoch_s: float) -> dict[str, Any] | None:
    """The run row written by process `pid` after `since_epoch_s` (PIDs are reused, hence the time)."""
    from soak.store.models import Run
    from soak.store.queries import reading, row_to_dict

    query = (select(Run).where(Run.soak_pid == pid, Run.t0_epoch_s >= since_epoch_s - 1.0)
             .order_by(Run.id.desc()).limit(1))
    with reading(engine) as rows:
        found = [row_to_dict(run) for run in rows(query)]
    return found[0] if found else None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def summary_of_run(run: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """summary.json of a run: from its folder, else the database, else the little the run row says."""
    from soak.store.queries import effective_status

    for path in (Path(run["out_dir"]) / "summary.json", out_dir / run["id"] / "summary.json"):
        summary = _read_json(path)
        if summary:
            return summary
    if run.get("summary_json"):
        return json.loads(run["summary_json"])
    return {"schema": "soak.run.summary/1", "run_id": run["id"], "status": effective_status(run),
            "started_at": run["started_at"], "ended_at": run["ended_at"], "verdict": run["verdict"],
            "verdict_reason": run["verdict_reason"] or "the run left no summary (it crashed or was killed)",
            "report_html": None}


def _last_line(path: Path, limit_chars: int = 300) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:limit_chars] if lines else ""


def summary_without_run(exit_code: int, log_path: Path) -> dict[str, Any]:
    """What to report when `soak start` ended before it recorded a run."""
    tail = _last_line(log_path)
    reason = f"soak start exited with {describe_exit(exit_code)} before recording a run"
    return {"schema": "soak.run.summary/1", "run_id": None, "status": "crashed", "verdict": None,
            "verdict_reason": f"{reason}: {tail}" if tail else reason, "report_html": None,
            "log": str(log_path), "exit_code": exit_code}


def describe_exit(exit_code: int) -> str:
    """`code 2` or `signal SIGKILL`, from a Popen return code."""
    if exit_code < 0:
        try:
            return f"signal {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"signal {-exit_code}"
    return f"code {exit_code}"


@dataclass
class FireOutcome:
    """What one fire's child process left behind."""

    exit_code: int
    summary: dict[str, Any]
    run_id: str | None
    log_path: Path


# -- the daemon --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DaemonSettings:
    """Where the daemon works and how it stops."""

    out_dir: Path
    db_url: str
    on_stop: Literal["wait", "stop"] = "stop"
    poll_s: float = DEFAULT_POLL_S
    stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S
    soak_command: tuple[str, ...] = field(default=SOAK_COMMAND)  # argv before "start"


_ACTIVE: Daemon | None = None  # the daemon of this process; jobs are stored by reference, not with state


def fire_scheduled(spec: dict[str, Any]) -> None:
    """APScheduler's job function: hand the fire to this process's daemon."""
    daemon = _ACTIVE
    if daemon is None:
        log.error("schedule %s fired outside a running daemon; ignored", spec.get("name"))
        return
    daemon.fire(ScheduleSpec.from_dict(spec), TRIGGER_CRON)


class Daemon:
    """Runs the database's schedules: one run at a time, never over a held run lock, every outcome recorded."""

    def __init__(self, engine: Engine, settings: DaemonSettings):
        self.engine = engine
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
        global _ACTIVE
        with hold_daemon_lock(self.settings.out_dir):
            _ACTIVE = self  # before the scheduler starts: it may fire an overdue job at once
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
                _ACTIVE = None

    def _start_scheduler(self) -> Any:
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED

        scheduler = make_scheduler(self.engine)
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
            record_event(self.engine, name, EVENT_STOPPING, f"daemon stopping; run pid {pid} will "
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
            record_event(self.engine, event.job_id, EVENT_MISSED, "the daemon was not running (or was busy) at "
                         "the fire time, past the misfire grace time", trigger=TRIGGER_CRON, scheduled_for=scheduled)
        elif event.code == EVENT_JOB_ERROR:
            record_event(self.engine, event.job_id, EVENT_FAILED, f"{type(event.exception).__name__}: "
                         f"{event.exception}", trigger=TRIGGER_CRON, scheduled_for=scheduled)
        else:
            record_event(self.engine, event.job_id, EVENT_SKIPPED, "the previous fire of this schedule is still "
                         "running", trigger=TRIGGER_CRON, scheduled_for=scheduled)

    def _start_requested_runs(self) -> None:
        for request in take_requests(self.engine):
            name = request["schedule_name"]
            job = self.scheduler.get_job(name)
            if job is None:
                record_event(self.engine, name, EVENT_SKIPPED, "run-now for a schedule that no longer exists",
                             trigger=TRIGGER_RUN_NOW)
                continue
            if self._request_too_old(request, job):
                record_event(self.engine, name, EVENT_MISSED, f"run-now requested at {request['requested_at']} "
                             "is older than the misfire grace time", trigger=TRIGGER_RUN_NOW)
                continue
            thread = threading.Thread(target=self.fire, args=(_spec_of(job), TRIGGER_RUN_NOW),
                                      name=f"run-now-{name}", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
            thread.start()

    @staticmethod
    def _request_too_old(request: dict[str, Any], job: Any) -> bool:
        age_s = (utc_now() - datetime.fromisoformat(request["requested_at"])).total_seconds()
        grace_s = job.misfire_grace_time if job.misfire_grace_time is not None else DEFAULT_MISFIRE_GRACE_S
        return age_s > grace_s

    # one fire
    def fire(self, spec: ScheduleSpec, trigger: str) -> None:
        """Run the schedule's soak once, unless something else is running; record and notify the outcome."""
        try:
            self._fire(spec, trigger)
        except Exception as exc:  # a thread's exception would vanish; record it instead
            log.exception("fire of %s failed", spec.name)
            record_event(self.engine, spec.name, EVENT_FAILED, f"daemon error: {type(exc).__name__}: {exc}",
                         trigger=trigger)

    def _fire(self, spec: ScheduleSpec, trigger: str) -> None:
        if self._stopping.is_set():
            record_event(self.engine, spec.name, EVENT_SKIPPED, "the daemon is stopping", trigger=trigger)
            return
        if not self._run_slot.acquire(blocking=False):
            busy = ", ".join(f"{name} (pid {pid})" for pid, (name, _c) in self._running().items()) or "another"
            record_event(self.engine, spec.name, EVENT_SKIPPED, f"scheduled run {busy} is still in progress",
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
            record_event(self.engine, spec.name, EVENT_SKIPPED, f"{run_lock_path(self.settings.out_dir)} is held "
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
        return [*self.settings.soak_command, "start", *spec.start_args, "--out", str(self.settings.out_dir), *db]

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
        record_event(self.engine, spec.name, EVENT_STARTED, f"soak start running; output in {log_path}",
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
        run = _run_started_by(self.engine, pid, spawned_epoch_s)
        summary = summary_of_run(run, self.settings.out_dir) if run else summary_without_run(exit_code, log_path)
        run_id = run["id"] if run else None
        if summary.get("status") == "running":  # its process is gone, whatever the heartbeat says
            summary = {**summary, "status": "aborted"}
        kind = EVENT_FINISHED if summary.get("verdict") else EVENT_FAILED
        message = (f"soak start exited with {describe_exit(exit_code)}; status {summary.get('status')}, verdict "
                   f"{summary.get('verdict')}: {summary.get('verdict_reason') or ''}" if run
                   else summary["verdict_reason"])
        record_event(self.engine, spec.name, kind, message, trigger=trigger, pid=pid, run_id=run_id,
                     exit_code=exit_code, verdict=summary.get("verdict"))
        return FireOutcome(exit_code, summary, run_id, log_path)

    def _notify(self, spec: ScheduleSpec, outcome: FireOutcome) -> None:
        from soak.schedule.notify import notify

        if not spec.notify_env:
            return
        url = os.environ.get(spec.notify_env, "").strip()
        if not url:
            record_event(self.engine, spec.name, EVENT_NOTIFY_FAILED, f"${spec.notify_env} is not set in the "
                         "daemon's environment", run_id=outcome.run_id)
            return
        delivered = notify(url, outcome.summary, schedule_name=spec.name)
        record_event(self.engine, spec.name, EVENT_NOTIFIED if delivered else EVENT_NOTIFY_FAILED,
                     f"webhook from ${spec.notify_env}" + ("" if delivered else " did not accept the summary"),
                     run_id=outcome.run_id)


def run_daemon(engine: Engine, settings: DaemonSettings) -> None:
    """Serve the schedules of `engine`'s database until SIGTERM/SIGINT."""
    Daemon(engine, settings).run()


def first_fire_at(delay_s: float | None) -> datetime | None:
    """`now + delay_s` as an aware UTC datetime, or None."""
    return None if delay_s is None else utc_now() + timedelta(seconds=delay_s)
