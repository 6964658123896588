"""Leak attribution by scenario: window growth regressed on each scenario's counts (HC1 OLS)."""

import numpy as np
import pytest

from soak.analysis.attribution import attribute, attribution_text, hc1_ols
from soak.analysis.fmt import bytes_range_text, bytes_text
from soak.analysis.inputs import WindowRequests

MIB = 2**20
WINDOW_S = 1800.0


def windows(rng, rate_low, rate_high, n=48, cancel=False):
    """Per-window counts at a rate drawn anew for each window (the load moves, so terms separate)."""
    rows = []
    for i in range(n):
        count = int(rng.poisson(rng.uniform(rate_low, rate_high) * WINDOW_S))
        rows.append(WindowRequests(i, i * WINDOW_S, (i + 1) * WINDOW_S, requests=0 if cancel else count,
                                  cancelled=count if cancel else 0))
    return tuple(rows)


def growth_series(per_window_growth, noise_sd, rng):
    """Readings at each window's start: the level reached after the windows before it."""
    level = np.concatenate([[0.0], np.cumsum(per_window_growth)])[:-1]
    return np.arange(level.size) * WINDOW_S, 1e9 + level + rng.normal(0, noise_sd, level.size)


def test_only_the_leaking_scenario_is_named():
    rng = np.random.default_rng(1)
    scenarios = {"chat": windows(rng, 1, 4), "rag": windows(rng, 0.5, 2), "cancel": windows(rng, 0.1, 0.6, cancel=True)}
    growth = np.array([2 * MIB * w.cancelled for w in scenarios["cancel"]])
    t_s, values = growth_series(growth, 4 * MIB, rng)
    result = attribute(t_s, values, scenarios)
    assert result.named is not None and result.named.name == "cancel (cancelled)"
    assert result.named.estimate == pytest.approx(2 * MIB, rel=0.1) and result.named.ci[0] > 0
    others = [term for term in result.terms if term is not result.named and not term.is_time]
    assert [term.name for term in others] == ["chat", "rag"]
    assert all(term.ci[0] <= 0 <= term.ci[1] for term in others)
    text = attribution_text(result, bytes_text, bytes_range_text)
    assert text.startswith("≈ 2.0 MiB per cancelled `cancel` request (95 % CI ")
    assert text.endswith("; other scenarios ≈ 0")


def test_growth_tied_to_time_is_named_as_time():
    rng = np.random.default_rng(2)
    scenarios = {"chat": windows(rng, 1, 4)}
    t_s, values = growth_series(np.full(47, 8 * MIB), MIB, rng)
    result = attribute(t_s, values, scenarios)
    assert result.named is not None and result.named.is_time
    assert result.named.estimate * 3600 == pytest.approx(16 * MIB, rel=0.25)
    assert "tied to time" in attribution_text(result, bytes_text, bytes_range_text)


def test_a_steady_load_cannot_tell_requests_from_time():
    # Constant rate: every scenario's count moves in step with the clock, so nothing is named.
    rng = np.random.default_rng(3)
    scenarios = {"chat": windows(rng, 2, 2), "rag": windows(rng, 1, 1)}
    growth = np.array([1e4 * w.requests for w in scenarios["chat"]])
    t_s, values = growth_series(growth, 20 * MIB, rng)
    result = attribute(t_s, values, scenarios)
    assert result.named is None
    assert "unclear" in attribution_text(result, bytes_text, bytes_range_text)


def test_without_scenario_counts_or_with_too_few_intervals_there_is_no_attribution():
    rng = np.random.default_rng(4)
    t_s, values = growth_series(np.full(47, MIB), MIB, rng)
    assert attribute(t_s, values, {}) is None
    assert attribute(t_s[:4], values[:4], {"chat": windows(rng, 1, 2)}) is None


def test_hc1_ols_recovers_coefficients_with_robust_errors():
    rng = np.random.default_rng(5)
    x = np.column_stack([rng.uniform(0, 10, 200), np.ones(200)])
    y = 3 * x[:, 0] + 5 + rng.normal(0, 1, 200) * x[:, 0]  # noise grows with x
    beta, se = hc1_ols(x, y)
    assert beta == pytest.approx([3, 5], abs=0.6)
    assert (se > 0).all()
