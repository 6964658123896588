"""The run side of `soak start --stop-on-fail`: judge the stored run so far at each look.

The rule itself is pure (`soak/analysis/early_stop.py`); this module decides when a look is due,
reads the run from the database and judges it on a real OS thread from gevent's pool, so a look
(reading every sample so far, some seconds on a day-long run) never holds up the arrival clock.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from sqlalchemy import Engine

from soak.analysis.early_stop import Look, SequentialStop, StopDecision, judge_look, planned_window_count
from soak.config import RunConfig

log = logging.getLogger(__name__)


class EarlyStopWatch:
    """Polled by the conductor every tick; returns a `StopDecision` once the rule stops the run."""

    def __init__(self, engine: Engine, run_id: str, config: RunConfig):
        from soak.analysis import load_gates

        self.engine, self.run_id, self.config = engine, run_id, config
        planned = planned_window_count(config.duration_s, config.warmup_s, config.window_s)
        self.sequence = SequentialStop(load_gates(config.gates_file), planned)
        # A window is judged once its last samples and latency flush are committed.
        self.settle_s = config.telemetry.flush_every_s + config.telemetry.sample_every_s + 1.0
        self._pending: Any = None  # gevent AsyncResult of the look in flight

    def describe(self) -> str:
        """What the user is told at start: when the looks come, or that the run is too short for any."""
        looks = self.sequence.looks
        if not looks:
            return (f"--stop-on-fail: the run has too few windows for a look (a look needs "
                    f"{self.sequence.gates.min_windows}); it runs its planned time")
        return (f"--stop-on-fail: {len(looks)} looks, from window {looks[0]} every "
                f"{self.sequence.rule.every_windows} windows")

    def poll(self, elapsed_s: float) -> StopDecision | None:
        """Collect a finished look (a decision, or None), else start the next one when it is due."""
        if self._pending is not None:
            return self._collect() if self._pending.ready() else None
        complete = math.floor((elapsed_s - self.settle_s - self.config.warmup_s) / self.config.window_s + 1e-9)
        count = self.sequence.due(complete)
        if count is not None:
            self._pending = _in_thread(self._look, count)
        return None

    def _collect(self) -> StopDecision | None:
        pending, self._pending = self._pending, None
        try:
            look = pending.get()
        except Exception:  # a look that could not read the run stops nothing; the run goes on
            log.exception("early stop: a look failed")
            return None
        log.info("early stop: look at %d windows, FAIL: %s", look.windows, ", ".join(look.failed) or "none")
        return self.sequence.record(look)

    def _look(self, windows: int) -> Look:
        """Read the run as it stood at the end of window `windows` and judge it."""
        from soak.analysis.loader import load_run_data
        from soak.store.queries import get_run

        run = get_run(self.engine, self.run_id)
        run["duration_s"] = self.config.warmup_s + windows * self.config.window_s
        data = load_run_data(self.engine, run, stopped_early=True)
        return judge_look(data, self.sequence.gates, windows)


def _in_thread(function: Any, *args: Any) -> Any:
    """Run on a real thread of gevent's pool (Locust has patched threading); an AsyncResult back."""
    import gevent

    return gevent.get_hub().threadpool.spawn(function, *args)


def watch_for_failure(engine: Engine, run_id: str, config: RunConfig) -> EarlyStopWatch | None:
    """The watch when the run asked for `--stop-on-fail`, else None."""
    return EarlyStopWatch(engine, run_id, config) if config.stop_on_fail else None
