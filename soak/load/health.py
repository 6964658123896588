"""Client health: schedule lag per send, late sends, skipped arrivals and event-loop lag, mergeable across processes.

If the client cannot keep to its schedule, the run measured the client, not the server (the check
`client.saturation`, docs/gates.md); these counters are the evidence. Schedule lag sees only the send side;
the loop lag (`LoopLagMonitor`) sees how late the process wakes for anything, a socket read included, so a
client starved of CPU shows even when its sends still leave on time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import gevent

LATE_SEND_MS = 1000.0
# The loop-lag timer: short enough to catch a stall of a few ms, long enough to cost nothing (20 wakes/s).
LOOP_TICK_S = 0.05
# Geometric bins of 2 % from 0.01 ms to ~3 h: p99 to within 2 % with a fixed, mergeable footprint.
_BIN_FACTOR = 1.02
_BIN_FLOOR_MS = 0.01
_BIN_COUNT = 1100


@dataclass(frozen=True)
class LoadCounters:
    """The load's counters so far, as `LoadHandle.counters()` gives them to the run (and to benches and tests).

    Lags are None until something was measured; `task_errors` is the in-process backend's, `workers` the
    distributed one's (None where the backend has none); a run that sends nothing has all zeros.
    """

    sends: int = 0
    skipped: int = 0
    late_sends_1s: int = 0
    lag_p50_ms: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    in_flight: int = 0
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    loop_ticks: int = 0
    probes: int = 0
    task_errors: int | None = None
    workers: int | None = None


def _bin_of(lag_ms: float) -> int:
    if lag_ms <= _BIN_FLOOR_MS:
        return 0
    return min(int(math.log(lag_ms / _BIN_FLOOR_MS) / math.log(_BIN_FACTOR)) + 1, _BIN_COUNT - 1)


def _bin_upper_ms(index: int) -> float:
    return _BIN_FLOOR_MS * _BIN_FACTOR**index


def _add_to_bins(bins: dict[int, int], value_ms: float) -> None:
    index = _bin_of(value_ms)
    bins[index] = bins.get(index, 0) + 1


def bins_percentile_ms(bins: dict[int, int], max_ms: float, percent: float) -> float | None:
    """Upper edge of the bin holding the given percentile, at most `max_ms` (None for empty bins)."""
    total = sum(bins.values())
    if total == 0:
        return None
    rank, seen = math.ceil(total * percent / 100.0), 0
    for index in sorted(bins):
        seen += bins[index]
        if seen >= rank:
            return min(_bin_upper_ms(index), max_ms)
    return max_ms


def _merge_bins(into: dict[int, int], other: dict[int, int]) -> None:
    for index, count in other.items():
        into[index] = into.get(index, 0) + count


@dataclass
class ClientHealth:
    """Counts of one dispatcher (or the sum of several): sends, skipped arrivals, lag distribution, and how late
    the process's event loop woke (`loop_*`, one sample per `LOOP_TICK_S` tick)."""

    sends: int = 0
    skipped: int = 0
    late_sends_1s: int = 0
    lag_max_ms: float = 0.0
    lag_bins: dict[int, int] = field(default_factory=dict)
    loop_ticks: int = 0
    loop_max_ms: float = 0.0
    loop_bins: dict[int, int] = field(default_factory=dict)

    def record_lag(self, lag_ms: float) -> None:
        """Record one send's schedule lag (sent − intended, less time queued on the concurrency cap)."""
        lag_ms = max(lag_ms, 0.0)
        _add_to_bins(self.lag_bins, lag_ms)
        self.lag_max_ms = max(self.lag_max_ms, lag_ms)
        if lag_ms > LATE_SEND_MS:
            self.late_sends_1s += 1

    def record_loop_lag(self, lag_ms: float) -> None:
        """Record how late one loop-lag tick woke after its timer was due."""
        lag_ms = max(lag_ms, 0.0)
        _add_to_bins(self.loop_bins, lag_ms)
        self.loop_ticks += 1
        self.loop_max_ms = max(self.loop_max_ms, lag_ms)

    def lag_percentile_ms(self, percent: float) -> float | None:
        """Schedule lag at a percentile, to the bin's upper edge (None before any send)."""
        return bins_percentile_ms(self.lag_bins, self.lag_max_ms, percent)

    def loop_percentile_ms(self, percent: float) -> float | None:
        """Event-loop lag at a percentile, to the bin's upper edge (None before any tick)."""
        return bins_percentile_ms(self.loop_bins, self.loop_max_ms, percent)

    def merge(self, other: ClientHealth) -> None:
        self.sends += other.sends
        self.skipped += other.skipped
        self.late_sends_1s += other.late_sends_1s
        self.lag_max_ms = max(self.lag_max_ms, other.lag_max_ms)
        _merge_bins(self.lag_bins, other.lag_bins)
        self.loop_ticks += other.loop_ticks
        self.loop_max_ms = max(self.loop_max_ms, other.loop_max_ms)
        _merge_bins(self.loop_bins, other.loop_bins)

    def to_wire(self) -> dict[str, Any]:
        # msgpack keys must be strings for a stable round trip.
        return {"sends": self.sends, "skipped": self.skipped, "late_sends_1s": self.late_sends_1s,
                "lag_max_ms": self.lag_max_ms, "lag_bins": {str(k): v for k, v in self.lag_bins.items()},
                "loop_ticks": self.loop_ticks, "loop_max_ms": self.loop_max_ms,
                "loop_bins": {str(k): v for k, v in self.loop_bins.items()}}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ClientHealth:
        """Inverse of `to_wire`; a message without the loop fields (an older worker) has no loop samples."""
        def bins(key: str) -> dict[int, int]:
            return {int(k): int(v) for k, v in (data.get(key) or {}).items()}

        return cls(int(data["sends"]), int(data["skipped"]), int(data["late_sends_1s"]),
                   float(data["lag_max_ms"]), bins("lag_bins"), int(data.get("loop_ticks") or 0),
                   float(data.get("loop_max_ms") or 0.0), bins("loop_bins"))

    def counters(self, in_flight: int) -> LoadCounters:
        """The public view: what `LoadHandle.counters()` returns (before the backend adds its own)."""
        return LoadCounters(sends=self.sends, skipped=self.skipped, late_sends_1s=self.late_sends_1s,
                            lag_p50_ms=self.lag_percentile_ms(50), lag_p99_ms=self.lag_percentile_ms(99),
                            lag_max_ms=self.lag_max_ms if self.sends else None, in_flight=in_flight,
                            loop_lag_p99_ms=self.loop_percentile_ms(99),
                            loop_lag_max_ms=self.loop_max_ms if self.loop_ticks else None,
                            loop_ticks=self.loop_ticks)


class LoopLagMonitor:
    """A greenlet that sleeps `tick_s` at a time and records how much later than asked it woke.

    Anything that keeps this process from running (the CPU given to other processes, a long computation on
    the loop, a GC pause) delays every greenlet alike: a socket read that waits for the loop is stamped that
    much late, which no send-side figure shows.
    """

    def __init__(self, health: ClientHealth, tick_s: float = LOOP_TICK_S) -> None:
        self.health = health
        self.tick_s = tick_s
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> LoopLagMonitor:
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._watch)
        return self

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def _watch(self) -> None:
        while True:
            asked_at = time.perf_counter()
            gevent.sleep(self.tick_s)
            self.health.record_loop_lag((time.perf_counter() - asked_at - self.tick_s) * 1000.0)
