"""Latency tables from the per-window HDR histograms: exact percentiles over many windows by merging them.

Percentiles cannot be averaged, but HDR histograms add up. Each `latency_windows.hist` is
`HdrHistogram.encode()` (base64) of values in microseconds; a window whose histogram is missing falls back to
the percentiles stored beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from hdrh.histogram import HdrHistogram

from soak.report.reading import LatencyWindow
from soak.store.histograms import decode_histogram

log = logging.getLogger(__name__)

US_PER_MS = 1000.0
TABLE_METRICS = ("ttft", "itl", "e2e")
METRIC_LABELS = {"ttft": "TTFT", "itl": "ITL", "e2e": "E2E", "lag": "schedule lag", "queue": "queue wait"}


def decode(text: str | bytes | None) -> HdrHistogram | None:
    """The histogram stored in a window row, or None when there is none or it cannot be decoded."""
    if not text:
        return None
    try:
        return decode_histogram(text if isinstance(text, str) else text.decode("ascii"))
    except Exception as exc:  # hdrh raises assorted errors on corrupt input
        log.warning("cannot decode a latency histogram: %s", exc)
        return None


def merge(hists: Iterable[HdrHistogram]) -> HdrHistogram | None:
    """One histogram holding every value of `hists`, wide enough for the largest of them."""
    hists = list(hists)
    if not hists:
        return None
    first = hists[0]
    highest = max(hist.highest_trackable_value for hist in hists)
    merged = HdrHistogram(first.lowest_trackable_value, highest, first.significant_figures)
    for hist in hists:
        merged.add(hist)
    return merged


@dataclass(frozen=True)
class LatencyStats:
    """Count and P50/P95/P99 in ms of some windows' latencies; `approx` when the percentiles are a count-weighted
    mean of stored window percentiles (some window had no histogram), not exact."""

    count: int
    approx: bool
    p50: float | None
    p95: float | None
    p99: float | None


def _stats(count: int, approx: bool, percentile_ms: Callable[[int], float | None]) -> LatencyStats:
    return LatencyStats(count=count, approx=approx, p50=percentile_ms(50), p95=percentile_ms(95),
                        p99=percentile_ms(99))


def hist_stats(hist: HdrHistogram) -> LatencyStats:
    """Count and P50/P95/P99 in ms of a histogram."""
    count = hist.get_total_count()
    return _stats(count, False, lambda pct: hist.get_value_at_percentile(pct) / US_PER_MS if count else None)


def stored_stats(window: LatencyWindow) -> LatencyStats:
    """Count and P50/P95/P99 in ms as stored in a window row."""
    return _stats(window.count or 0, False, window.stored_ms)


def window_stats(window: LatencyWindow) -> LatencyStats:
    """Percentiles of one window: from its histogram when it has one, else as stored."""
    hist = decode(window.hist)
    return hist_stats(hist) if hist is not None else stored_stats(window)


def _weighted_ms(windows: Sequence[LatencyWindow], pct: int) -> float | None:
    """The count-weighted mean of the windows' stored P`pct`, None when none has one."""
    pairs = [(window.stored_ms(pct), window.count or 0) for window in windows if window.stored_ms(pct) is not None]
    weight = sum(count for _, count in pairs)
    return sum(value * count for value, count in pairs) / weight if weight else None


def _weighted_stats(windows: Sequence[LatencyWindow]) -> LatencyStats:
    """A count-weighted mean of stored window percentiles: only an approximation, and marked as one."""
    total = sum(window.count or 0 for window in windows)
    return _stats(total, True, lambda pct: _weighted_ms(windows, pct))


def overall_stats(windows: Sequence[LatencyWindow]) -> LatencyStats | None:
    """Percentiles over all `windows`: exact from merged histograms when every window has one."""
    if not windows:
        return None
    hists = [decode(window.hist) for window in windows]
    if all(hist is not None for hist in hists):
        return hist_stats(merge(hists))
    if len(windows) == 1:
        return stored_stats(windows[0])
    return _weighted_stats(windows)


@dataclass(frozen=True)
class MetricRow:
    """One row of a latency table: a metric's percentiles over all measured windows, and in the first and last."""

    metric: str
    label: str
    overall: LatencyStats | None
    first: LatencyStats | None
    last: LatencyStats | None


@dataclass(frozen=True)
class LatencyTable:
    """The latency table of one scenario ("*": all scenarios together)."""

    scenario: str
    label: str
    rows: list[MetricRow]


def metric_row(windows: Sequence[LatencyWindow], metric: str) -> MetricRow:
    """One table row: a metric's overall, first-window and last-window percentiles after warm-up."""
    measured = sorted((window for window in windows if window.window_index >= 0),
                      key=lambda window: window.window_index)
    return MetricRow(
        metric=metric,
        label=METRIC_LABELS.get(metric, metric),
        overall=overall_stats(measured),
        first=window_stats(measured[0]) if measured else None,
        last=window_stats(measured[-1]) if measured else None,
    )


def latency_tables(windows: Sequence[LatencyWindow]) -> list[LatencyTable]:
    """One table per scenario ("*" = all scenarios, first) with TTFT, ITL and E2E rows."""
    scenarios = sorted({window.scenario for window in windows}, key=lambda name: (name != "*", name))
    tables = []
    for scenario in scenarios:
        of_scenario = [window for window in windows if window.scenario == scenario]
        rows = [metric_row([w for w in of_scenario if w.metric == m], m) for m in TABLE_METRICS]
        tables.append(LatencyTable(scenario=scenario, label="all scenarios" if scenario == "*" else scenario,
                                   rows=[row for row in rows if row.overall is not None]))
    return [table for table in tables if table.rows]


def window_percentile_ms(window: LatencyWindow, pct: int) -> float | None:
    """One window's percentile in ms: as stored, else from its histogram, else None."""
    stored = window.stored_ms(pct)
    if stored is not None:
        return stored
    hist = decode(window.hist)
    if hist is None or not hist.get_total_count():
        return None
    return hist.get_value_at_percentile(pct) / US_PER_MS
