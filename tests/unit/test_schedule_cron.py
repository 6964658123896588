"""Cron parsing for schedules: standard five fields, Sunday = 0, cron's day OR rule, time zones."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from soak.errors import ConfigError
from soak.schedule.cron import cron_trigger, parse_timezone, weekday_names

pytestmark = pytest.mark.timeout(30)

UTC = ZoneInfo("UTC")
# A Wednesday; the week after it runs Thu 3, Fri 4, Sat 5, Sun 6, Mon 7 December 2026.
WEDNESDAY = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def next_fires(expression: str, count: int = 3, start: datetime = WEDNESDAY, tz: ZoneInfo = UTC) -> list[datetime]:
    trigger = cron_trigger(expression, tz)
    fires, previous, now = [], None, start
    for _ in range(count):
        fire = trigger.get_next_fire_time(previous, now)
        fires.append(fire)
        previous, now = fire, fire
    return fires


@pytest.mark.parametrize("field, names", [
    ("0", "sun"), ("7", "sun"), ("1", "mon"), ("5", "fri"), ("6", "sat"),
    ("FRI", "fri"), ("fri", "fri"), ("Sun", "sun"),
    ("1-5", "mon,tue,wed,thu,fri"), ("MON-FRI", "mon,tue,wed,thu,fri"),
    ("0,6", "sun,sat"), ("6,0", "sun,sat"), ("5-7", "sun,fri,sat"),
    ("*/2", "sun,tue,thu,sat"), ("1-5/2", "mon,wed,fri"), ("5/1", "sun,fri,sat"),
    ("*", "*"), ("0-6", "*"), ("1-7", "*"),
])
def test_day_of_week_numbers_are_cron_numbers(field, names):
    assert weekday_names(field) == names


@pytest.mark.parametrize("field", ["8", "-1", "5-1", "FRX", "1,,2", "*/0", "*/x", "mon-"])
def test_bad_day_of_week_is_refused(field):
    with pytest.raises(ValueError):
        weekday_names(field)


def test_sunday_zero_fires_on_sunday_not_monday():
    fire = next_fires("30 6 * * 0", 1)[0]
    assert fire == datetime(2026, 12, 6, 6, 30, tzinfo=UTC)
    assert fire.strftime("%A") == "Sunday"


def test_friday_evening_by_name_and_by_number_agree():
    by_name = next_fires("0 20 * * FRI", 2)
    assert by_name == next_fires("0 20 * * 5", 2)
    assert by_name[0] == datetime(2026, 12, 4, 20, 0, tzinfo=UTC)
    assert all(fire.strftime("%A") == "Friday" for fire in by_name)


def test_weekday_range_skips_the_weekend():
    fires = next_fires("0 9 * * 1-5", 5)
    assert [fire.strftime("%a") for fire in fires] == ["Thu", "Fri", "Mon", "Tue", "Wed"]


def test_every_minute():
    fires = next_fires("* * * * *", 3)
    assert [(b - a).total_seconds() for a, b in zip(fires, fires[1:])] == [60, 60]


def test_day_of_month_and_day_of_week_together_fire_on_either():
    # Cron fires on the 5th of the month OR on any Sunday when both fields are restricted.
    fires = next_fires("0 0 5 * 0", 3)
    assert [fire.day for fire in fires] == [5, 6, 13]


def test_a_star_step_in_one_day_field_keeps_the_and_rule():
    fires = next_fires("0 0 */10 * 0", 2, start=datetime(2026, 1, 1, tzinfo=UTC))
    assert all(fire.strftime("%A") == "Sunday" and fire.day in (1, 11, 21, 31) for fire in fires)


@pytest.mark.parametrize("alias, expression", [("@daily", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
                                               ("@hourly", "0 * * * *")])
def test_aliases(alias, expression):
    assert next_fires(alias, 2) == next_fires(expression, 2)


@pytest.mark.parametrize("expression, fragment", [
    ("0 20 * *", "expected 5 fields"), ("0 20 * * * *", "expected 5 fields"), ("61 * * * *", "61"),
    ("0 25 * * *", "25"), ("0 0 32 * *", "32"), ("0 0 * 13 *", "13"), ("0 20 * * FRX", "FRX"),
    ("0 0 31 2 *", "never fires"), ("", "expected 5 fields"),
])
def test_invalid_expressions_are_config_errors_with_one_line(expression, fragment):
    with pytest.raises(ConfigError) as caught:
        cron_trigger(expression, UTC)
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert fragment in message and "\n" not in message


def test_times_are_in_the_given_zone():
    berlin = ZoneInfo("Europe/Berlin")
    fire = next_fires("0 20 * * FRI", 1, tz=berlin)[0]
    assert fire.utcoffset().total_seconds() == 3600
    assert fire.astimezone(UTC) == datetime(2026, 12, 4, 19, 0, tzinfo=UTC)


def test_cron_follows_daylight_saving_time():
    new_york = ZoneInfo("America/New_York")
    start = datetime(2026, 10, 30, tzinfo=new_york)  # DST ends on Sunday 1 November 2026
    fires = next_fires("0 20 * * *", 4, start=start, tz=new_york)
    assert {fire.hour for fire in fires} == {20}
    assert {fire.astimezone(UTC).hour for fire in fires} == {0, 1}


def test_timezones():
    assert parse_timezone("Europe/Berlin") == ZoneInfo("Europe/Berlin")
    assert parse_timezone(None) is not None  # the host's zone
    for bad in ("Mars/Olympus", "not a zone", "../etc/passwd"):
        with pytest.raises(ConfigError, match="unknown time zone"):
            parse_timezone(bad)
