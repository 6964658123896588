"""Downsampling of long time series for charts: a min/max envelope per time bucket, so spikes survive.

A 72 h run sampled at 1 Hz has ~260k points per series; a browser chart needs ~2000. Averaging would hide the
single-sample spike a release manager must see, so each time bucket keeps both its lowest and its highest sample.
"""

from __future__ import annotations

import numpy as np

MAX_POINTS = 2000
# A jump longer than 10 sampling intervals, or than 3 bucket widths once downsampled (min and max of neighbouring
# buckets can sit up to 2 widths apart), is missing data, not a slow change.
GAP_SAMPLE_STEPS = 10
GAP_BUCKET_WIDTHS = 3


def finite_pairs(t_s: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (time, value) pairs whose time and value are both finite, sorted by time."""
    t_s = np.asarray(t_s, dtype=float)
    values = np.asarray(values, dtype=float)
    keep = np.isfinite(t_s) & np.isfinite(values)
    t_s, values = t_s[keep], values[keep]
    if len(t_s) > 1 and np.any(np.diff(t_s) < 0):
        order = np.argsort(t_s, kind="stable")
        t_s, values = t_s[order], values[order]
    return t_s, values


def _bucket_ids(t_s: np.ndarray, n_buckets: int) -> np.ndarray:
    """Equal-width time buckets over the series' span (equal-count buckets when all times are equal)."""
    span_s = t_s[-1] - t_s[0]
    if span_s <= 0:
        return np.arange(len(t_s)) * n_buckets // len(t_s)
    ids = ((t_s - t_s[0]) / span_s * n_buckets).astype(np.int64)
    return np.minimum(ids, n_buckets - 1)


def envelope(t_s: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_points` (time, value) pairs: per time bucket its minimum and its maximum, in time order.

    Non-finite values are dropped; a series already short enough comes back whole.
    """
    t_s, values = finite_pairs(t_s, values)
    if len(t_s) <= max_points:
        return t_s, values
    bucket = _bucket_ids(t_s, max(max_points // 2, 1))
    order = np.lexsort((values, bucket))  # by bucket, then by value within the bucket
    sorted_bucket = bucket[order]
    firsts = np.flatnonzero(np.r_[True, sorted_bucket[1:] != sorted_bucket[:-1]])
    lasts = np.r_[firsts[1:], len(order)] - 1
    keep = np.unique(np.r_[order[firsts], order[lasts]])  # indices, so time order is kept
    return t_s[keep], values[keep]


def gap_threshold_s(t_s: np.ndarray, max_points: int = MAX_POINTS) -> float:
    """The time jump above which two neighbouring points of a downsampled series are not joined by a line."""
    t_s = np.asarray(t_s, dtype=float)
    if len(t_s) < 2:
        return float("inf")
    raw_step_s = float(np.median(np.diff(t_s)))
    bucket_s = (t_s[-1] - t_s[0]) / max(max_points // 2, 1)
    return max(GAP_SAMPLE_STEPS * raw_step_s, GAP_BUCKET_WIDTHS * bucket_s)


def break_gaps(t_s: np.ndarray, values: np.ndarray, gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN after each jump longer than `gap_s`, so a chart shows an outage instead of bridging it."""
    if len(t_s) < 2 or not np.isfinite(gap_s):
        return t_s, values
    jumps = np.flatnonzero(np.diff(t_s) > gap_s) + 1
    if len(jumps) == 0:
        return t_s, values
    gap_t_s = (t_s[jumps - 1] + t_s[jumps]) / 2
    return np.insert(t_s, jumps, gap_t_s), np.insert(values.astype(float), jumps, np.nan)


def chart_series(t_s: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """A series ready to plot: finite pairs, min/max envelope, and NaN breaks at gaps in the raw data."""
    raw_t_s, raw_values = finite_pairs(t_s, values)
    gap_s = gap_threshold_s(raw_t_s, max_points)
    small_t_s, small_values = envelope(raw_t_s, raw_values, max_points)
    return break_gaps(small_t_s, small_values, gap_s)
