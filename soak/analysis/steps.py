"""The step gate: one lasting shift of level, the case a straight-line trend under-reads
(docs/gates.md, "Late onset and steps").

Errors at 0.1 % for 18 h and then 3 %, or +400 MiB at hour 14 that never comes back down, bend a
straight line: its slope reads a fraction of the real change. This gate finds the single most
likely split (ruptures' binary segmentation with the l1 cost, so one stall window cannot pull the
split) and FAILs only when all three hold:

* **size** — the later segment's median is at least `min_shift` above the earlier one's. Callers
  set `min_shift` to the change their threshold trend would make over the whole judged span, so a
  linear drift under the threshold (whose best split shows half its total rise) never reaches it;
* **significance** — the shift over its robust standard error (MAD of the within-segment residuals,
  widened for lag-1 autocorrelation as in `trend.widen`) gives a one-sided normal p that, multiplied
  by the number of split positions searched (Bonferroni), is under `p_value`;
* **it lasts** — the last third of the later segment still sits at least half the shift above the
  earlier median (a burst that recovers is `errors.bursts`' business, not a step).

The series is oriented so that "bad" is upward, as for `assess_trend`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import norm

MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class StepSpec:
    """What a step must show to count; `min_shift` is in series units."""

    min_shift: float
    p_value: float = 0.01
    min_size: int = 3
    min_points: int = 12


@dataclass(frozen=True)
class StepResult:
    """The most likely split and which gates it passed; `found` when all of them did."""

    t_s: float
    index: int
    before: float
    after: float
    shift: float
    p_value: float
    min_shift: float
    gates: dict[str, bool] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        return bool(self.gates) and all(self.gates.values())

    def to_dict(self) -> dict:
        return {"t_s": self.t_s, "before": self.before, "after": self.after, "shift": self.shift,
                "p_value": self.p_value, "min_shift": self.min_shift, "found": self.found,
                "gates": dict(self.gates)}


def find_step(t_s: np.ndarray, y: np.ndarray, spec: StepSpec) -> StepResult | None:
    """The most likely upward step of y over t_s, judged against spec; None with too few points."""
    t_s, y = _finite_sorted(t_s, y)
    if y.size < max(spec.min_points, 2 * spec.min_size) or np.ptp(y) == 0:
        return None
    split = _best_split(y, spec.min_size)
    before, after = y[:split], y[split:]
    shift = float(np.median(after) - np.median(before))
    p_value = _shift_p(before, after, shift) * _positions(y.size, spec.min_size)
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


def _best_split(y: np.ndarray, min_size: int) -> int:
    """Index of the first point of the later segment."""
    import ruptures  # slow to import; only the step gate needs it

    return int(ruptures.Binseg(model="l1", min_size=min_size, jump=1).fit(y).predict(n_bkps=1)[0])


def _positions(n: int, min_size: int) -> int:
    """How many split positions the search could have chosen."""
    return max(n - 2 * min_size + 1, 1)


def _shift_p(before: np.ndarray, after: np.ndarray, shift: float) -> float:
    """One-sided p of a shift this large, from the robust within-segment spread."""
    residuals = np.concatenate([before - np.median(before), after - np.median(after)])
    sd = MAD_TO_SD * float(np.median(np.abs(residuals)))
    if sd == 0:
        sd = float(np.std(residuals)) or 1e-12
    phi = _lag1(before, after)
    standard_error = sd * math.sqrt(1 / before.size + 1 / after.size) * math.sqrt((1 + phi) / (1 - phi))
    # Medians of normal samples are ~1.25× noisier than means.
    return float(norm.sf(shift / (1.2533 * standard_error)))


def _lag1(before: np.ndarray, after: np.ndarray) -> float:
    """Lag-1 autocorrelation within the segments, clamped to [0, 0.9]."""
    pairs = [(seg[:-1] - seg.mean(), seg[1:] - seg.mean()) for seg in (before, after) if seg.size > 2]
    if not pairs:
        return 0.0
    numerator = sum(float(np.dot(a, b)) for a, b in pairs)
    denominator = sum(float(np.dot(s - s.mean(), s - s.mean())) for s in (before, after))
    return float(np.clip(numerator / denominator, 0.0, 0.9)) if denominator > 0 else 0.0
