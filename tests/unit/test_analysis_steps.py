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
