"""Model time and seeded event schedules.

Model time = wall uptime × time scale. Every uptime-based fault reads model time, so a 24 h soak
can be replayed in minutes with `--time-scale 100`; event *lengths* (stalls, error bursts) stay in
wall seconds, because that is what a client feels.
"""

import bisect
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0


class ModelClock:
    """Uptime in wall seconds and in model seconds, from the moment `start()` is called."""

    def __init__(self, time_scale: float = 1.0, now: Callable[[], float] = time.monotonic) -> None:
        if time_scale <= 0:
            raise ValueError("time scale must be > 0")
        self.time_scale = time_scale
        self._now = now
        self._start = now()

    def start(self) -> None:
        """Restart uptime at zero (the server calls this when it becomes ready)."""
        self._start = self._now()

    def wall_s(self) -> float:
        """Wall seconds since start."""
        return self._now() - self._start

    def model_s(self) -> float:
        """Model seconds since start."""
        return self.wall_s() * self.time_scale

    def wall_of_model(self, model_s: float) -> float:
        """The wall uptime at which the model clock reads `model_s`."""
        return model_s / self.time_scale


def ramp(start: float, end: float, model_s: float, horizon_s: float) -> float:
    """Linear move from `start` to `end` over `horizon_s` model seconds, then held at `end`."""
    progress = 1.0 if horizon_s <= 0 else min(1.0, max(0.0, model_s / horizon_s))
    return start + (end - start) * progress


@dataclass(frozen=True)
class Window:
    """One event, in wall seconds of uptime."""

    start_s: float
    end_s: float


class EventSchedule:
    """Poisson events at `rate_per_hour` per model hour, drawn lazily from a seeded generator (thread-safe).

    Starts are spaced in model time; each event lasts a wall-clock length from `length_s`.
    """

    def __init__(self, rate_per_hour: float, clock: ModelClock, rng: random.Random,
                 length_s: Callable[[random.Random], float]) -> None:
        self._rate_per_model_s = rate_per_hour / SECONDS_PER_HOUR
        self._clock = clock
        self._rng = rng
        self._length_s = length_s
        self._windows: list[Window] = []
        self._starts: list[float] = []
        self._longest_s = 0.0
        self._lock = threading.Lock()  # the engine thread and the event loop both read it
        self._next_model_s = self._draw_gap()

    def windows_until(self, wall_s: float) -> list[Window]:
        """Every event starting at or before `wall_s` (wall uptime), oldest first."""
        with self._lock:
            return self._windows[:self._count_started(wall_s)]

    def upcoming(self, wall_s: float, count: int) -> list[Window]:
        """The next `count` events starting after `wall_s`."""
        with self._lock:
            started = self._count_started(wall_s)
            while len(self._windows) < started + count:
                self._draw_next()
            return self._windows[started:started + count]

    def active(self, wall_s: float) -> Window | None:
        """The event covering `wall_s`, if any."""
        with self._lock:
            started = self._windows[:self._count_started(wall_s)]
        for window in reversed(started):
            if wall_s < window.end_s:
                return window
            if window.start_s < wall_s - self._longest_s:  # starts only get earlier from here
                break
        return None

    def _count_started(self, wall_s: float) -> int:
        while self._clock.wall_of_model(self._next_model_s) <= wall_s:
            self._draw_next()
        return bisect.bisect_right(self._starts, wall_s)

    def _draw_next(self) -> None:
        start_s = self._clock.wall_of_model(self._next_model_s)
        length_s = self._length_s(self._rng)
        self._longest_s = max(self._longest_s, length_s)
        self._windows.append(Window(start_s, start_s + length_s))
        self._starts.append(start_s)
        self._next_model_s += self._draw_gap()

    def _draw_gap(self) -> float:
        return self._rng.expovariate(self._rate_per_model_s)
