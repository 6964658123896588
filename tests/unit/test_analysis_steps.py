"""The step gate: one lasting upward shift of level (soak/analysis/steps.py)."""

import numpy as np
import pytest

from soak.analysis.steps import StepSpec, find_step

T_S = np.arange(48.0) * 1800.0


def noisy(values, sd=1.0, seed=0):
    return values + np.random.default_rng(seed).normal(0, sd, values.size)


def test_a_lasting_step_is_found_where_it_is():
    result = find_step(T_S, noisy(np.where(np.arange(48) < 28, 100.0, 150.0)), StepSpec(min_shift=30.0))
    assert result.found
    assert result.index == 28 and result.t_s == T_S[28]
    assert result.shift == pytest.approx(50, abs=2) and result.before == pytest.approx(100, abs=1)
    assert result.to_dict()["found"] is True


def test_a_step_under_the_minimum_shift_is_not_found():
    result = find_step(T_S, noisy(np.where(np.arange(48) < 28, 100.0, 110.0)), StepSpec(min_shift=30.0))
    # Significance is of a shift beyond half the minimum, so a small real step is neither big nor significant.
    assert not result.found and result.gates["size"] is False and result.gates["significant"] is False


def test_a_linear_drift_whose_total_rise_is_the_minimum_shift_is_not_a_step():
    # The best split of a line shows about half its total rise.
    result = find_step(T_S, noisy(np.linspace(0, 40.0, 48)), StepSpec(min_shift=40.0))
    assert not result.found and result.gates["size"] is False


def test_a_burst_that_recovers_does_not_last():
    values = np.full(48, 100.0)
    values[20:36] = 180.0
    result = find_step(T_S, noisy(values), StepSpec(min_shift=30.0))
    assert result is None or not result.found


def test_noise_alone_is_not_significant():
    hits = sum(bool(find_step(T_S, noisy(np.zeros(48), seed=s), StepSpec(min_shift=0.0)).found) for s in range(50))
    assert hits <= 2


def test_too_few_or_flat_points_give_none():
    assert find_step(T_S[:10], np.arange(10.0), StepSpec(min_shift=1.0)) is None
    assert find_step(T_S, np.full(48, 3.0), StepSpec(min_shift=1.0)) is None


def test_lasting_steps_are_found_with_their_times_and_a_bump_that_returns_is_not():
    from soak.analysis.steps import find_staircase

    hours = T_S / 3600
    stairs = find_staircase(T_S, noisy(50.0 * (hours > 12) + 60.0 * (hours > 18), sd=3.0), min_step=20.0)
    assert stairs.is_staircase and len(stairs.stairs) == 2
    assert [s.shift for s in stairs.stairs] == [pytest.approx(50, abs=4), pytest.approx(60, abs=4)]
    assert [s.t_s / 3600 for s in stairs.stairs] == [12.25, 18.25]  # between the last old and first new point
    assert stairs.net == pytest.approx(110, abs=5) and stairs.to_dict()["is_staircase"] is True
    bump = find_staircase(T_S, noisy(50.0 * ((hours > 10) & (hours < 16)), sd=3.0), min_step=20.0)
    assert not bump.stairs and abs(bump.net) < 5


def test_a_ramp_cut_into_pieces_is_not_a_staircase():
    from soak.analysis.steps import find_staircase

    for seed in range(10):
        ramp = find_staircase(T_S, noisy(np.linspace(0, 110.0, 48), sd=14.0, seed=seed), min_step=20.0)
        assert not ramp.is_staircase, ramp.to_dict()
