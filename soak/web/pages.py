"""The live view's pages as HTML text: the run picker and each run's report, rebuilt from the database.

A run still under way is analysed as it stands (soak.run.in_progress) and marked in progress; a finished run
shows its stored summary. Pages are built one at a time and cached for half the refresh period, or for five
times as long as the page took to build when that is longer, so however many browsers poll, the view reads each
run about once a period and never keeps a core busy.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from soak.contracts import Summary
from soak.errors import StorageError
from soak.report.context import build_context
from soak.report.fleet import fleet_html
from soak.report.formatting import format_span, format_utc
from soak.report.render import environment, render_html
from soak.report.sections import verdict_class
from soak.run.fleet import FLEET_KIND
from soak.run.fleet_summary import build_fleet_summary
from soak.run.in_progress import in_progress_summary, mark_provisional
from soak.store.records import StoredRun
from soak.store.store import Store

INDEX_TEMPLATE = "live_index.html.j2"
PLOTLY_URL = "/static/plotly.js"
log = logging.getLogger(__name__)

MAX_RUNS_LISTED = 500
MAX_CACHED_PAGES = 32
FINISHED_CACHE_S = 60.0  # a finished run's page changes only when someone re-finalises it
# A running run's page is rebuilt at most once per this many build times, so the view uses at most about a fifth
# of one core however long the run (a 72 h run's analysis takes seconds) and however many tabs are open.
BUILD_DUTY_FACTOR = 5.0


@dataclass
class CachedPage:
    html: str
    built_at: float
    max_age_s: float

    def fresh(self) -> bool:
        return time.monotonic() - self.built_at < self.max_age_s


@dataclass
class LivePages:
    """Builds and caches the pages of one database."""

    store: Store
    refresh_s: float = 5.0
    _cache: dict[str, CachedPage] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _away: bool = False  # the database could not be read at the last build

    def run_page(self, run_id: str) -> str:
        """The report of `run_id` with the live banner; UnknownRunError for a run the database lacks. While the
        database cannot be read (a storage outage) the page last built is served again, and that is logged once."""
        with self._lock:  # one build at a time: a second browser waits and then gets the cached page
            cached = self._cache.get(run_id)
            if cached and cached.fresh():
                return cached.html
            try:
                html = self._build_run_page(run_id)
            except (StorageError, SQLAlchemyError) as exc:  # a read the store did not word, as well
                return self._while_away(exc, cached)
            self._back()
            return html

    def _while_away(self, exc: Exception, cached: CachedPage | None) -> str:
        """The page last built, while the database is away; the error itself when there is none."""
        if not self._away:
            self._away = True
            log.warning("live view: %s; pages are served as last built until the database answers again", exc)
        if cached is None:
            raise exc if isinstance(exc, StorageError) else StorageError(f"cannot read the database: {exc}") from None
        return cached.html

    def _back(self) -> None:
        if self._away:
            self._away = False
            log.warning("live view: the database answers again")

    def _build_run_page(self, run_id: str) -> str:
        """Build the page of `run_id` from the database and cache it."""
        started = time.monotonic()
        run = self.store.get_run(run_id)
        html = self._fleet_page(run) if run.target_kind == FLEET_KIND else render_html(
            build_context(self.store, run_id, self._summary(run)),
            live={"refresh_s": self._refresh_text(), "plotly_url": PLOTLY_URL})
        build_s = time.monotonic() - started
        finished = run.status != "running"
        self._remember(run_id, html, FINISHED_CACHE_S if finished else max(self.refresh_s / 2,
                                                                           BUILD_DUTY_FACTOR * build_s))
        return html

    def index_page(self) -> str:
        """Every run, newest first, linking to its page (a StorageError while the database is away, logged once)."""
        try:
            runs = [_index_row(run) for run in self.store.list_runs(limit=MAX_RUNS_LISTED)]
        except (StorageError, SQLAlchemyError) as exc:
            return self._while_away(exc, None)
        self._back()
        return environment().get_template(INDEX_TEMPLATE).render(
            runs=runs, refresh_s=self._refresh_text(), generated_at=_now_text(),
            database=self.store.url, soak_version=_version())

    def _fleet_page(self, run: StoredRun) -> str:
        """A fleet's table of replicas as its replicas' runs stand, each linking to its own page."""
        summary = build_fleet_summary(self.store, run)
        return fleet_html(summary, {r.name: f"/runs/{r.run_id}" for r in summary.replicas if r.run_id})

    def _summary(self, run: StoredRun) -> Summary | None:
        """A running run's summary so far; a finished run's stored one (None); one never finalised, analysed."""
        if run.status != "running" and run.summary_json:
            return None
        summary = in_progress_summary(self.store, run)
        if run.status == "running":
            mark_provisional(summary, run)
        else:  # killed and not yet closed: what was stored, and not in progress any more
            summary.in_progress = None
        return summary

    def _remember(self, run_id: str, html: str, max_age_s: float) -> None:
        if len(self._cache) >= MAX_CACHED_PAGES:
            self._cache.pop(min(self._cache, key=lambda key: self._cache[key].built_at))
        self._cache[run_id] = CachedPage(html, time.monotonic(), max_age_s)

    def _refresh_text(self) -> str:
        return f"{self.refresh_s:g}"


def _index_row(run: StoredRun) -> dict[str, Any]:
    """One row of the run picker (what its template shows)."""
    running = run.status == "running"
    duration = run.elapsed_s() if running else run.duration_s
    return {"id": run.id, "status": run.status, "verdict": run.verdict, "verdict_class": verdict_class(run.verdict),
            "started": format_utc(run.started_at), "duration": format_span(duration) + (" so far" if running else ""),
            "target_kind": run.target_kind, "model": run.model,
            "labels": ", ".join(f"{k}={v}" for k, v in run.labels.items())}


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _version() -> str:
    import soak

    return soak.__version__
