"""Whether memory growth follows LoRA churn: how much each adapter load/unload cycle carries.

A churn cycle unloads an adapter and loads it again (soak/load/lora.py); each successful scheduled load is a
`lora_load` event with its cycle number. Between consecutive raw samples of the judged series the growth Δy is
fitted, by ordinary least squares without an intercept and with HC1 standard errors (`attribution.hc1_ols`), to
the number of cycles whose load fell in that interval and the interval's length (growth tied to the clock or to
the traffic). Samples are seconds apart and cycles minutes apart, so most intervals hold no cycle and the two
terms come apart; when every interval holds one (churn as often as sampling), they cannot, and the CI says so.

Churn is named ("growth follows lora churn") when the per-cycle CI lies above 0 and the cycles explain most of the
growth. This only words the evidence: no verdict depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from soak.analysis.attribution import MOST, hc1_ols
from soak.contracts import Event, EventKind

MIN_CYCLES = 3
MIN_INTERVALS = 6


@dataclass(frozen=True)
class ChurnFit:
    """Growth per load/unload cycle over the judged span, its CI, and the share of the growth the cycles explain."""

    cycles: int
    per_cycle: float
    ci: tuple[float, float]
    share: float

    @property
    def named(self) -> bool:
        """The growth follows the churn: the per-cycle CI is above 0 and the cycles explain most of it."""
        return self.ci[0] > 0 and self.share > MOST

    def to_dict(self, unit: str) -> dict:
        return {"cycles": self.cycles, "per_cycle": self.per_cycle, "ci": list(self.ci), "share": self.share,
                "unit": f"{unit}/cycle", "named": self.named}

    def text(self, amount: Callable[[float], str], amount_range: Callable[[float, float], str],
             confidence: float) -> str:
        """E.g. "growth follows lora churn: ≈ 0.9 MiB per load/unload cycle (95 % CI 0.8–1.0 MiB, 14 cycles)"."""
        figures = (f"≈ {amount(self.per_cycle)} per load/unload cycle ({100 * confidence:g} % CI "
                   f"{amount_range(*self.ci)}, {self.cycles} cycles)")
        if self.named:
            return f"growth follows lora churn: {figures}"
        return f"the growth is not shown to follow lora churn: {figures}"


def cycle_times(events: Iterable[Event]) -> np.ndarray:
    """When each scheduled adapter load succeeded (loads at start or after a restart are no cycle)."""
    return np.array(sorted(event.t_s for event in events
                           if event.kind == EventKind.LORA_LOAD and isinstance(event.data.get("cycle"), int)))


def fit_churn(t_s: np.ndarray, values: np.ndarray, cycles_t: np.ndarray, confidence: float = 0.95
              ) -> ChurnFit | None:
    """The growth per cycle of `values` (raw samples at `t_s`); None with too few cycles or samples."""
    t_s, values = np.asarray(t_s, dtype=float), np.asarray(values, dtype=float)
    keep = np.isfinite(t_s) & np.isfinite(values)
    t_s, values = t_s[keep], values[keep]
    if t_s.size < MIN_INTERVALS + 1:
        return None
    before = np.searchsorted(np.sort(cycles_t), t_s, side="right")  # cycles up to each sample
    counts = np.diff(before).astype(float)  # cycles in each (t_i, t_i+1]
    if counts.sum() < MIN_CYCLES:
        return None
    growth = np.diff(values)
    design = np.column_stack([counts, np.diff(t_s)])
    estimate, se = hc1_ols(design, growth)
    half = float(student_t.ppf(0.5 + confidence / 2, growth.size - 2) * se[0])
    total = float(growth.sum())
    share = float(estimate[0] * counts.sum() / total) if total else 0.0
    return ChurnFit(int(counts.sum()), float(estimate[0]), (float(estimate[0] - half), float(estimate[0] + half)),
                    share)
