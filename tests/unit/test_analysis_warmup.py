"""Warm-up found from the data (soak/analysis/warmup.py): MSER-5 with the configured warm-up as a floor."""

import numpy as np
import pytest

from soak.analysis.warmup import batch_means, mser_cut, settle_index

T_S = np.arange(0.0, 1800.0, 30.0)
FLOOR_S = 90.0


def noisy(values, seed):
    return 100.0 + values + np.random.default_rng(seed).normal(0, 1, values.size)


def cuts(shape, seeds=range(40)):
    return [settle_index(T_S, noisy(shape(T_S), seed), FLOOR_S) for seed in seeds]


def test_a_flat_series_keeps_the_configured_warmup():
    for cut in cuts(lambda t: 0 * t):
        assert (cut.method, cut.t_s, cut.index, cut.still_settling) == ("configured", FLOOR_S, 3, False)


def test_a_straight_line_rise_is_not_cut_as_warmup():
    # A leak is a straight-line rise: cutting it as warm-up would hide it from the leak checks.
    assert all(not cut.from_data and not cut.still_settling for cut in cuts(lambda t: t / 100))


def test_a_warmup_tail_is_cut_after_the_configured_floor_and_where_it_has_settled():
    found = cuts(lambda t: -30 * np.exp(-t / 150))
    settled = [cut for cut in found if cut.from_data and not cut.still_settling]
    assert len(settled) >= 0.8 * len(found)
    # By 3 time constants the tail is within 1.5 of the 1-sd noise; the cut lands after 1 and before 6.
    assert all(150 <= cut.t_s <= 900 for cut in settled)
    assert all(cut.t_s == T_S[cut.index] for cut in found)


def test_a_tail_that_lasts_the_whole_run_is_still_settling():
    found = cuts(lambda t: -30 * np.exp(-t / 600))
    assert sum(cut.still_settling for cut in found) >= 0.9 * len(found)
    assert all(cut.t_s >= 900 for cut in found if cut.still_settling)  # the cut is at the half


def test_a_step_with_flat_sides_is_left_to_the_step_gate():
    found = cuts(lambda t: 20.0 * (t > 600))
    assert sum(cut.from_data for cut in found) <= 0.15 * len(found)


def test_a_falling_warmup_is_found_too():
    # Latency often starts high (cold caches) and settles down.
    found = cuts(lambda t: 30 * np.exp(-t / 150))
    assert sum(cut.from_data for cut in found) >= 0.8 * len(found)


def test_too_few_points_keep_the_configured_floor_and_nan_is_skipped():
    short = settle_index(T_S[:20], noisy(-30 * np.exp(-T_S[:20] / 60), 1), FLOOR_S)
    assert short.method == "configured" and short.index == 3
    values = noisy(-30 * np.exp(-T_S / 150), 2)
    values[::7] = np.nan
    cut = settle_index(T_S, values, FLOOR_S)
    assert np.isfinite(values[cut.index]) and cut.t_s >= FLOOR_S
    assert cut.to_dict() == {"t_s": cut.t_s, "index": cut.index, "still_settling": cut.still_settling,
                             "method": cut.method, "floor_s": FLOOR_S}


def test_a_floor_past_the_end_cuts_everything():
    cut = settle_index(T_S, noisy(0 * T_S, 0), 5000.0)
    assert cut.index == T_S.size and cut.t_s == 5000.0


def test_mser_picks_the_end_of_a_transient():
    batches = np.array([0.0, 5.0, 9.0, 10.0, 10.1, 9.9, 10.0, 10.05, 9.95, 10.0])
    assert mser_cut(batches, 5) == 3
    assert batch_means(np.arange(12.0)) == pytest.approx([2.0, 7.0])
