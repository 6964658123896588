"""Rate plans and the open-loop arrival clock (docs/load.md, "The rate plan and the arrival clock").

A rate plan is a list of constant-rate segments with absolute wall-clock starts; the last one lasts until a
later one is added. Its integral Λ(t) counts *expected arrivals*. The clock draws gaps with mean 1 in those
units (exponential → Poisson, or gamma for burstiness) and maps the running total back to wall time through
the plan, so a rate change takes effect exactly at its start and a rate of 0 simply pauses the clock. Each
intended time follows the previous *intended* time, never "now": a dispatcher that falls behind catches up,
and its lateness is measured rather than hidden.
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

KEEP_PAST_SEGMENTS = 8


@dataclass(frozen=True, slots=True)
class Segment:
    """Arrivals at `rate_rps` from wall time `start_t` until the next segment starts."""

    start_t: float
    rate_rps: float


class RatePlan:
    """Constant-rate segments in start order, with the expected-arrival count Λ at each start."""

    def __init__(self, segments: list[Segment] | tuple[Segment, ...] = ()) -> None:
        self._starts: list[float] = []
        self._rates: list[float] = []
        self._lambdas: list[float] = []
        self.extend(segments)

    def __len__(self) -> int:
        return len(self._starts)

    @property
    def segments(self) -> list[Segment]:
        return [Segment(s, r) for s, r in zip(self._starts, self._rates)]

    def extend(self, segments: list[Segment] | tuple[Segment, ...]) -> bool:
        """Append segments that start after the last known one (others are already known); True if any."""
        added = False
        for segment in sorted(segments, key=lambda s: s.start_t):
            if self._starts and segment.start_t <= self._starts[-1]:
                continue
            self._append(segment)
            added = True
        return added

    def _append(self, segment: Segment) -> None:
        if self._starts:
            previous_lambda = self._lambdas[-1] + self._rates[-1] * (segment.start_t - self._starts[-1])
        else:
            previous_lambda = 0.0
        self._starts.append(segment.start_t)
        self._rates.append(max(0.0, segment.rate_rps))
        self._lambdas.append(previous_lambda)

    def expected_arrivals(self, t: float) -> float:
        """Λ(t): expected arrivals from the plan's first start to wall time t."""
        index = bisect.bisect_right(self._starts, t) - 1
        if index < 0:
            return 0.0
        return self._lambdas[index] + self._rates[index] * (t - self._starts[index])

    def time_at(self, expected: float) -> float:
        """The wall time at which Λ reaches `expected`; inf if the known plan never gets there (rate 0 at the end)."""
        if not self._starts:
            return math.inf
        # bisect_right skips over zero-rate segments, whose Λ equals the next one's.
        index = max(bisect.bisect_right(self._lambdas, expected) - 1, 0)
        rate = self._rates[index]
        if rate <= 0.0:
            return math.inf if index == len(self._starts) - 1 else self._starts[index + 1]
        return self._starts[index] + (expected - self._lambdas[index]) / rate

    def rate_at(self, t: float) -> float:
        """The planned rate at wall time t (0 before the first segment)."""
        index = bisect.bisect_right(self._starts, t) - 1
        return self._rates[index] if index >= 0 else 0.0

    def prune_before(self, expected: float) -> None:
        """Forget segments wholly before Λ = `expected`, keeping a few (72 h of 1 s ramp steps add up)."""
        index = bisect.bisect_right(self._lambdas, expected) - 1 - KEEP_PAST_SEGMENTS
        if index > 0:
            del self._starts[:index], self._rates[:index], self._lambdas[:index]


class GapSampler:
    """Inter-arrival gaps with mean 1 expected arrival.

    burstiness None or 1 → exponential (Poisson arrivals). Otherwise gamma with shape 1/burstiness² and scale
    burstiness², so burstiness is the coefficient of variation of the gaps: > 1 clumps arrivals, < 1 evens them.
    """

    def __init__(self, rng: np.random.Generator, burstiness: float | None = None, batch: int = 256) -> None:
        self._rng = rng
        self._burstiness = burstiness
        self._batch = batch
        self._buffer: list[float] = []

    @property
    def is_poisson(self) -> bool:
        return self._burstiness is None or self._burstiness == 1.0

    def next_gap(self) -> float:
        if not self._buffer:
            self._buffer = self._draw(self._batch)[::-1].tolist()
        return self._buffer.pop()

    def _draw(self, count: int) -> np.ndarray:
        if self.is_poisson:
            return self._rng.exponential(1.0, count)
        cv_squared = self._burstiness**2
        return self._rng.gamma(1.0 / cv_squared, cv_squared, count)


class ArrivalClock:
    """Intended send times over a rate plan: Λ advances by one gap per arrival, mapped to wall time on demand."""

    def __init__(self, plan: RatePlan, gaps: GapSampler) -> None:
        self.plan = plan
        self._gaps = gaps
        self._expected = 0.0
        self._pending: float | None = None

    def peek(self) -> float:
        """The next intended wall time under the plan as known now (recomputed if the plan grows)."""
        if self._pending is None:
            self._pending = self._expected + self._gaps.next_gap()
        return self.plan.time_at(self._pending)

    def take(self) -> float:
        """Consume the next arrival and return its intended wall time."""
        intended_t = self.peek()
        self._expected, self._pending = self._pending, None
        self.plan.prune_before(self._expected)
        return intended_t


class DealtClock:
    """Intended times handed out by someone else's clock (the master's, for gamma arrivals or a trace over
    workers). With a trace, each time comes with its row's index, which `resolve` turns into the row: after
    `take`, `row` is the row of the arrival just taken (None without a trace)."""

    def __init__(self, resolve: Callable[[int], Any] | None = None) -> None:
        self._times: collections.deque[float] = collections.deque()
        self._rows: collections.deque[int] = collections.deque()
        self.resolve = resolve
        self.row: Any = None

    def add(self, times: list[float], rows: list[int] | None = None) -> None:
        self._times.extend(times)
        if rows is not None:
            self._rows.extend(rows)

    def peek(self) -> float:
        return self._times[0] if self._times else math.inf

    def take(self) -> float:
        if self._rows and self.resolve is not None:
            self.row = self.resolve(self._rows.popleft())
        return self._times.popleft()


def arrival_rng(seed: int, worker_index: int, stream: int) -> np.random.Generator:
    """Independent, reproducible random streams per (run seed, worker, purpose)."""
    return np.random.default_rng([seed, worker_index, stream])


def plan_arrivals(plan: RatePlan, seed: int, until_t: float, burstiness: float | None = None,
                  worker_index: int = 0) -> list[float]:
    """All intended times before `until_t` for a fully known plan; what a dispatcher with the same seed sends."""
    clock = ArrivalClock(plan, GapSampler(arrival_rng(seed, worker_index, 0), burstiness))
    times: list[float] = []
    while clock.peek() < until_t:
        times.append(clock.take())
    return times
