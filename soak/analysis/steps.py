"""The step gate: one lasting shift of level, the case a straight-line trend under-reads
(docs/gates.md, "Late onset and steps").

Errors at 0.1 % for 18 h and then 3 %, or +400 MiB at hour 14 that never comes back down, bend a
straight line: its slope reads a fraction of the real change. This gate finds the single most
likely split after the first quarter of the series (the l1 cost of ruptures, medians, so one stall
window cannot pull the split; an early step is a warm-up tail or an allocator settling on its
plateau, which the trend's persistence gate judges) and FAILs only when all three hold:

* **size** — the later segment's median is at least `min_shift` above the earlier one's. Callers
  set `min_shift` to the change their threshold trend would make over the whole judged span, so a
  linear drift under the threshold (whose best split shows half its total rise) never reaches it;
* **significance** — the shift of the medians beyond half `min_shift` (a step of a size that
  matters, not merely one above 0, as the trend's CI must clear half its threshold) over its robust
  standard error (MAD of the within-segment residuals, never less than the readings' resolution —
  whole fds, KV in blocks — so a median flipping by one unit over a tiny MAD is no step), z shrunk
  by the AR(1) factor of those residuals as in `trend`, multiplied by the number of split positions
  searched (Bonferroni), must be under `p_value`; and a one-sided Mann–Whitney test of later against
  earlier must agree at `p_value`, so the shift is one of the whole segments, not of a few points;
* **it lasts** — the last third of the later segment still sits at least half the shift above the
  earlier median (a burst that recovers is `errors.bursts`' business, not a step).

The series is oriented so that "bad" is upward, as for `assess_trend`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu, norm

from soak.analysis.pelt import pelt_l2
from soak.analysis.step_records import Stair, Staircase, StepResult
from soak.analysis.theil_sen import theil_sen_line
from soak.analysis.trend import ar1_factor, lag1_autocorrelation

MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class StepSpec:
    """What a step must show to count; `min_shift` is in series units."""

    min_shift: float
    p_value: float = 0.01
    min_size: int = 3
    min_points: int = 12
    min_start_frac: float = 0.25


def find_step(t_s: np.ndarray, y: np.ndarray, spec: StepSpec) -> StepResult | None:
    """The most likely upward step of y over t_s, judged against spec; None with too few points."""
    t_s, y = _finite_sorted(t_s, y)
    if y.size < max(spec.min_points, 2 * spec.min_size) or np.ptp(y) == 0:
        return None
    positions = _positions(y.size, spec)
    split = _best_split(y, positions)
    before, after = y[:split], y[split:]
    shift = float(np.median(after) - np.median(before))
    p_value = _shift_p(before, after, shift - spec.min_shift / 2, len(positions))
    tail = after[-max(1, after.size // 3):]
    gates = {"size": shift >= spec.min_shift, "significant": p_value < spec.p_value,
             "lasts": float(np.median(tail)) >= float(np.median(before)) + shift / 2}
    return StepResult(t_s=float(t_s[split]), index=split, before=float(np.median(before)),
                      after=float(np.median(after)), shift=shift, p_value=min(p_value, 1.0),
                      min_shift=spec.min_shift, gates=gates)


def _finite_sorted(t_s: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t_s, y = np.asarray(t_s, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(t_s) & np.isfinite(y)
    order = np.argsort(t_s[keep], kind="stable")
    return t_s[keep][order], y[keep][order]


def _positions(n: int, spec: StepSpec) -> range:
    """The split positions searched: from the first quarter's end, leaving `min_size` points each side."""
    first = max(spec.min_size, int(np.ceil(spec.min_start_frac * n)))
    return range(first, max(n - spec.min_size + 1, first + 1))


def _best_split(y: np.ndarray, positions: range) -> int:
    """Index of the first point of the later segment: the allowed split of least total l1 cost."""
    from ruptures.costs import CostL1  # slow to import; only the step gate needs it

    cost = CostL1().fit(y)
    return min(positions, key=lambda k: cost.error(0, k) + cost.error(k, y.size))


def _shift_p(before: np.ndarray, after: np.ndarray, shift: float, positions: int) -> float:
    """One-sided p that `after` sits higher than `before`: the larger of the robust median-shift
    test (Bonferroni over the `positions` searched) and Mann–Whitney's."""
    residuals = np.concatenate([before - np.median(before), after - np.median(after)])
    # The scan picks the split that looks most like a step, so an under-estimated φ would let slow
    # drift pass as one: the factor uses φ's upper end (+1/√n, about its standard error).
    factor = ar1_factor(min(lag1_autocorrelation(residuals) + 1 / np.sqrt(residuals.size), 0.9))
    resolution = _resolution(np.concatenate([before, after]))
    return max(positions * _median_shift_p(residuals, before.size, after.size, shift, factor, resolution),
               _rank_p(before, after))


def _median_shift_p(residuals: np.ndarray, n_before: int, n_after: int, shift: float, factor: float,
                    resolution: float) -> float:
    """p of a median shift this large given the residuals' robust spread (MAD, at least the resolution)."""
    sd = max(MAD_TO_SD * float(np.median(np.abs(residuals))), resolution) or float(np.std(residuals)) or 1e-12
    # Medians of normal samples are ~1.25× noisier than means.
    standard_error = 1.2533 * sd * math.sqrt(1 / n_before + 1 / n_after) * factor
    return float(norm.sf(shift / standard_error))


def _rank_p(before: np.ndarray, after: np.ndarray) -> float:
    """One-sided Mann–Whitney p of later above earlier."""
    return float(mannwhitneyu(after, before, alternative="greater", method="asymptotic").pvalue)


def _resolution(y: np.ndarray) -> float:
    """The smallest step between distinct readings: 1 for whole fds, 1/64 for KV in 64 blocks
    (0 for continuous readings, where it is far below the noise anyway)."""
    distinct = np.unique(y)
    return float(np.diff(distinct).min()) if distinct.size > 1 else 0.0


# ---- net growth: a staircase of lasting steps ------------------------------------------------------

STAIR_PENALTY_LOG_N = 3.0   # PELT penalty: 3·log(n)·σ², a BIC-like price per change-point
STAIR_MIN_SIZE = 3          # points per segment: a change in the last two points cannot show it lasts


def find_staircase(t_s: np.ndarray, y: np.ndarray, min_step: float, min_points: int = 12) -> Staircase | None:
    """Segment y by level and keep the upward changes of at least `min_step` that never returned: every
    later level stays at least half the change above the level before it. None with too few points."""
    t_s, y = _finite_sorted(t_s, y)
    if y.size < max(min_points, 2 * STAIR_MIN_SIZE):
        return None
    bounds = _level_changes(y)
    segments = list(zip([0, *bounds], [*bounds, y.size]))
    levels = [float(np.median(y[a:b])) for a, b in segments]
    # A step happened between the last point of the old level and the first of the new: its time is
    # the midpoint (for window floors, the boundary between the two windows).
    stairs = tuple(Stair(float(t_s[b - 1] + t_s[b]) / 2, b, levels[i], levels[i + 1])
                   for i, (_, b) in enumerate(segments[:-1])
                   if levels[i + 1] - levels[i] >= min_step and min(levels[i + 1:]) >= (levels[i] + levels[i + 1]) / 2)
    within = float(sum(_growth_inside(t_s[a:b], y[a:b]) for a, b in segments))
    return Staircase(levels[0], levels[-1], stairs, within, min_step, _levels_vs_line(t_s, y, segments, levels))


def _levels_vs_line(t_s: np.ndarray, y: np.ndarray, segments: list[tuple[int, int]], levels: list[float]) -> float:
    """Squared residue around the segment levels over that around the series' Theil–Sen line: near 1 for
    a ramp cut into pieces, far under 1 for a staircase."""
    fitted = np.concatenate([np.full(b - a, level) for (a, b), level in zip(segments, levels)])
    slope, intercept = theil_sen_line(t_s, y) if np.ptp(y) else (0.0, float(y[0]))
    line_residue = float(np.sum((y - (intercept + slope * t_s)) ** 2))
    return float(np.sum((y - fitted) ** 2)) / line_residue if line_residue > 0 else 1.0


def _level_changes(y: np.ndarray) -> list[int]:
    """Indices where a new level starts (PELT with an l2 cost, penalty 3·log(n)·σ², σ from the first
    differences, which a level change barely moves; `pelt.pelt_l2` is ruptures' PELT, faster)."""
    differences = np.diff(y)
    sigma = MAD_TO_SD * float(np.median(np.abs(differences - np.median(differences)))) / math.sqrt(2)
    sigma = sigma or float(np.std(differences)) or 1e-12
    penalty = STAIR_PENALTY_LOG_N * math.log(y.size) * sigma ** 2
    return pelt_l2(y, penalty, STAIR_MIN_SIZE)[:-1]


def _growth_inside(t_s: np.ndarray, y: np.ndarray) -> float:
    """How much one segment rises along its own Theil–Sen line (0 for a segment that falls)."""
    if y.size < 3 or np.ptp(t_s) == 0 or np.ptp(y) == 0:
        return 0.0
    return max(theil_sen_line(t_s, y)[0] * float(t_s[-1] - t_s[0]), 0.0)
