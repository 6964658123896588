"""PELT change points under an l2 cost: ruptures' `Pelt(model="l2", min_size=k, jump=1)`, decision for decision,
at a small fraction of its cost (the net-growth step search, `steps.find_staircase`, runs it on every judged
series, and the early-stop replay on every look).

ruptures computes each candidate segment's cost with its own numpy `var` call and keeps each partition as a dict
whose values it sums afresh at every comparison: some 10⁴ numpy calls for a series of 288 window floors. Here:

* the costs of all segments of one length come from one `var` over the matrix of those segments, whose rows numpy
  reduces exactly as it reduces one segment alone, so every cost is the same float as ruptures';
* a partition's total is its parent's total plus its last segment's cost-plus-penalty: ruptures' values are numpy
  floats, so its `sum(partition.values())` is those same additions, in that order;
* the candidates, the first minimum, the pruning (including ruptures' pairing of its admissible points with its
  candidates, which skips the points that have no partition) follow ruptures step by step.

Same floats, same comparisons, same ties: the same change points (tests/unit/test_analysis_pelt.py holds it to
ruptures). Series longer than `BULK_MAX_POINTS`, or whose costs overflow, go to ruptures itself.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

BULK_MAX_POINTS = 2048  # the cost matrix is (n+1)² floats: 32 MiB at this size


def pelt_l2(y: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """The end index of every segment of the least penalised l2 segmentation of y (the last is y.size), as
    `ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(y).predict(pen=penalty)` returns them."""
    y = np.asarray(y, dtype=float)
    if y.ndim != 1 or y.size < min_size or y.size > BULK_MAX_POINTS:
        return _ruptures_pelt(y, penalty, min_size)
    costs = segment_costs(y, min_size)
    if not np.isfinite(costs[np.triu_indices(y.size + 1, min_size)]).all():  # inf or nan: ruptures compares those
        return _ruptures_pelt(y, penalty, min_size)
    parents = _best_parents(costs, y.size, penalty, min_size)
    ends, end = [], y.size
    while end > 0:
        ends.append(end)
        end = parents[end]
    return sorted(ends)


def segment_costs(y: np.ndarray, min_size: int) -> np.ndarray:
    """costs[start, end]: variance × length of y[start:end] for every segment of at least `min_size` points, as
    ruptures' CostL2 computes it (inf where no segment is)."""
    n = y.size
    costs = np.full((n + 1, n + 1), np.inf)
    following = sliding_window_view(np.concatenate([y, np.zeros(n)]), n)[:n]  # row i: y[i:], then zeros
    for length in range(min_size, n + 1):
        # A contiguous copy: numpy then reduces each row pairwise, exactly as it reduces the segment alone.
        segments = np.ascontiguousarray(following[:n - length + 1, :length])
        starts = np.arange(n - length + 1)
        costs[starts, starts + length] = np.var(segments, axis=1) * length
    return costs


def _best_parents(costs: np.ndarray, n: int, penalty: float, min_size: int) -> dict[int, int]:
    """For each end ruptures visits, where its best partition's last segment starts (ruptures' `_seg`, jump 1)."""
    totals = np.zeros(n + 1)  # the penalised cost of the best partition of y[:end]; 0 for the empty one
    has_partition = np.zeros(n + 1, dtype=bool)
    has_partition[0] = True
    parents: dict[int, int] = {}
    admissible = np.zeros(0, dtype=np.intp)
    for end in [*range(min_size, n), n]:
        admissible = np.append(admissible, end - min_size)
        starts = admissible[has_partition[admissible]]  # ruptures skips a start with no partition (its KeyError)
        candidates = totals[starts] + (costs[starts, end] + penalty)
        best = int(np.argmin(candidates))  # the first minimum, as min() takes it
        totals[end], parents[end] = candidates[best], int(starts[best])
        has_partition[end] = True
        # ruptures zips its admissible points with its candidates, which are fewer when a start was skipped: the
        # pairing, not the start behind each candidate, decides which points stay.
        admissible = admissible[:starts.size][candidates <= candidates[best] + penalty]
    return parents


def _ruptures_pelt(y: np.ndarray, penalty: float, min_size: int) -> list[int]:
    import ruptures  # slow to import; only needed past the bulk path's size

    return [int(end) for end in ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(y).predict(pen=penalty)]
