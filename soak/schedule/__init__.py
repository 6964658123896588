"""Scheduled soak runs: cron parsing, the job table, schedule events, run outcomes, the daemon, notifications.

`fire_scheduled` is named by reference (`soak.schedule:fire_scheduled`) in every stored job, so it must stay
importable from this package.
"""

from soak.schedule.cron import cron_trigger, host_timezone_name, parse_timezone, weekday_names
from soak.schedule.daemon import Daemon, DaemonSettings, fire_scheduled, run_daemon
from soak.schedule.events import TRIGGER_CRON, TRIGGER_RUN_NOW, list_events, record_event, take_requests
from soak.schedule.jobs import (
    JobTable,
    ScheduleSpec,
    StartArgsCheck,
    UnknownScheduleError,
    add_schedule,
    first_fire_at,
    get_schedule,
    list_schedules,
    pause_schedule,
    remove_schedule,
    request_run_now,
    resume_schedule,
)
from soak.schedule.outcome import FireOutcome, last_run

__all__ = [
    "TRIGGER_CRON", "TRIGGER_RUN_NOW", "Daemon", "DaemonSettings", "FireOutcome", "JobTable", "ScheduleSpec",
    "StartArgsCheck", "UnknownScheduleError", "add_schedule", "cron_trigger", "fire_scheduled", "first_fire_at",
    "get_schedule", "host_timezone_name", "last_run", "list_events", "list_schedules", "parse_timezone",
    "pause_schedule", "record_event", "remove_schedule", "request_run_now", "resume_schedule", "run_daemon",
    "take_requests", "weekday_names",
]
