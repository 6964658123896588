"""soak/analysis/theil_sen.py is scipy's Theil–Sen line to the last bit: the step and warm-up searches must not
depend on which of the two fitted their segments."""

import numpy as np
import pytest
from scipy.stats import theilslopes

from soak.analysis.theil_sen import theil_sen_line


@pytest.mark.parametrize("seed", range(4))
def test_the_line_is_scipys_own(seed):
    rng = np.random.default_rng(seed)
    for n in (2, 3, 8, 47, 120):
        evenly = np.arange(n) * 1800.0
        repeated = np.sort(rng.integers(0, n, n).astype(float)) * 10.0  # ties in time are left out of the slopes
        for t_s in (evenly, repeated):
            if np.ptp(t_s) == 0:
                continue
            for y in (2e9 + rng.standard_normal(n) * 1e7, 40.0 + rng.poisson(2.0, n), np.cumsum(rng.standard_normal(n))):
                expected = theilslopes(y, t_s)
                assert theil_sen_line(t_s, y) == (float(expected.slope), float(expected.intercept))
