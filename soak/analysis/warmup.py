"""Where a series' warm-up ends, found from the data (docs/gates.md, "Warm-up from the data").

The configured warm-up is a floor: nothing before it is ever judged. After it, MSER-5 (the marginal
standard error rule, White 1997; White, Cobb & Spratt 2000) picks the cut: the series is batched in
means of five, and the cut is the batch boundary d that minimises the sum of squared deviations of the
batches after d divided by (batches left)², searched over the first half, as the rule prescribes.

MSER on its own would also cut a straight-line rise (every cut shortens the spread it sees), and a
leak is a straight-line rise. So a cut is taken only when what it drops is an *approach*: the dropped
part moved towards the kept part's level at least three times faster than the kept part moves, and by
more than the kept part's noise, its own slope covering at least half the gap. A steady slope, a
step with flat sides or noise keep the configured floor, so the leak checks and the step gate still
judge them.

A series is `still_settling` when MSER's best cut over the whole series lies in its second half and
the series is still approaching there: each third moves more slowly than the one before, in the same
direction, the first ≥ 2× faster than the last, and the second half still moves beyond its noise. Such a run is too short to tell
where the series settles, let alone whether it then grows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from soak.analysis.theil_sen import theil_sen_line

BATCH = 5
MIN_BATCHES = 4          # fewer than 20 points after the floor: nothing to find
APPROACH_RATIO = 3.0     # the dropped part moves ≥ 3× faster than the kept part
SETTLING_RATIO = 2.0     # still settling: the first third moves ≥ 2× faster than the last
COVERS = 0.5             # the dropped part's own slope covers ≥ half the gap (an approach, not a step)
NOISE_SDS = 2.0          # …and by more than twice the kept part's robust noise
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class WarmupCut:
    """Where judging starts on one series: `index` of the first kept point, its time `t_s`
    (the configured warm-up when the data found nothing later), how (`"mser-5"` or `"configured"`),
    and whether the series was still settling at its end."""

    t_s: float
    index: int
    still_settling: bool = False
    method: str = "configured"
    floor_s: float = 0.0

    @property
    def from_data(self) -> bool:
        return self.method == "mser-5"

    def to_dict(self) -> dict:
        return {"t_s": self.t_s, "index": self.index, "still_settling": self.still_settling,
                "method": self.method, "floor_s": self.floor_s}


def settle_index(t_s: np.ndarray, y: np.ndarray, floor_s: float = 0.0, min_kept: int = 0) -> WarmupCut:
    """The end of warm-up of y over t_s (sorted; nan points count as points but never as values),
    never before `floor_s`. A cut that would keep fewer than `min_kept` values (too few to judge) is not
    taken: on a short run a rise that is fastest early can look like an approach, and dropping it would
    leave nothing to judge, so the configured floor stands."""
    t_s, y = np.asarray(t_s, dtype=float), np.asarray(y, dtype=float)
    start = int(np.searchsorted(t_s, floor_s, side="left"))
    finite = np.flatnonzero(np.isfinite(y[start:]) & np.isfinite(t_s[start:])) + start
    configured = WarmupCut(_time_at(t_s, start, floor_s), start, floor_s=floor_s)
    if finite.size < MIN_BATCHES * BATCH:
        return configured
    times, values = t_s[finite], y[finite]
    batches = batch_means(values)
    settling = _still_settling(times, values, batches)
    cut = mser_cut(batches, len(batches) // 2)
    if settling or cut == 0 or not is_approach(times, values, cut * BATCH):
        index = int(finite[len(values) // 2]) if settling else start
        return WarmupCut(_time_at(t_s, index, floor_s), index, settling,
                         "mser-5" if settling else "configured", floor_s)
    if values.size - cut * BATCH < min_kept:
        return configured
    index = int(finite[cut * BATCH])
    return WarmupCut(float(t_s[index]), index, False, "mser-5", floor_s)


def batch_means(y: np.ndarray, size: int = BATCH) -> np.ndarray:
    """Means of consecutive batches of `size` (a trailing partial batch is dropped)."""
    whole = (y.size // size) * size
    return y[:whole].reshape(-1, size).mean(axis=1)


def mser_cut(batches: np.ndarray, last: int) -> int:
    """MSER: the d in [0, last] minimising Σ_{j≥d}(z_j − z̄_d)² / (m − d)²."""
    m = batches.size
    scores = [float(np.var(batches[d:]) / (m - d)) for d in range(0, min(last, m - 2) + 1)]
    return int(np.argmin(scores))


def is_approach(t_s: np.ndarray, y: np.ndarray, cut: int) -> bool:
    """Whether the points before `cut` move towards the level after it ≥ 3× faster than the kept
    part moves, by more than the kept part's noise."""
    if cut < 3 or y.size - cut < 3:
        return False
    early_slope = _slope(t_s[:cut], y[:cut])
    late_slope = _slope(t_s[cut:], y[cut:])
    gap = float(np.median(y[cut:]) - np.median(y[:cut]))
    toward = np.sign(early_slope) == np.sign(gap) != 0
    faster = abs(early_slope) >= APPROACH_RATIO * abs(late_slope)
    covers = abs(early_slope) * float(t_s[cut - 1] - t_s[0]) >= COVERS * abs(gap)
    return bool(toward and faster and covers and abs(gap) > NOISE_SDS * _noise(t_s[cut:], y[cut:]))


def _still_settling(t_s: np.ndarray, y: np.ndarray, batches: np.ndarray) -> bool:
    """MSER's best cut over the whole series is in its second half, and the series still
    approaches there (each third slower than the one before, same direction, second half still moving)."""
    m = batches.size
    if mser_cut(batches, m - 2) <= m // 2:
        return False
    thirds = np.array_split(np.arange(y.size), 3)
    slopes = [_slope(t_s[part], y[part]) for part in thirds]
    same_way = len({np.sign(slope) for slope in slopes}) == 1 and slopes[0] != 0
    # Slowing third by third: a step inside the series speeds one third up and is no approach.
    slowing = abs(slopes[0]) > abs(slopes[1]) > abs(slopes[2]) and abs(slopes[0]) >= SETTLING_RATIO * abs(slopes[2])
    half = y.size // 2
    late_move = abs(_slope(t_s[half:], y[half:])) * float(t_s[-1] - t_s[half])
    return bool(same_way and slowing and late_move > NOISE_SDS * _noise(t_s[half:], y[half:]))


def _slope(t_s: np.ndarray, y: np.ndarray) -> float:
    if y.size < 2 or np.ptp(t_s) == 0 or np.ptp(y) == 0:
        return 0.0
    return theil_sen_line(t_s, y)[0]


def _noise(t_s: np.ndarray, y: np.ndarray) -> float:
    """Robust spread of y around its Theil–Sen line."""
    slope = _slope(t_s, y)
    residuals = y - slope * t_s
    return MAD_TO_SD * float(np.median(np.abs(residuals - np.median(residuals))))


def _time_at(t_s: np.ndarray, index: int, floor_s: float) -> float:
    return float(t_s[index]) if index < t_s.size else float(floor_s)
