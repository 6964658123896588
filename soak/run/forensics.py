"""When a run watches a growing server process with a tracker, and which processes (docs/forensics.md).

`--forensics auto` (the default) opens one window when `leak.rss` is SUSPECT or FAIL for the server: at an
early-stop look (`--stop-on-fail`), or at a look of its own before the run's last `--forensics-for`, which the
run keeps for it; an early stop on a leak waits for the window before the server is stopped. `always` opens the
end window whatever the leak check says; `off` never. `soak forensics RUN` asks a running run for a window at
once, through a request file in the run's folder (the run's own process stays the database's one writer).

The window is a `forensics_start`/`forensics_end` pair of events (the loader leaves out every window they
overlap) and one `forensics` event per process with what it found (`ProcessForensics.as_dict`).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from soak.config import RunConfig
from soak.contracts import EventKind
from soak.samples import ProcessStats, process_role
from soak.store.recorder import Recorder
from soak.telemetry.forensics import ProcessWindow, WatchedProcess
from soak.units import format_duration

log = logging.getLogger(__name__)

REQUEST_FILE = "forensics-request.json"
FOLDER = "forensics"
LOOK_LEAD_S = 45.0  # the end look starts this long before the end window: it reads and judges the run so far
END_MARGIN_S = 5.0  # the end window closes this long before the planned end, for the last samples to land
MOST_PROCESSES = 4  # a tracker per process slows each: at most this many at once
MIN_RUN_SHARE = 4  # a window never takes more than this share of the judged run (1/4): the verdict needs the rest
MIN_WINDOW_S = 10.0  # a window shorter than this would show a tracker's start-up, not a leak


@dataclass(frozen=True)
class WindowRequest:
    """A window to open: how long, over which processes (a --forensics-process value), and why."""

    for_s: float
    process: str
    why: str
    suspects: tuple[int, ...] = ()  # the PIDs leak.rss found growing, when a look said so
    asked: bool = False  # by `soak forensics`: not the run's one automatic window, and not cut to fit the run


# -- which processes ----------------------------------------------------------------------------------------------
def choose_processes(request: WindowRequest, processes: list[ProcessStats], roots: list[int]) -> list[WatchedProcess]:
    """The processes a window watches (at most `MOST_PROCESSES`, largest first)."""
    live = sorted((p for p in processes if p.pid > 0), key=lambda p: -(p.rss_bytes or 0))
    watched = [WatchedProcess(p.pid, p.name, process_role(p, roots)) for p in live]
    choice = request.process
    if choice.isdigit():
        picked = [w for w in watched if w.pid == int(choice)] or [WatchedProcess(int(choice), "", "process")]
        return [_why(picked[0], "named by --forensics-process")]
    if choice == "all":
        return [_why(w, "every server process") for w in watched[:MOST_PROCESSES]]
    if choice == "api":
        return [_why(w, "the API server") for w in watched if w.role == "api"][:1]
    growing = [_why(w, "leak.rss found it growing") for w in watched if w.pid in request.suspects]
    engines = [_why(w, "the engine process") for w in watched if w.role == "engine"]
    largest = [_why(w, "the largest server process") for w in watched[:1]]
    return (growing or engines or largest)[:MOST_PROCESSES]


def _why(process: WatchedProcess, why: str) -> WatchedProcess:
    return WatchedProcess(process.pid, process.name, process.role, why)


# -- one window over its processes ---------------------------------------------------------------------------------
class ForensicsWindow:
    """One window over one or more processes, recording its events."""

    def __init__(self, request: WindowRequest, processes: list[WatchedProcess], run_dir: Path, t0: float,
                 recorder: Recorder, say: Callable[[str], None]):
        self.request, self.recorder, self.say = request, recorder, say
        folder = run_dir / FOLDER
        self.windows = [ProcessWindow(p, request.for_s, folder, run_dir, t0) for p in processes]
        self.ended = False

    def start(self) -> None:
        names = ", ".join(f"{w.process.role} (pid {w.process.pid})" for w in self.windows)
        message = f"forensics for {_minutes(self.request.for_s)} on {names}: {self.request.why}"
        self.recorder.event(EventKind.FORENSICS_START, message, {"pids": [w.process.pid for w in self.windows],
                                                                 "for_s": self.request.for_s, "why": self.request.why})
        self.say(f"{message} (those windows are left out of the checks)")
        for window in self.windows:
            window.start()

    @property
    def tracking(self) -> bool:
        """A tracker still watches (the run holds its end for it)."""
        return not self.ended

    def poll(self) -> bool:
        """Advance every process's window; True once all are done and recorded."""
        done = [window.poll() for window in self.windows]
        if not self.ended and all(w.tracking_over for w in self.windows):
            self._end()
        if all(done):
            self._record_results()
            return True
        return False

    def stop(self) -> None:
        """The run is ending: stop every tracker, record what there is."""
        for window in self.windows:
            window.stop()
        if not self.ended:
            self._end()
        self._record_results()

    def _end(self) -> None:
        self.ended = True
        self.recorder.event(EventKind.FORENSICS_END, "forensics window closed",
                            {"pids": [w.process.pid for w in self.windows]})

    def _record_results(self) -> None:
        for window in self.windows:
            found = window.found
            refused = "; ".join(found.refusals)
            message = f"{found.process.role} (pid {found.process.pid}): {found.method}" + (f"; {refused}" if refused else "")
            self.recorder.event(EventKind.FORENSICS, message, found.as_dict())
            self.say(f"forensics recorded, {message}")
        self.windows = []


def _minutes(seconds: float) -> str:
    return format_duration(round(seconds))


# -- the run's watch -------------------------------------------------------------------------------------------------
class ForensicsWatch:
    """Polled by the conductor every tick: opens a window when one is due, and advances it."""

    def __init__(self, config: RunConfig, run_id: str, run_dir: Path, recorder: Recorder, t0: float,
                 processes: Callable[[], list[ProcessStats]], roots: Callable[[], list[int]],
                 early_stop: Any = None, say: Callable[[str], None] = lambda _line: None):
        self.config, self.run_id, self.run_dir, self.recorder, self.t0 = config, run_id, run_dir, recorder, t0
        self.processes, self.roots, self.early_stop, self.say = processes, roots, early_stop, say
        self.settings = config.forensics
        self.window: ForensicsWindow | None = None
        self.auto_done = False  # the one automatic window of a run has been opened
        self._look = None  # the end look's child process
        self._end_request: WindowRequest | None = None  # what the end look asked for, opened at the end window
        self._looked = False
        self._seen_looks = 0
        self.end_window_s = self._end_window_s()

    def _end_window_s(self) -> float | None:
        """When the end window opens, or None when the run is too short to keep one."""
        config, for_s = self.config, self.settings.for_s
        judged_s = config.duration_s - config.warmup_s
        start_s = config.duration_s - for_s - END_MARGIN_S
        if self.settings.mode == "off" or for_s * MIN_RUN_SHARE > judged_s or start_s - LOOK_LEAD_S <= config.warmup_s:
            return None
        return start_s

    def describe(self) -> str | None:
        """What the user is told at start."""
        mode, for_text = self.settings.mode, _minutes(self.settings.for_s)
        if mode == "off":
            return None
        if self.end_window_s is None:
            early = " (an early-stop look may still open one)" if self.early_stop is not None and mode == "auto" else ""
            return (f"forensics: the run is too short to keep a {for_text} window at its end (it needs a run "
                    f"{MIN_RUN_SHARE}× as long after the warm-up){early}; --forensics-for shortens it")
        when = "if leak.rss is SUSPECT or FAIL by then" if mode == "auto" else "whatever leak.rss says"
        return f"forensics: the last {for_text} of the run are kept for an allocation tracker {when}"

    @property
    def tracking(self) -> bool:
        """A window's tracker is still attached (the conductor holds the run's end for it)."""
        return self.window is not None and self.window.tracking

    def poll(self, elapsed_s: float) -> None:
        """Advance the open window, or open one that is due."""
        if self.window is not None:
            if self.window.poll():
                self.window = None
            return
        asked = self._requested()
        if asked is not None:
            self.open(asked)
            return
        due = self._due(elapsed_s)
        if due is not None:
            self.open(due, elapsed_s)

    def hold_for_stop(self, check: str, elapsed_s: float) -> bool:
        """An early stop on `check` is due: True while the run must wait for a window first (opened here when
        auto forensics has not run yet and the stop is a memory leak)."""
        if self.tracking:
            return True
        if check != "leak.rss" or self.settings.mode == "off" or self.auto_done:
            return False
        suspects = self._look_suspects(self.early_stop.last_look if self.early_stop else None)
        self.open(WindowRequest(self.settings.for_s, self.settings.process,
                                "an early stop on leak.rss waits for it", suspects), elapsed_s)
        return self.tracking

    def open(self, request: WindowRequest, elapsed_s: float | None = None) -> None:
        """Open a window now over the processes it names; a refusal when there are none. An automatic window
        opened mid-run is cut to a quarter of the run judged so far and to the planned end."""
        if not request.asked and elapsed_s is not None:
            request = self._fitted(request, elapsed_s)
            if request is None:
                return
        self.auto_done = self.auto_done or not request.asked
        chosen = choose_processes(request, self.processes(), self.roots())
        if not chosen:
            self.recorder.event(EventKind.FORENSICS, "forensics: no server process on this host to watch",
                                {"pid": None, "refusals": [NO_PROCESS]})
            self.say(f"forensics: {NO_PROCESS}")
            return
        self.window = ForensicsWindow(request, chosen, self.run_dir, self.t0, self.recorder, self.say)
        self.window.start()

    def _fitted(self, request: WindowRequest, elapsed_s: float) -> WindowRequest | None:
        config = self.config
        room_s = min((elapsed_s - config.warmup_s) / MIN_RUN_SHARE, config.duration_s - elapsed_s - END_MARGIN_S)
        for_s = min(request.for_s, room_s)
        if for_s < MIN_WINDOW_S:
            log.info("forensics: no room for a window %.0f s into the run (%.0f s left for it)", elapsed_s, for_s)
            return None
        return replace(request, for_s=for_s)

    def finish(self, budget_s: float) -> None:
        """At the run's end: let an open window's capture be read (within `budget_s`), else stop it."""
        self._close_look()
        if self.window is None:
            return
        if self.window.tracking:
            self.window.stop()
        else:
            self.say("forensics: reading the tracker's capture")
            deadline = time.monotonic() + budget_s
            while not self.window.poll():
                if time.monotonic() > deadline:
                    self.window.stop()
                    break
                time.sleep(0.5)
        self.window = None

    # -- what opens a window --
    def _due(self, elapsed_s: float) -> WindowRequest | None:
        if self.auto_done or self.settings.mode == "off":
            return None
        from_look = self._from_early_stop()
        if from_look is not None:
            return from_look
        if self.end_window_s is None:
            return None
        if self.settings.mode == "always":
            return self._always(elapsed_s)
        return self._from_end_look(elapsed_s)

    def _always(self, elapsed_s: float) -> WindowRequest | None:
        if elapsed_s < self.end_window_s:
            return None
        return WindowRequest(self.settings.for_s, self.settings.process, "--forensics always: the run's end window")

    def _from_early_stop(self) -> WindowRequest | None:
        """A new early-stop look that found leak.rss SUSPECT or FAIL (auto)."""
        watch = self.early_stop
        if watch is None or self.settings.mode != "auto" or watch.looks_seen == self._seen_looks:
            return None
        self._seen_looks = watch.looks_seen
        suspects = self._look_suspects(watch.last_look)
        if not suspects:
            return None
        verdict = watch.last_look.leak_verdict
        return WindowRequest(self.settings.for_s, self.settings.process,
                             f"leak.rss was {verdict} at an early-stop look over {watch.last_look.windows} windows",
                             suspects)

    def _from_end_look(self, elapsed_s: float) -> WindowRequest | None:
        """Start the end look in time; at the end window, open it when the look found leak.rss SUSPECT or FAIL."""
        if self._look is None and not self._looked and elapsed_s >= self.end_window_s - LOOK_LEAD_S:
            self._start_end_look(elapsed_s)
        if self._look is not None and self._look.poll() is not None:
            self._read_end_look()
        if self._end_request is None or elapsed_s < self.end_window_s:
            return None
        return self._end_request

    def _read_end_look(self) -> None:
        from soak.run.early_stop import read_look

        look, self._look = read_look(self._look), None
        suspects = self._look_suspects(look)
        if not suspects:
            log.info("forensics: leak.rss %s before the end window; no tracker", getattr(look, "leak_verdict", None))
            return
        self._end_request = WindowRequest(self.settings.for_s, self.settings.process,
                                          f"leak.rss was {look.leak_verdict} over the first {look.windows} windows",
                                          suspects)

    def _start_end_look(self, elapsed_s: float) -> None:
        from soak.run.early_stop import start_look

        config = self.config
        settle_s = config.telemetry.flush_every_s + config.telemetry.sample_every_s + 1.0
        windows = math.floor((elapsed_s - settle_s - config.warmup_s) / config.window_s + 1e-9)
        self._looked = True
        if windows > 0:
            self._look = start_look(config.db_url, self.run_id, windows, 1, config.gates_file)

    @staticmethod
    def _look_suspects(look: Any) -> tuple[int, ...]:
        if look is None or look.leak_verdict not in ("SUSPECT", "FAIL"):
            return ()
        return tuple(look.leak_suspects)

    def _requested(self) -> WindowRequest | None:
        """A window `soak forensics` asked for (the request file), read once and removed."""
        path = self.run_dir / REQUEST_FILE
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            path.unlink()
            return WindowRequest(float(data.get("for_s") or self.settings.for_s),
                                 str(data.get("process") or self.settings.process), "asked for by `soak forensics`",
                                 asked=True)
        except (OSError, ValueError) as exc:
            log.warning("forensics: unreadable request %s: %s", path, exc)
            path.unlink(missing_ok=True)
            return None

    def _close_look(self) -> None:
        if self._look is not None and self._look.poll() is None:
            self._look.kill()
            self._look.wait()
        self._look = None


NO_PROCESS = ("no server process is on this host for soak to watch (a remote --target: run soak on the server's "
              "host, or pass --server-pid there)")



# -- `soak forensics RUN`: ask a running run for a window ------------------------------------------------------------
def ask_for_window(store: Any, run_id: str, for_s: float | None, process: str | None) -> Path:
    """Leave a request in a running run's folder (its conductor opens the window within a tick); ConfigError
    when the run is not running on this host (a running run whose soak process is gone reads aborted)."""
    import os
    import socket

    from soak.errors import ConfigError

    run = store.get_run(run_id)
    if run.status != "running":
        raise ConfigError(f"run {run_id} is {run.status}: forensics watches a running server; start a run, or "
                          f"use `soak start --forensics always`")
    if run.environment.get("host") != socket.gethostname() or not Path(run.out_dir).is_dir():
        raise ConfigError(f"run {run_id} runs on {run.environment.get('host') or 'another host'}, not here: run "
                          "`soak forensics` where `soak start` runs")
    path = Path(run.out_dir) / REQUEST_FILE
    if path.exists():
        raise ConfigError(f"run {run_id} has a forensics request waiting already ({path})")
    body = {"for_s": for_s, "process": process, "asked_at": time.time(), "by_pid": os.getpid()}
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(body))
    temporary.replace(path)  # the run never reads half a request
    return path


def forensics_events_since(store: Any, run_id: str, since_s: float) -> list[Any]:
    """The run's forensics events from `since_s` (seconds into the run) on."""
    kinds = (EventKind.FORENSICS_START, EventKind.FORENSICS_END, EventKind.FORENSICS)
    return [event for event in store.read_events(run_id) if event.kind in kinds and event.t_s >= since_s]
