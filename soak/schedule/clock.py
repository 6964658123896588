"""UTC time as the scheduling tables store it."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    """ISO-8601 in the moment's own zone (UTC for database columns), seconds precision."""
    return None if moment is None else moment.isoformat(timespec="seconds")
