"""Latency tables from the per-window HDR histograms: exact percentiles over many windows by merging them.

Percentiles cannot be averaged, but HDR histograms add up. Each `latency_windows.hist` is
`HdrHistogram.encode()` (base64) of values in microseconds; a window whose histogram is missing falls back to
the percentiles stored beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from hdrh.histogram import HdrHistogram

from soak.store.histograms import decode_histogram

log = logging.getLogger(__name__)

US_PER_MS = 1000.0
PERCENTILES = (50, 95, 99)
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


def hist_stats(hist: HdrHistogram) -> dict[str, Any]:
    """Count and P50/P95/P99 in ms of a histogram."""
    count = hist.get_total_count()
    stats: dict[str, Any] = {"count": count, "approx": False}
    for pct in PERCENTILES:
        stats[f"p{pct}"] = hist.get_value_at_percentile(pct) / US_PER_MS if count else None
    return stats


def stored_stats(row: dict[str, Any]) -> dict[str, Any]:
    """Count and P50/P95/P99 in ms as stored in a window row."""
    stats: dict[str, Any] = {"count": row.get("count") or 0, "approx": False}
    for pct in PERCENTILES:
        stats[f"p{pct}"] = row.get(f"p{pct}_ms")
    return stats


def window_stats(row: dict[str, Any]) -> dict[str, Any]:
    """Percentiles of one window: from its histogram when it has one, else as stored."""
    hist = decode(row.get("hist"))
    return hist_stats(hist) if hist is not None else stored_stats(row)


def _weighted_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A count-weighted mean of stored window percentiles: only an approximation, and marked as one."""
    total = sum(row.get("count") or 0 for row in rows)
    stats: dict[str, Any] = {"count": total, "approx": True}
    for pct in PERCENTILES:
        pairs = [(row[f"p{pct}_ms"], row.get("count") or 0) for row in rows if row.get(f"p{pct}_ms") is not None]
        weight = sum(count for _, count in pairs)
        stats[f"p{pct}"] = sum(value * count for value, count in pairs) / weight if weight else None
    return stats


def overall_stats(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Percentiles over all `rows`: exact from merged histograms when every window has one."""
    if not rows:
        return None
    hists = [decode(row.get("hist")) for row in rows]
    if all(hist is not None for hist in hists):
        return hist_stats(merge(hists))
    if len(rows) == 1:
        return stored_stats(rows[0])
    return _weighted_stats(rows)


def metric_row(rows: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """One table row: a metric's overall, first-window and last-window percentiles after warm-up."""
    measured = sorted((row for row in rows if row["window_index"] >= 0), key=lambda row: row["window_index"])
    return {
        "metric": metric,
        "label": METRIC_LABELS.get(metric, metric),
        "overall": overall_stats(measured),
        "first": window_stats(measured[0]) if measured else None,
        "last": window_stats(measured[-1]) if measured else None,
        "first_window": measured[0] if measured else None,
        "last_window": measured[-1] if measured else None,
    }


def latency_tables(windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One table per scenario ("*" = all scenarios, first) with TTFT, ITL and E2E rows."""
    scenarios = sorted({row["scenario"] for row in windows}, key=lambda name: (name != "*", name))
    tables = []
    for scenario in scenarios:
        rows = [row for row in windows if row["scenario"] == scenario]
        metric_rows = [metric_row([r for r in rows if r["metric"] == m], m) for m in TABLE_METRICS]
        tables.append({
            "scenario": scenario,
            "label": "all scenarios" if scenario == "*" else scenario,
            "rows": [row for row in metric_rows if row["overall"] is not None],
        })
    return [table for table in tables if table["rows"]]


def window_percentile_ms(row: dict[str, Any], pct: int) -> float | None:
    """One window's percentile in ms: as stored, else from its histogram, else None."""
    stored = row.get(f"p{pct}_ms")
    if stored is not None:
        return stored
    hist = decode(row.get("hist"))
    if hist is None or not hist.get_total_count():
        return None
    return hist.get_value_at_percentile(pct) / US_PER_MS
