"""What the daemon did and what it was asked: rows of `schedule_events` and `schedule_requests`.

Every fire leaves events (started, finished, failed, skipped, missed, notified…); `soak schedule run-now`
leaves a request that the daemon claims on its next poll.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update

from soak.schedule.clock import iso, utc_now
from soak.store.schedule_models import ScheduleEvent, ScheduleRequest
from soak.store.store import Store

log = logging.getLogger("soak.schedule")

# What started a fire, as the events' `trigger` column says it.
TRIGGER_CRON, TRIGGER_RUN_NOW = "cron", "run-now"


def record_event(store: Store, name: str, kind: str, message: str = "", **fields: Any) -> None:
    """Append one row to `schedule_events` and say it in the daemon's log."""
    log.info("%s: %s%s", name, kind, f" — {message}" if message else "")
    with store.writing() as session:
        session.add(ScheduleEvent(schedule_name=name, at=iso(utc_now()), kind=kind, message=message, **fields))


def list_events(store: Store, name: str | None = None, limit: int = 50) -> list[ScheduleEvent]:
    """Events, newest first, of one schedule or of all (the rows themselves, detached, as `Store.read_rows`)."""
    query = select(ScheduleEvent).order_by(ScheduleEvent.id.desc()).limit(limit)
    if name is not None:
        query = query.where(ScheduleEvent.schedule_name == name)
    return store.scalars(query)


def add_request(store: Store, name: str) -> int:
    """Queue a run-now request for schedule `name`; returns its id."""
    with store.writing() as session:
        request = ScheduleRequest(schedule_name=name, requested_at=iso(utc_now()))
        session.add(request)
        session.flush()
        return request.id


def cancel_requests(store: Store, name: str) -> None:
    """Mark the pending requests of schedule `name` handled, so no daemon fires them."""
    with store.writing() as session:
        session.execute(update(ScheduleRequest).where(ScheduleRequest.schedule_name == name,
                                                      ScheduleRequest.handled_at.is_(None))
                        .values(handled_at=iso(utc_now())))


@dataclass(frozen=True)
class RunNowRequest:
    """A pending `soak schedule run-now`, as the daemon claims it (`requested_at`: ISO 8601 UTC)."""

    id: int
    schedule_name: str
    requested_at: str


def take_requests(store: Store) -> list[RunNowRequest]:
    """Claim every pending run-now request (marking it handled) and return them, oldest first."""
    now = iso(utc_now())
    with store.writing() as session:
        pending = list(session.scalars(select(ScheduleRequest).where(ScheduleRequest.handled_at.is_(None))
                                       .order_by(ScheduleRequest.id)))
        for request in pending:
            request.handled_at = now
        return [RunNowRequest(r.id, r.schedule_name, r.requested_at) for r in pending]
