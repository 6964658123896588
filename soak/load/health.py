"""Client health: schedule lag per send, late sends and skipped arrivals, mergeable across processes.

If the client cannot keep to its schedule, the run measured the client, not the server (the check
`client.saturation`, docs/gates.md); these counters are the evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

LATE_SEND_MS = 1000.0
# Geometric bins of 2 % from 0.01 ms to ~3 h: p99 to within 2 % with a fixed, mergeable footprint.
_BIN_FACTOR = 1.02
_BIN_FLOOR_MS = 0.01
_BIN_COUNT = 1100


def _bin_of(lag_ms: float) -> int:
    if lag_ms <= _BIN_FLOOR_MS:
        return 0
    return min(int(math.log(lag_ms / _BIN_FLOOR_MS) / math.log(_BIN_FACTOR)) + 1, _BIN_COUNT - 1)


def _bin_upper_ms(index: int) -> float:
    return _BIN_FLOOR_MS * _BIN_FACTOR**index


@dataclass
class ClientHealth:
    """Counts of one dispatcher (or the sum of several): sends, skipped arrivals, lag distribution."""

    sends: int = 0
    skipped: int = 0
    late_sends_1s: int = 0
    lag_max_ms: float = 0.0
    lag_bins: dict[int, int] = field(default_factory=dict)

    def record_lag(self, lag_ms: float) -> None:
        """Record one send's schedule lag (sent − intended, less time queued on the concurrency cap)."""
        lag_ms = max(lag_ms, 0.0)
        index = _bin_of(lag_ms)
        self.lag_bins[index] = self.lag_bins.get(index, 0) + 1
        self.lag_max_ms = max(self.lag_max_ms, lag_ms)
        if lag_ms > LATE_SEND_MS:
            self.late_sends_1s += 1

    def lag_percentile_ms(self, percent: float) -> float | None:
        """Upper edge of the bin holding the given percentile (None before any send)."""
        total = sum(self.lag_bins.values())
        if total == 0:
            return None
        rank, seen = math.ceil(total * percent / 100.0), 0
        for index in sorted(self.lag_bins):
            seen += self.lag_bins[index]
            if seen >= rank:
                return min(_bin_upper_ms(index), self.lag_max_ms)
        return self.lag_max_ms

    def merge(self, other: ClientHealth) -> None:
        self.sends += other.sends
        self.skipped += other.skipped
        self.late_sends_1s += other.late_sends_1s
        self.lag_max_ms = max(self.lag_max_ms, other.lag_max_ms)
        for index, count in other.lag_bins.items():
            self.lag_bins[index] = self.lag_bins.get(index, 0) + count

    def to_wire(self) -> dict[str, Any]:
        # msgpack keys must be strings for a stable round trip.
        return {"sends": self.sends, "skipped": self.skipped, "late_sends_1s": self.late_sends_1s,
                "lag_max_ms": self.lag_max_ms, "lag_bins": {str(k): v for k, v in self.lag_bins.items()}}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ClientHealth:
        bins = {int(k): int(v) for k, v in (data.get("lag_bins") or {}).items()}
        return cls(int(data["sends"]), int(data["skipped"]), int(data["late_sends_1s"]),
                   float(data["lag_max_ms"]), bins)

    def counters(self, in_flight: int) -> dict[str, Any]:
        """The public view: what `LoadHandle.counters()` returns."""
        return {"sends": self.sends, "skipped": self.skipped, "late_sends_1s": self.late_sends_1s,
                "lag_p50_ms": self.lag_percentile_ms(50), "lag_p99_ms": self.lag_percentile_ms(99),
                "lag_max_ms": self.lag_max_ms if self.sends else None, "in_flight": in_flight}
