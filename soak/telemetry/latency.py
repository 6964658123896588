"""Per-window latency: a mergeable HDR histogram per (window, scenario, metric), plus counts by error class.

Each finished request lands in the window of its *intended* send time. Windows start at the end of warm-up
(index 0); the warm-up is window −1. Partial windows are written (upserted) at every flush, so a killed soak
loses at most one flush interval; windows that can no longer change are then dropped from memory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from hdrh.histogram import HdrHistogram

from soak.contracts import P99Ms
from soak.samples import LatencyWindow, RequestWindow
from soak.slo import SloTargets
from soak.store.histograms import (
    HIGHEST_US,
    LOWEST_US,
    encode_histogram,
    new_histogram,
)
from soak.store.models import ALL_SCENARIOS, ERROR_CLASSES, LATENCY_METRICS

LATE_SEND_MS = 1000.0


class RequestLike(Protocol):
    """The fields of `soak.load.RequestRecord` this module reads."""

    scenario: str
    intended_t: float
    ttft_ms: float | None
    itl_ms: tuple[float, ...]
    e2e_ms: float
    queue_ms: float
    lag_ms: float
    output_tokens: int | None
    prompt_tokens: int | None
    error_class: str | None
    expected_error: bool


def window_index(t_s: float, warmup_s: float, window_s: float) -> int:
    """−1 during warm-up, then 0, 1, … every `window_s` after it."""
    if t_s < warmup_s:
        return -1
    return int((t_s - warmup_s) // window_s)


def window_bounds(index: int, warmup_s: float, window_s: float) -> tuple[float, float]:
    """(start_s, end_s) of a window index."""
    if index < 0:
        return 0.0, warmup_s
    start_s = warmup_s + index * window_s
    return start_s, start_s + window_s


def record_ms(histogram: HdrHistogram, value_ms: float) -> None:
    """Record a millisecond value, clamped into the histogram's range."""
    value_us = min(max(int(round(value_ms * 1000.0)), LOWEST_US), HIGHEST_US)
    histogram.record_value(value_us)


def record_many_ms(histogram: HdrHistogram, values_ms: tuple[float, ...] | list[float]) -> None:
    """Record many millisecond values at once (a request's inter-token gaps), each as `record_ms` would.

    hdrh's own `record_value` costs ~10 µs of Python per value, once per streamed token; here numpy computes
    every value's counts index with hdrh's formula (bucket from the bit length, sub-bucket from the shift).
    """
    values = np.asarray(values_ms, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not values.size:
        return
    value_us = np.clip(np.rint(values * 1000.0), LOWEST_US, HIGHEST_US).astype(np.int64)
    h = histogram
    bit_length = np.frexp((value_us | h.sub_bucket_mask).astype(np.float64))[1].astype(np.int64)
    bucket = bit_length - h.unit_magnitude - (h.sub_bucket_half_count_magnitude + 1)
    sub_bucket = value_us >> (bucket + h.unit_magnitude)
    index = ((bucket + 1) << h.sub_bucket_half_count_magnitude) + (sub_bucket - h.sub_bucket_half_count)
    np.add.at(np.ctypeslib.as_array(h.counts), index, 1)
    h.total_count += int(value_us.size)
    h.min_value = min(h.min_value, int(value_us.min()))
    h.max_value = max(h.max_value, int(value_us.max()))


@functools.cache
def _index_values_us() -> tuple[np.ndarray, np.ndarray]:
    """(highest, median) equivalent value of every counts-array index, for the one layout soak uses."""
    layout = new_histogram()
    lowest = [layout.get_value_from_index(i) for i in range(layout.counts_len)]
    highest = np.array([layout.get_highest_equivalent_value(v) for v in lowest], dtype=np.float64)
    return highest, (np.array(lowest, dtype=np.float64) + highest) / 2.0


def percentiles_us(histogram: HdrHistogram, percentiles: tuple[float, ...]) -> list[float]:
    """Values at percentiles, as HdrHistogram defines them, computed over the counts array with numpy.

    The pure-Python `get_value_at_percentile` walks ~23 k buckets per call; at every flush that held the
    gevent loop for seconds and delayed sends.
    """
    counts = np.ctypeslib.as_array(histogram.counts)[: histogram.counts_len]
    cumulative = np.cumsum(counts)
    total = int(cumulative[-1])
    highest, _ = _index_values_us()
    targets = [max(int(min(p, 100.0) * total / 100.0 + 0.5), 1) for p in percentiles]
    return [float(highest[np.searchsorted(cumulative, target)]) for target in targets]


def mean_us(histogram: HdrHistogram) -> float:
    """Mean of the recorded values (each counted at its bucket's median equivalent value)."""
    counts = np.ctypeslib.as_array(histogram.counts)[: histogram.counts_len]
    _, median = _index_values_us()
    # Not np.dot: with uint32 counts it takes numpy's generic loop, as float64 it wakes the BLAS threads; either
    # costs ~10 ms a histogram, and at every flush that held the load's event loop for ~0.1 s.
    return float((counts * median).sum() / counts.sum())


def latency_window(histogram: HdrHistogram, window_index: int, scenario: str, metric: str, start_s: float,
                   end_s: float) -> LatencyWindow:
    """One metric's window from its histogram: count, mean, percentiles and max in ms, and the encoded histogram."""
    where = (window_index, scenario, metric, start_s, end_s)
    count = histogram.get_total_count()
    if count == 0:
        return LatencyWindow(*where, count=0, mean_ms=None, p50_ms=None, p90_ms=None, p95_ms=None, p99_ms=None,
                             max_ms=None, hist=None)
    p50, p90, p95, p99 = (value / 1000.0 for value in percentiles_us(histogram, (50, 90, 95, 99)))
    return LatencyWindow(*where, count=count, mean_ms=mean_us(histogram) / 1000.0, p50_ms=p50, p90_ms=p90,
                         p95_ms=p95, p99_ms=p99, max_ms=histogram.get_max_value() / 1000.0,
                         hist=encode_histogram(histogram))


@dataclass
class _Cell:
    """Histograms and counts of one (window, scenario).

    Latencies wait in `pending` until `settle` records them in one numpy step per metric: recording each value
    into hdrh as it came cost more than the rest of handling a streamed token.
    """

    histograms: dict[str, HdrHistogram] = field(default_factory=lambda: {m: new_histogram() for m in LATENCY_METRICS})
    counts: dict[str, int] = field(default_factory=dict)
    pending: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in LATENCY_METRICS})

    def add(self, record: RequestLike, with_itl: bool = True, slo: SloTargets | None = None) -> None:
        """Count the request (and, with an SLO, whether it met it) and keep its latencies; `with_itl=False` leaves
        its inter-token gaps out."""
        _count_outcome(self.counts, record)
        if slo is not None and slo.met(record):
            self.counts["slo_met"] = self.counts.get("slo_met", 0) + 1
        for metric, value_ms in _latency_values(record):
            self.pending[metric].append(value_ms)
        if with_itl and record.itl_ms and _succeeded(record):
            self.pending["itl"].extend(record.itl_ms)

    def settle(self) -> _Cell:
        """Record the pending latencies into the histograms; returns the cell."""
        for metric, values in self.pending.items():
            if values:
                record_many_ms(self.histograms[metric], values)
                values.clear()
        return self

    def merge(self, other: _Cell) -> None:
        for metric, histogram in other.settle().histograms.items():
            self.histograms[metric].add(histogram)
        for key, value in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + value


def _succeeded(record: RequestLike) -> bool:
    return record.error_class is None and not record.expected_error


def _latency_values(record: RequestLike) -> list[tuple[str, float]]:
    """The one-per-request latency samples (inter-token gaps are recorded in bulk); failed and cancelled requests
    only add lag and queue time."""
    values = [("lag", max(record.lag_ms, 0.0)), ("queue", max(record.queue_ms, 0.0))]
    if _succeeded(record):
        values.append(("e2e", record.e2e_ms))
        if record.ttft_ms is not None:
            values.append(("ttft", record.ttft_ms))
    return values


def _count_outcome(counts: dict[str, int], record: RequestLike) -> None:
    def bump(key: str, by: int = 1) -> None:
        counts[key] = counts.get(key, 0) + by

    bump("requests")
    if record.error_class == "cancelled":
        bump("cancelled")
    elif record.error_class in ERROR_CLASSES and not record.expected_error:
        bump("err_" + record.error_class)
    elif record.expected_error:
        bump("expected_errors")
    else:
        bump("ok")
    bump("output_tokens", record.output_tokens or 0)
    bump("prompt_tokens", record.prompt_tokens or 0)
    if record.lag_ms > LATE_SEND_MS:
        bump("late_sends_1s")


@dataclass(frozen=True)
class LiveLatency:
    """What the requests measured since the warm-up say so far: counts by kind (`requests`, `err_<class>`, …)
    and the TTFT/E2E P99s (0 before the first request)."""

    counts: dict[str, int]
    p99_ms: P99Ms

    @property
    def requests(self) -> int:
        return self.counts.get("requests", 0)

    @property
    def errors(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind.startswith("err_"))


class LatencyWindows:
    """Aggregates finished requests into windows and hands the changed ones over at each flush."""

    def __init__(self, t0_epoch_s: float, warmup_s: float, window_s: float, keep_open_s: float = 60.0,
                 slo: SloTargets | None = None):
        self.slo = slo  # with an SLO each request row counts the requests that met it (`slo_met`), else NULL
        self.t0_epoch_s = t0_epoch_s
        self.warmup_s = warmup_s
        self.window_s = window_s
        self.keep_open_s = keep_open_s
        self._cells: dict[tuple[int, str], _Cell] = {}
        self._dirty: set[int] = set()
        self.measured = _Cell()  # everything after warm-up but inter-token gaps, for live progress
        self._closed_below = -2  # windows below this index were written for good and forgotten
        self.dropped_late = 0
        _index_values_us()  # build the lookup now, not inside the first flush on the load loop

    def add(self, record: RequestLike) -> None:
        """Account one finished request."""
        index = window_index(record.intended_t - self.t0_epoch_s, self.warmup_s, self.window_s)
        if index < self._closed_below:
            self.dropped_late += 1  # rewriting a closed window from scratch would lose its stored counts
            return
        cell = self._cells.get((index, record.scenario))
        if cell is None:  # not setdefault: a new _Cell allocates five histograms, ~0.5 MiB
            cell = self._cells[(index, record.scenario)] = _Cell()
        cell.add(record, slo=self.slo)
        if index >= 0:
            self.measured.add(record, with_itl=False)  # the live display reads TTFT and E2E only
        self._dirty.add(index)

    def flush_windows(self, now_s: float) -> tuple[list[LatencyWindow], list[RequestWindow]]:
        """(latency windows, request windows) of every window changed since the last flush, scenario "*" included.

        Windows that ended more than `keep_open_s` before `now_s` (seconds since start) are then forgotten.
        """
        latency: list[LatencyWindow] = []
        requests: list[RequestWindow] = []
        for index in sorted(self._dirty):
            for scenario, cell in self._scenario_cells(index):
                latency.extend(self._latency(index, scenario, cell))
                requests.append(self._requests(index, scenario, cell))
        self._dirty.clear()
        self._forget_before(now_s)
        return latency, requests

    def _scenario_cells(self, index: int) -> list[tuple[str, _Cell]]:
        cells = [(scenario, cell) for (i, scenario), cell in self._cells.items() if i == index]
        merged = _Cell()
        for _, cell in cells:
            merged.merge(cell)
        return cells + [(ALL_SCENARIOS, merged)]

    def _latency(self, index: int, scenario: str, cell: _Cell) -> list[LatencyWindow]:
        start_s, end_s = window_bounds(index, self.warmup_s, self.window_s)
        return [latency_window(histogram, index, scenario, metric, start_s, end_s)
                for metric, histogram in cell.settle().histograms.items()]

    def _requests(self, index: int, scenario: str, cell: _Cell) -> RequestWindow:
        """The window's counts (none counted: 0), and its requests that met the SLO (None without one)."""
        counts = {key: value for key, value in cell.counts.items() if key != "slo_met"}
        slo_met = cell.counts.get("slo_met", 0) if self.slo is not None else None
        return RequestWindow(index, scenario, *window_bounds(index, self.warmup_s, self.window_s), **counts,
                             slo_met=slo_met)

    def _forget_before(self, now_s: float) -> None:
        closed = [k for k in self._cells if window_bounds(k[0], self.warmup_s, self.window_s)[1] < now_s - self.keep_open_s]
        for key in closed:
            del self._cells[key]
        if closed:
            self._closed_below = max(self._closed_below, max(index for index, _ in closed) + 1)

    def progress(self) -> LiveLatency:
        """Counts and P99s since warm-up, for the live display (the summary is computed from the database)."""
        histograms = self.measured.settle().histograms
        p99_ms = {m: percentiles_us(histograms[m], (99,))[0] / 1000.0 if histograms[m].get_total_count() else 0.0
                  for m in ("ttft", "e2e")}
        return LiveLatency(counts=dict(self.measured.counts), p99_ms=P99Ms(**p99_ms))
