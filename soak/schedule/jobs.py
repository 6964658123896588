"""Schedules as APScheduler jobs in the run database's `apscheduler_jobs` table.

A schedule is one job: its id is the schedule's name, its trigger the parsed cron, its kwargs the schedule
(cron text, time zone, `soak start` arguments, the name of the webhook variable). `soak schedule …` commands
edit that table without starting a scheduler; `soak daemon` runs the one live scheduler of the database.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from soak.errors import EXIT_USAGE, ConfigError, SoakError, StorageError
from soak.run.locking import daemon_lock_path, lock_holder
from soak.schedule.clock import iso, utc_now
from soak.schedule.cron import cron_trigger, parse_timezone
from soak.schedule.events import add_request, cancel_requests, list_events
from soak.schedule.outcome import last_run
from soak.store.records import StoredRun
from soak.store.schedule_models import ScheduleEvent
from soak.store.store import Store

JOBS_TABLE = "apscheduler_jobs"
# Stored in every job row and resolved whenever a job is loaded: existing databases hold this exact text.
JOB_FUNC = "soak.schedule:fire_scheduled"
# A fire up to an hour late (daemon restarting, host rebooting at 20:00 on a Friday) still runs; later than
# that it is recorded as missed. Coalescing turns a weekend of missed fires into (at most) one run.
DEFAULT_MISFIRE_GRACE_S = 3600.0
LOCATION_FLAGS = ("--out", "--db")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Parses a schedule's `soak start` arguments as `soak start` would, raising ConfigError for anything it refuses.
StartArgsCheck = Callable[[Sequence[str]], object]


class UnknownScheduleError(SoakError):
    """A schedule name the job store does not hold."""

    exit_code = EXIT_USAGE


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


def refuse_location_flags(args: Sequence[str]) -> None:
    """The daemon adds --out and --db itself (the schedule's own database), so start arguments may not."""
    for arg in args:
        for flag in LOCATION_FLAGS:
            if arg == flag or arg.startswith(flag + "="):
                raise ConfigError(f"{flag} is not a start argument of a schedule: give it to `soak schedule add` "
                                  "and `soak daemon` (the run goes to the schedule's own folder and database)")


def make_scheduler(store: Store, executor: Any = None):  # returns a BackgroundScheduler
    """A (not yet started) scheduler whose one job store is the run database.

    `executor` runs its due jobs; the default, a one-thread pool, suits schedulers that never start.
    """
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    jobs = SQLAlchemyJobStore(engine=store.engine, tablename=JOBS_TABLE)
    return BackgroundScheduler(jobstores={"default": jobs},
                               executors={"default": executor or ThreadPoolExecutor(1)},
                               job_defaults={"coalesce": True, "max_instances": 1,
                                             "misfire_grace_time": int(DEFAULT_MISFIRE_GRACE_S)},
                               timezone=UTC)


class JobTable:
    """APScheduler's job table, read and edited through its job store with a scheduler that never starts.

    A started scheduler, even a paused one, processes due jobs once while it shuts down, so a `schedule list`
    through one could eat a fire meant for the daemon. Only the daemon starts a scheduler on this table.
    """

    def __init__(self, store: Store):
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore

        self.scheduler = make_scheduler(store)  # builds and restores Job objects only
        self.jobs = SQLAlchemyJobStore(engine=store.engine, tablename=JOBS_TABLE)
        try:
            self.jobs.start(self.scheduler, "default")
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot open the schedule table: {getattr(exc, 'orig', None) or exc}") from None

    def get(self, name: str) -> Any:
        """The job of schedule `name`; UnknownScheduleError when there is none."""
        job = self.jobs.lookup_job(name)
        if job is None:
            raise UnknownScheduleError(f"unknown schedule {name!r}")
        return job

    def all(self) -> list[Any]:
        return self.jobs.get_all_jobs()

    def add(self, spec: ScheduleSpec, trigger: Any, misfire_grace_s: float, next_run_time: datetime) -> Any:
        """Store a new job; ConfigError when the name is taken."""
        from apscheduler.job import Job
        from apscheduler.jobstores.base import ConflictingIdError

        job = Job(self.scheduler, id=spec.name, name=spec.name, func=JOB_FUNC, trigger=trigger,
                  executor="default", args=(), kwargs={"spec": spec.to_dict()},
                  misfire_grace_time=int(misfire_grace_s), coalesce=True, max_instances=1,
                  next_run_time=next_run_time)
        try:
            self.jobs.add_job(job)
        except ConflictingIdError:
            raise ConfigError(f"schedule {spec.name!r} already exists: remove it first") from None
        return job

    def set_next_run_time(self, job: Any, when: datetime | None) -> Any:
        """None pauses the job (what APScheduler's pause_job does)."""
        job._modify(next_run_time=when)  # the scheduler's own modify_job does exactly this
        self.jobs.update_job(job)
        return job

    def remove(self, name: str) -> None:
        self.get(name)
        self.jobs.remove_job(name)


def spec_of(job: Any) -> ScheduleSpec:
    """The schedule a job stores."""
    return ScheduleSpec.from_dict(job.kwargs["spec"])


@dataclass(frozen=True)
class Schedule:
    """A stored schedule as the `soak schedule` commands show it: its spec, whether it is paused, when it fires."""

    name: str
    cron: str
    timezone: str
    paused: bool
    next_fire_at: str | None
    start_args: tuple[str, ...]
    notify_env: str | None
    misfire_grace_s: float | None
    workdir: str | None

    def as_dict(self) -> dict[str, Any]:
        """The JSON of `soak schedule add --json` (and each entry of `list --json`)."""
        return {**asdict(self), "start_args": list(self.start_args)}


@dataclass(frozen=True)
class ScheduleListing:
    """One row of `soak schedule list`: a schedule, the newest run it fired, and the daemon's last event of it."""

    schedule: Schedule
    last_run: StoredRun | None
    last_event: ScheduleEvent | None

    def as_dict(self) -> dict[str, Any]:
        """The JSON of one entry of `soak schedule list --json`: the few fields of the run and the event it shows."""
        run, event = self.last_run, self.last_event
        return {**self.schedule.as_dict(),
                "last_run": run and {"id": run.id, "status": run.status, "verdict": run.verdict,
                                     "started_at": run.started_at, "ended_at": run.ended_at},
                "last_event": event and {"at": event.at, "kind": event.kind, "message": event.message,
                                         "run_id": event.run_id, "exit_code": event.exit_code}}


def describe_job(job: Any) -> Schedule:  # job: an APScheduler Job
    """The `Schedule` of a stored job."""
    spec = spec_of(job)
    return Schedule(name=spec.name, cron=spec.cron, timezone=spec.timezone, paused=job.next_run_time is None,
                    next_fire_at=iso(job.next_run_time), start_args=tuple(spec.start_args),
                    notify_env=spec.notify_env, misfire_grace_s=job.misfire_grace_time, workdir=spec.workdir)


def add_schedule(store: Store, spec: ScheduleSpec, *, check_start_args: StartArgsCheck,
                 misfire_grace_s: float = DEFAULT_MISFIRE_GRACE_S,
                 first_fire_at: datetime | None = None) -> Schedule:
    """Validate and store a new schedule; ConfigError when the name is taken or anything is invalid.

    `check_start_args` parses the start arguments as `soak start` would; the command line owns that parser,
    so it passes it in. `first_fire_at` (tests, demos) overrides the first fire time; later fires follow the cron.
    """
    check_names(spec.name, spec.notify_env)
    trigger = cron_trigger(spec.cron, parse_timezone(spec.timezone))
    refuse_location_flags(spec.start_args)
    check_start_args(spec.start_args)
    next_run_time = first_fire_at or trigger.get_next_fire_time(None, utc_now())
    return describe_job(JobTable(store).add(spec, trigger, misfire_grace_s, next_run_time))


def get_schedule(store: Store, name: str) -> Schedule:
    """One schedule; UnknownScheduleError when there is none."""
    return describe_job(JobTable(store).get(name))


def remove_schedule(store: Store, name: str) -> None:
    """Delete a schedule and its pending run-now requests (its event history stays)."""
    JobTable(store).remove(name)
    cancel_requests(store, name)


def pause_schedule(store: Store, name: str) -> Schedule:
    """Stop firing until resumed (a run in progress is not touched)."""
    table = JobTable(store)
    return describe_job(table.set_next_run_time(table.get(name), None))


def resume_schedule(store: Store, name: str) -> Schedule:
    """Fire again from the next cron time after now (fires missed while paused are not made up)."""
    table = JobTable(store)
    job = table.get(name)
    return describe_job(table.set_next_run_time(job, job.trigger.get_next_fire_time(None, utc_now())))


@dataclass(frozen=True)
class QueuedRun:
    """A run-now request just queued, and the PID of the daemon that will take it (None: none is running)."""

    request_id: int
    schedule: str
    daemon_pid: int | None


def request_run_now(store: Store, name: str, out_dir: Path) -> QueuedRun:
    """Queue a fire for the daemon (paused schedules too); says which daemon, if any, will take it."""
    get_schedule(store, name)
    request_id = add_request(store, name)
    return QueuedRun(request_id, name, lock_holder(daemon_lock_path(out_dir)))


def list_schedules(store: Store) -> list[ScheduleListing]:
    """Every schedule by name, with next fire time, last run (and verdict) and last daemon event."""
    schedules = sorted((describe_job(job) for job in JobTable(store).all()), key=lambda s: s.name)
    return [ScheduleListing(schedule, last_run(store, schedule.name),
                            next(iter(list_events(store, schedule.name, limit=1)), None))
            for schedule in schedules]


def first_fire_at(delay_s: float | None) -> datetime | None:
    """`now + delay_s` as an aware UTC datetime, or None."""
    return None if delay_s is None else utc_now() + timedelta(seconds=delay_s)
