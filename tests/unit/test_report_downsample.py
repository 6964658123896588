"""Min/max envelope downsampling: spikes and dips survive, the point count stays bounded, gaps stay gaps."""

from __future__ import annotations

import numpy as np
import pytest

from soak.report.downsample import MAX_POINTS, break_gaps, chart_series, envelope, finite_pairs, gap_threshold_s

pytestmark = pytest.mark.timeout(60)

SAMPLES_72H = 72 * 3600


def noisy_series(n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return np.arange(n, dtype=float), 1000 + rng.normal(0, 5, n)


@pytest.mark.parametrize("at", [0, 1, 12345, SAMPLES_72H // 2, SAMPLES_72H - 1])
def test_single_sample_spike_and_dip_survive(at):
    t_s, values = noisy_series(SAMPLES_72H)
    values[at] = 50_000.0
    values[(at + 7919) % SAMPLES_72H] = -50_000.0
    small_t, small_v = envelope(t_s, values)
    assert small_v.max() == 50_000.0 and small_v.min() == -50_000.0
    assert small_t[np.argmax(small_v)] == at  # at its own time, not a bucket's average time


@pytest.mark.parametrize("n", [MAX_POINTS + 1, 10_000, SAMPLES_72H])
@pytest.mark.parametrize("max_points", [100, 777, MAX_POINTS])
def test_point_count_is_bounded(n, max_points):
    t_s, values = noisy_series(n)
    small_t, small_v = envelope(t_s, values, max_points)
    assert len(small_t) == len(small_v) <= max_points
    assert len(small_t) > max_points * 0.9  # and the budget is used, not wasted
    assert np.all(np.diff(small_t) > 0)


def test_short_series_is_returned_whole():
    t_s, values = noisy_series(500)
    small_t, small_v = envelope(t_s, values)
    np.testing.assert_array_equal(small_t, t_s)
    np.testing.assert_array_equal(small_v, values)


def test_non_finite_values_are_dropped_and_time_sorted():
    t_s = np.array([3.0, 1.0, 2.0, np.nan, 4.0])
    values = np.array([30.0, 10.0, np.nan, 5.0, np.inf])
    small_t, small_v = finite_pairs(t_s, values)
    np.testing.assert_array_equal(small_t, [1.0, 3.0])
    np.testing.assert_array_equal(small_v, [10.0, 30.0])


def test_identical_times_still_bounded():
    small_t, small_v = envelope(np.zeros(10_000), np.arange(10_000.0), 100)
    assert len(small_t) <= 100 and small_v.max() == 9999.0 and small_v.min() == 0.0


def test_an_outage_breaks_the_line():
    t_s = np.r_[np.arange(0.0, 1000.0), np.arange(2000.0, 3000.0)]  # 1000 s without samples
    shown_t, shown_v = chart_series(t_s, np.ones_like(t_s))
    assert np.isnan(shown_v).sum() == 1
    gap_at = np.flatnonzero(np.isnan(shown_v))[0]
    assert shown_t[gap_at - 1] < shown_t[gap_at] < shown_t[gap_at + 1]


def test_regular_sampling_has_no_breaks_when_downsampled():
    t_s, values = noisy_series(SAMPLES_72H)
    _, shown_v = chart_series(t_s, values)
    assert not np.isnan(shown_v).any() and len(shown_v) <= MAX_POINTS


def test_gap_threshold_scales_with_sampling_and_buckets():
    assert gap_threshold_s(np.arange(0.0, 100.0, 5.0)) == 50.0  # 10 sampling steps
    assert gap_threshold_s(np.arange(0.0, 260_000.0)) == pytest.approx(3 * 260_000 / 1000, rel=1e-3)
    t_s, values = break_gaps(np.array([0.0, 1.0]), np.array([1.0, 2.0]), float("inf"))
    assert len(t_s) == 2 and not np.isnan(values).any()
