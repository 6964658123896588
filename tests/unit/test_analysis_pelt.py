"""soak/analysis/pelt.py is ruptures' l2 PELT, change point for change point: the net-growth gate's verdicts must not
depend on which of the two found them."""

import math

import numpy as np
import pytest
import ruptures
from ruptures.costs import CostL2

from soak.analysis.pelt import pelt_l2, segment_costs


def ruptures_ends(y: np.ndarray, penalty: float, min_size: int = 3) -> list[int]:
    return [int(end) for end in ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(y).predict(pen=penalty)]


def series(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """The shapes the step gates see: window floors of bytes (noise, wander, stairs), whole fds, KV in blocks."""
    if kind == "bytes":
        return 2e9 + rng.standard_normal(n) * 1e7
    if kind == "wander":
        return 1.4e9 + np.cumsum(rng.standard_normal(n)) * 1e6
    if kind == "stairs":
        return 1e9 + 5e7 * (np.arange(n) > n // 3) + 8e7 * (np.arange(n) > 2 * n // 3) + rng.standard_normal(n) * 1e7
    if kind == "fds":
        return 40.0 + rng.poisson(2.0, n)
    return np.clip(rng.poisson(8.0, n) / 64, 0, 1)


def penalty_of(y: np.ndarray, scale: float) -> float:
    """The step gate's penalty (3·log(n)·σ², σ from the first differences), scaled to reach weak and strong pruning."""
    differences = np.diff(y)
    sigma = 1.4826 * float(np.median(np.abs(differences - np.median(differences)))) / math.sqrt(2)
    return scale * 3.0 * math.log(y.size) * (sigma or float(np.std(differences)) or 1e-12) ** 2


@pytest.mark.parametrize("kind", ["bytes", "wander", "stairs", "fds", "kv"])
def test_the_change_points_are_ruptures_own(kind):
    rng = np.random.default_rng(7)
    for n, scales in ((6, (1.0,)), (7, (1.0,)), (12, (0.05, 1.0)), (47, (0.05, 1.0, 20.0)), (140, (1.0, 20.0))):
        y = series(kind, n, rng)
        for scale in scales:
            assert pelt_l2(y, penalty_of(y, scale), 3) == ruptures_ends(y, penalty_of(y, scale)), (kind, n, scale)


def test_each_segment_costs_what_ruptures_says_to_the_last_bit():
    y = series("wander", 200, np.random.default_rng(3))
    costs, cost = segment_costs(y, 3), CostL2().fit(y)
    for start, end in [(0, 3), (0, 200), (5, 140), (3, 11), (17, 145), (190, 200)]:
        assert costs[start, end] == cost.error(start, end)


def test_a_constant_series_and_a_long_one_agree_too():
    flat = np.full(40, 5.0)
    assert pelt_l2(flat, 1.0, 3) == ruptures_ends(flat, 1.0) == [40]
    assert pelt_l2(np.arange(10.0), 0.5, 2) == ruptures_ends(np.arange(10.0), 0.5, 2)
