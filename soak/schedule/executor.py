"""The executor a daemon gives its scheduler: due jobs run the daemon's own fire, not the stored function.

The job table stores each job's function by reference (`soak.schedule:fire_scheduled`), so a function found
that way could reach the daemon only through a process global. Instead the daemon hands its scheduler this
executor, bound to its own fire method; the stored reference still has to resolve, because the job store
imports it whenever it loads a job (and drops jobs whose function it cannot import).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor


@dataclass(frozen=True)
class _DueJob:
    """What APScheduler's pool and `run_job` read of a job, with the daemon's fire as `func`."""

    id: str
    name: str
    func: Callable[..., None]
    kwargs: dict[str, Any]
    misfire_grace_time: int | None
    _jobstore_alias: str
    args: tuple[Any, ...] = field(default=())

    def __str__(self) -> str:  # run_job's log lines name the job
        return self.name


class FireExecutor(ThreadPoolExecutor):
    """A thread pool that calls `fire(**job.kwargs)` for each due job.

    APScheduler's `run_job` still runs it, so misfires past the grace time and exceptions become the same
    scheduler events (missed, error) as with the stock executor.
    """

    def __init__(self, fire: Callable[..., None], max_workers: int):
        super().__init__(max_workers)
        self._fire = fire

    def _do_submit_job(self, job: Any, run_times: list[Any]) -> None:
        due = _DueJob(id=job.id, name=job.name, func=self._fire, kwargs=job.kwargs,
                      misfire_grace_time=job.misfire_grace_time, _jobstore_alias=job._jobstore_alias)
        super()._do_submit_job(due, run_times)
