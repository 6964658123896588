"""Tables of scheduled runs: what the daemon did with each fire, run-now requests, and APScheduler's job store.

A schedule itself (cron, timezone, start arguments, notify variable) lives in APScheduler's job store, so the
scheduler and `soak schedule list` read one source of truth. Times are ISO-8601 UTC strings.
"""

from sqlalchemy import Float, Index, Integer, LargeBinary, String, Text, Unicode
from sqlalchemy.orm import Mapped, mapped_column

from soak.store.models import Base

# Event kinds written by the daemon.
EVENT_STARTED = "started"      # a fire spawned `soak start`
EVENT_FINISHED = "finished"    # the run ended and left a summary
EVENT_FAILED = "failed"        # `soak start` ended without a summary (refused, crashed, killed)
EVENT_SKIPPED = "skipped"      # a fire was refused: lock held, another run in progress, daemon stopping
EVENT_MISSED = "missed"        # the daemon was down past the misfire grace time
EVENT_STOPPING = "stopping"    # the daemon was asked to stop while a run was in progress
EVENT_NOTIFIED = "notified"    # the webhook accepted the summary
EVENT_NOTIFY_FAILED = "notify_failed"


class ScheduleEvent(Base):
    """One thing the daemon did (or refused to do) for a schedule."""

    __tablename__ = "schedule_events"
    __table_args__ = (Index("ix_schedule_events_name_id", "schedule_name", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    schedule_name: Mapped[str] = mapped_column(String(128))
    at: Mapped[str] = mapped_column(String(40))
    kind: Mapped[str] = mapped_column(String(32))
    trigger: Mapped[str | None] = mapped_column(String(16))  # cron | run-now
    scheduled_for: Mapped[str | None] = mapped_column(String(40))
    run_id: Mapped[str | None] = mapped_column(String(64))
    pid: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    verdict: Mapped[str | None] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")


class ScheduleRequest(Base):
    """A `soak schedule run-now` waiting for the daemon, which marks it handled when it takes it."""

    __tablename__ = "schedule_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    schedule_name: Mapped[str] = mapped_column(String(128))
    requested_at: Mapped[str] = mapped_column(String(40))
    handled_at: Mapped[str | None] = mapped_column(String(40), index=True)


class SchedulerJob(Base):
    """APScheduler 3's SQLAlchemyJobStore table, declared here so Alembic owns the schema.

    The layout must match APScheduler's own definition (`apscheduler.jobstores.sqlalchemy`); the job store
    finds the table already there and leaves it alone.
    """

    __tablename__ = "apscheduler_jobs"

    id: Mapped[str] = mapped_column(Unicode(191), primary_key=True)
    next_run_time: Mapped[float | None] = mapped_column(Float(25), index=True)
    job_state: Mapped[bytes] = mapped_column(LargeBinary)
