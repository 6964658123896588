"""Window planning defaults (docs/gates.md, "Short runs") and per-window reductions of sampled series."""

from __future__ import annotations

import numpy as np

from soak.analysis.inputs import WindowInfo

WINDOWS_PER_RUN = 48


def default_warmup_s(run_s: float) -> float:
    """5 % of the run, clamped to [30 s, 60 min]."""
    return float(np.clip(0.05 * run_s, 30.0, 3600.0))


def default_window_s(run_s: float, warmup_s: float) -> float:
    """(run − warm-up)/48, clamped to [5 s, 30 min]."""
    return float(np.clip((run_s - warmup_s) / WINDOWS_PER_RUN, 5.0, 1800.0))


def window_floors(t_s: np.ndarray, values: np.ndarray, windows: list[WindowInfo]) -> np.ndarray:
    """The minimum of `values` inside each window `[start_s, end_s)`; nan where no finite sample.

    The floor, not the mean, because allocator and GC sawtooth sit on top of what is really held.
    """
    return _per_window(t_s, values, windows, np.min)


def window_medians(t_s: np.ndarray, values: np.ndarray, windows: list[WindowInfo]) -> np.ndarray:
    """The median of `values` inside each window; nan where no finite sample."""
    return _per_window(t_s, values, windows, np.median)


def _per_window(t_s: np.ndarray, values: np.ndarray, windows: list[WindowInfo], reduce) -> np.ndarray:
    reduced = np.full(len(windows), np.nan)
    for i, window in enumerate(windows):
        lo, hi = np.searchsorted(t_s, [window.start_s, window.end_s], side="left")
        chunk = values[lo:hi]
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            reduced[i] = reduce(chunk)
    return reduced
