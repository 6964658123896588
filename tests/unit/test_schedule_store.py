"""Schedules in the run database: add, list, pause, resume, remove, run-now, events; argument validation."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from sqlalchemy import inspect

from soak.cli.schedule import validate_start_args
from soak.errors import ConfigError
from soak.schedule.events import list_events, record_event, take_requests
from soak.schedule.jobs import (
    ScheduleSpec,
    UnknownScheduleError,
    add_schedule,
    get_schedule,
    list_schedules,
    pause_schedule,
    remove_schedule,
    request_run_now,
    resume_schedule,
)
from soak.store import Store

pytestmark = pytest.mark.timeout(60)

ARGS = ("--target", "http://127.0.0.1:9", "--duration", "20s")


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path / 'soak.db'}"


@pytest.fixture
def store(db_url):
    return Store.open(db_url)


def spec(name: str = "weekend", cron: str = "0 20 * * FRI", **overrides) -> ScheduleSpec:
    return ScheduleSpec(**{"name": name, "cron": cron, "timezone": "Europe/Berlin", "start_args": ARGS,
                           **overrides})


def add(store, schedule: ScheduleSpec, **options):
    """add_schedule as `soak schedule add` calls it: start arguments checked by soak start's own parser."""
    return add_schedule(store, schedule, check_start_args=validate_start_args, **options)


def test_migration_creates_the_schedule_tables(store):
    tables = set(inspect(store.engine).get_table_names())
    assert {"schedule_events", "schedule_requests", "apscheduler_jobs", "runs"} <= tables


def test_add_then_list_shows_next_fire_in_the_schedule_zone(store):
    added = add(store, spec(notify_env="SOAK_TEST_HOOK"))
    assert added.name == "weekend" and not added.paused
    next_fire = datetime.fromisoformat(added.next_fire_at)
    assert next_fire.strftime("%A %H:%M") == "Friday 20:00"
    assert next_fire.utcoffset() in (timedelta(hours=1), timedelta(hours=2))
    [listed] = list_schedules(store)
    assert listed.schedule.start_args == ARGS
    assert listed.as_dict() == {**added.as_dict(), "last_run": None, "last_event": None}  # `list --json`
    assert added.as_dict()["start_args"] == list(ARGS)
    assert listed.schedule.notify_env == "SOAK_TEST_HOOK"
    assert listed.last_run is None and listed.last_event is None


def test_schedules_survive_reopening_the_database(db_url):
    add(Store.open(db_url), spec())
    reopened = Store.open(db_url)
    assert [s.schedule.name for s in list_schedules(reopened)] == ["weekend"]
    assert get_schedule(reopened, "weekend").next_fire_at


def test_duplicate_names_are_refused(store):
    add(store, spec())
    with pytest.raises(ConfigError, match="already exists"):
        add(store, spec(cron="0 6 * * 1"))


@pytest.mark.parametrize("bad, fragment", [
    ({"cron": "0 20 * * FRX"}, "invalid cron"),
    ({"timezone": "Nowhere/Land"}, "unknown time zone"),
    ({"name": "has space"}, "invalid schedule name"),
    ({"name": "../escape"}, "invalid schedule name"),
    ({"notify_env": "NOT-A-VAR"}, "--notify-env"),
    ({"start_args": ("--target", "http://127.0.0.1:9")}, "no duration"),
    ({"start_args": ("--duration", "20s", "--no-such-flag")}, "No such option"),
    ({"start_args": ("--duration", "20s", "--rate", "fast")}, "--rate"),
    ({"start_args": ("--duration", "20s", "--out", "/tmp/elsewhere")}, "--out is not a start argument"),
    ({"start_args": ("--duration", "20s", "--db=sqlite:///x.db")}, "--db is not a start argument"),
    ({"start_args": ("--duration", "20s", "--warmup", "30s")}, "warm-up"),
])
def test_invalid_schedules_are_refused_before_anything_is_stored(store, bad, fragment):
    with pytest.raises(ConfigError) as caught:
        add(store, spec(**bad))
    assert fragment in str(caught.value)
    assert caught.value.exit_code == 2
    assert list_schedules(store) == []


def test_start_arguments_are_parsed_by_soak_start_itself():
    config = validate_start_args(("--target", "http://127.0.0.1:9/v1", "--hours", "48", "--rate", "3"))
    assert config.duration_s == 48 * 3600
    assert config.target.url == "http://127.0.0.1:9"
    assert config.load.rate_rps == 3


def test_add_runs_the_given_start_argument_check_after_the_library_checks(store):
    checked = []
    add_schedule(store, spec(), check_start_args=checked.append)
    assert checked == [ARGS]
    with pytest.raises(ConfigError, match="--out is not a start argument"):
        add_schedule(store, spec(name="other", start_args=("--out", "x")), check_start_args=checked.append)
    assert len(checked) == 1


def test_pause_and_resume(store):
    add(store, spec())
    paused = pause_schedule(store, "weekend")
    assert paused.paused and paused.next_fire_at is None
    assert list_schedules(store)[0].schedule.paused
    resumed = resume_schedule(store, "weekend")
    assert not resumed.paused and resumed.next_fire_at


def test_unknown_names_are_exit_2(store, tmp_path):
    for action in (remove_schedule, pause_schedule, resume_schedule, get_schedule):
        with pytest.raises(UnknownScheduleError) as caught:
            action(store, "nope")
        assert caught.value.exit_code == 2
    with pytest.raises(UnknownScheduleError):
        request_run_now(store, "nope", tmp_path)


def test_run_now_queues_one_request_the_daemon_takes_once(store, tmp_path):
    add(store, spec())
    pause_schedule(store, "weekend")  # run-now works for paused schedules too
    request = request_run_now(store, "weekend", tmp_path)
    assert request.daemon_pid is None
    taken = take_requests(store)
    assert [r.schedule_name for r in taken] == ["weekend"]
    assert take_requests(store) == []


def test_remove_drops_the_job_and_pending_requests_but_keeps_history(store, tmp_path):
    add(store, spec())
    request_run_now(store, "weekend", tmp_path)
    record_event(store, "weekend", "skipped", "test")
    remove_schedule(store, "weekend")
    assert list_schedules(store) == []
    assert take_requests(store) == []
    assert [e.kind for e in list_events(store, "weekend")] == ["skipped"]


def test_first_fire_override(store):
    soon = datetime.now().astimezone() + timedelta(seconds=30)
    added = add(store, spec(cron="0 0 1 1 *"), first_fire_at=soon)
    assert abs((datetime.fromisoformat(added.next_fire_at) - soon).total_seconds()) < 1


def test_events_are_newest_first_and_filtered_by_schedule(store):
    record_event(store, "a", "started")
    record_event(store, "b", "skipped", "lock held")
    record_event(store, "a", "finished", run_id="r1", exit_code=0, verdict="PASS")
    assert [e.kind for e in list_events(store)] == ["finished", "skipped", "started"]
    [latest, _] = list_events(store, "a")
    assert (latest.run_id, latest.exit_code, latest.verdict) == ("r1", 0, "PASS")
