"""Crontab lines (Sunday = 0) and time zones, turned into APScheduler triggers."""

from __future__ import annotations

from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from soak.errors import ConfigError

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
    except Exception:  # tzlocal raises assorted errors on hosts without a zone; UTC is cron's fallback
        return "UTC"


def _cron_fields(expression: str) -> list[str]:
    text = CRON_ALIASES.get(expression.strip().lower(), expression)
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}")
    return fields


def cron_trigger(expression: str, timezone: tzinfo):  # returns an APScheduler trigger
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
