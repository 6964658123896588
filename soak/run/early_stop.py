"""The run side of `soak start --stop-on-fail`: judge the stored run so far at each look.

The rule itself is pure (`soak/analysis/early_stop.py`); this module decides when a look is due and runs
it in a child process (`python -m soak.run.early_stop`), which reads the run from the database and
prints what it found. A look reads every sample so far — about 11 s of Python on a day-long run at
1 Hz — and on a thread of soak's own process it would hold the interpreter lock long enough to delay the
arrival clock by hundreds of milliseconds (bench/early_stop_look.py); in its own process it costs soak
nothing but a poll per tick.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from soak.analysis.early_stop import Look, SequentialStop, StopDecision, judge_look, look_gates, planned_window_count
from soak.analysis.gates import Gates
from soak.config import RunConfig
from soak.store.store import Store

log = logging.getLogger(__name__)

DB_URL_ENV = "SOAK_LOOK_DB_URL"  # the database URL goes to the child in its environment: it may hold a password


class EarlyStopWatch:
    """Polled by the conductor every tick; returns a `StopDecision` once the rule stops the run."""

    def __init__(self, run_id: str, config: RunConfig, on_look: Callable[[Look], None] = lambda _look: None):
        from soak.analysis import load_gates

        self.run_id, self.config, self.on_look = run_id, config, on_look
        planned = planned_window_count(config.duration_s, config.warmup_s, config.window_s)
        self.sequence = SequentialStop(load_gates(config.gates_file), planned)
        # A window is judged once its last samples and latency flush are committed.
        self.settle_s = config.telemetry.flush_every_s + config.telemetry.sample_every_s + 1.0
        self._child: subprocess.Popen | None = None
        self.last_look: Look | None = None  # forensics reads leak.rss's suspects from it
        self.looks_seen = 0

    @property
    def stops(self) -> bool:
        """Whether a look may end the run (--stop-on-fail), or only tells the exported verdict gauges."""
        return self.config.stop_on_fail

    def describe(self) -> str:
        """What the user is told at start: when the looks come, or that the run is too short for any."""
        looks, who = self.sequence.looks, "--stop-on-fail" if self.stops else "the exported verdicts"
        if not looks:
            return (f"{who}: the run has too few windows for a look (a look needs "
                    f"{self.sequence.gates.min_windows}); {'it runs its planned time' if self.stops else 'none until the end'}")
        step = looks[1] - looks[0] if len(looks) > 1 else self.sequence.rule.every_windows
        return f"{who}: {len(looks)} looks, from window {looks[0]} every {step} windows"

    def poll(self, elapsed_s: float) -> StopDecision | None:
        """Collect a finished look (a decision, or None), else start the next one when it is due."""
        if self._child is not None:
            return self._collect() if self._child.poll() is not None else None
        complete = math.floor((elapsed_s - self.settle_s - self.config.warmup_s) / self.config.window_s + 1e-9)
        count = self.sequence.due(complete)
        if count is not None:
            self._child = start_look(self.config.db_url, self.run_id, count, len(self.sequence.looks),
                                     self.config.gates_file)
        return None

    def _collect(self) -> StopDecision | None:
        child, self._child = self._child, None
        look = read_look(child)
        if look is None:  # a look that could not judge the run stops nothing; the run goes on
            return None
        log.info("early stop: look at %d windows, FAIL: %s", look.windows, ", ".join(look.failed) or "none")
        self.last_look, self.looks_seen = look, self.looks_seen + 1
        self.on_look(look)
        decision = self.sequence.record(look)
        return decision if self.stops else None

    def close(self) -> None:
        """End a look still running when the run ends (its answer would come too late)."""
        if self._child is not None and self._child.poll() is None:
            self._child.kill()
            self._child.wait()
        self._child = None


def start_look(db_url: str, run_id: str, windows: int, looks: int, gates_file: Path | None) -> subprocess.Popen:
    """Start one look in a child process; its answer is one line of JSON on stdout (`read_look`)."""
    command = [sys.executable, "-m", "soak.run.early_stop", run_id, str(windows), str(looks)]
    command += ["--gates", str(gates_file)] if gates_file else []
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, DB_URL_ENV: db_url})


def read_look(child: subprocess.Popen) -> Look | None:
    """The look a finished child printed, or None (logged) when it failed."""
    output = child.stdout.read() if child.stdout else ""
    child.wait()
    try:
        answer = json.loads(output)
    except ValueError:
        log.warning("early stop: a look exited with code %s and no answer", child.returncode)
        return None
    if "error" in answer:
        log.warning("early stop: a look failed: %s", answer["error"])
        return None
    answer["leak_suspects"] = tuple(answer.get("leak_suspects") or ())
    return Look(**answer)


def look_at(store: Store, run_id: str, gates: Gates, windows: int) -> Look:
    """Read the stored run as it stood at the end of window `windows` and judge it."""
    from soak.analysis.loader import load_run_data

    run = store.get_run(run_id)
    run = dataclasses.replace(run, duration_s=run.warmup_s + windows * run.window_s)
    data = load_run_data(store, run, stopped_early=True)
    return judge_look(data, gates, windows)


def watch_for_failure(run_id: str, config: RunConfig,
                      on_look: Callable[[Look], None] = lambda _look: None) -> EarlyStopWatch | None:
    """The watch when the run asked for `--stop-on-fail`, or exports its series (whose verdict gauges the looks
    set; such a watch never stops the run), else None."""
    return EarlyStopWatch(run_id, config, on_look) if config.stop_on_fail or config.metrics.enabled else None


def main(argv: list[str] | None = None) -> int:
    """The child: judge one look of a stored run and print it as JSON (an `error` key when it could not)."""
    parser = argparse.ArgumentParser(prog="python -m soak.run.early_stop", description=main.__doc__)
    parser.add_argument("run_id")
    parser.add_argument("windows", type=int)
    parser.add_argument("looks", type=int, help="how many looks the run has (Bonferroni)")
    parser.add_argument("--gates", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        from soak.analysis import load_gates
        from soak.store.db import create_db_engine

        # the run's own process has migrated the database; a look only reads it
        store = Store(create_db_engine(os.environ[DB_URL_ENV]), read_only=True)
        look = look_at(store, args.run_id, look_gates(load_gates(args.gates), args.looks), args.windows)
        answer: dict[str, Any] = asdict(look)
    except Exception as exc:  # the parent logs it and goes on without this look
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
