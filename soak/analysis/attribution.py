"""Which scenario leaks: the growth between consecutive points of a leak series, regressed on what
each scenario did in between.

Each interval between two judged points (window floors or idle-probe readings) grew by Δy. A window
floor of a growing series sits near the window's start, so callers place floors there. Its
regressors are each scenario's finished requests in that interval, its cancelled requests as a term
of their own (named "<scenario> (cancelled)", only when it has any: a cancel is a different code path
and a classic leak), and the interval's length in seconds ("time": growth tied to the clock, not to
requests). The fit is ordinary least squares without an intercept — the time term plays that role —
with heteroskedasticity-robust (HC1) standard errors, since the growth of a busy interval is noisier.

Under a steady load every scenario's count moves almost in step with time, so the terms are nearly
collinear and the CIs wide: then the answer is "unclear", which is honest. A scenario is named only
when its CI lies above 0 and its fitted share explains most (> half) of the total growth.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from soak.analysis.findings import ScenarioGrowth
from soak.analysis.inputs import WindowRequests

TIME = "time"
MOST = 0.5


@dataclass(frozen=True)
class Term:
    """One regressor's fitted growth per unit (per request, or per second for `time`)."""

    name: str
    scenario: str
    estimate: float
    ci: tuple[float, float]
    share: float  # of the total growth this term's fit explains
    cancelled: bool = False

    @property
    def is_time(self) -> bool:
        return self.name == TIME

    def growth(self, unit: str) -> ScenarioGrowth:
        """This term as a finding's evidence row, its unit per request (per second for `time`)."""
        per = "s" if self.is_time else "request"
        return ScenarioGrowth(self.name, self.estimate, self.ci, f"{unit}/{per}", self.share)


@dataclass(frozen=True)
class Attribution:
    """All terms of the fit and the one it names (None when unclear)."""

    terms: tuple[Term, ...]
    named: Term | None
    intervals: int

    def growths(self, unit: str) -> list[ScenarioGrowth]:
        return [term.growth(unit) for term in self.terms]


def attribute(t_s: np.ndarray, values: np.ndarray, scenario_windows: Mapping[str, tuple[WindowRequests, ...]],
              confidence: float = 0.95) -> Attribution | None:
    """Fit the growth of `values` (sampled at `t_s`) to each scenario's counts; None when there are
    no scenario counts or too few intervals for the number of terms."""
    starts, ends, growth = _intervals(t_s, values)
    names, columns = _regressors(starts, ends, scenario_windows)
    if not names or growth.size < len(names) + 3:
        return None
    design = np.column_stack(columns)
    estimate, se = hc1_ols(design, growth)
    half = student_t.ppf(0.5 + confidence / 2, growth.size - len(names)) * se
    total = float(growth.sum())
    terms = tuple(_term(name, estimate[i], half[i], design[:, i].sum(), total) for i, name in enumerate(names))
    return Attribution(terms, _named(terms), int(growth.size))


def _intervals(t_s: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, growth) between consecutive finite points."""
    t_s, values = np.asarray(t_s, dtype=float), np.asarray(values, dtype=float)
    keep = np.isfinite(t_s) & np.isfinite(values)
    t_s, values = t_s[keep], values[keep]
    return t_s[:-1], t_s[1:], np.diff(values)


def _regressors(starts: np.ndarray, ends: np.ndarray,
                scenario_windows: Mapping[str, tuple[WindowRequests, ...]]) -> tuple[list[str], list[np.ndarray]]:
    """Each scenario's requests (and cancels, when any) per interval, then the interval length."""
    names, columns = [], []
    for scenario, rows in sorted(scenario_windows.items()):
        for name, count in ((scenario, lambda w: w.requests), (f"{scenario} (cancelled)", lambda w: w.cancelled)):
            column = _counts(starts, ends, rows, count)
            if column.any():
                names.append(name)
                columns.append(column)
    if not names:
        return [], []
    return names + [TIME], columns + [ends - starts]


def _counts(starts: np.ndarray, ends: np.ndarray, rows: tuple[WindowRequests, ...],
            count: Callable[[WindowRequests], int]) -> np.ndarray:
    """Per interval (start, end], the counts of the windows, each shared by the part of the window
    the interval covers (requests are taken as spread evenly over their window)."""
    w_start = np.array([w.start_s for w in rows])
    w_end = np.array([w.end_s for w in rows])
    counts = np.array([count(w) for w in rows], dtype=float)
    length = np.maximum(w_end - w_start, 1e-9)
    out = np.zeros(starts.size)
    for i, (start, end) in enumerate(zip(starts, ends)):
        covered = np.clip(np.minimum(w_end, end) - np.maximum(w_start, start), 0.0, None) / length
        out[i] = float(covered @ counts)
    return out


def hc1_ols(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients, HC1 standard errors) of y on the design's columns, without an intercept.

    Columns are scaled to unit size first: request counts and seconds differ by orders of magnitude.
    """
    scale = np.abs(design).max(axis=0)
    scale[scale == 0] = 1.0
    x = design / scale
    bread = np.linalg.pinv(x.T @ x)
    beta = bread @ x.T @ y
    residuals = y - x @ beta
    n, k = x.shape
    meat = (x * residuals[:, None] ** 2).T @ x
    cov = bread @ meat @ bread * n / max(n - k, 1)
    return beta / scale, np.sqrt(np.clip(np.diag(cov), 0.0, None)) / scale


def _term(name: str, estimate: float, half: float, exposure: float, total: float) -> Term:
    cancelled = name.endswith(" (cancelled)")
    share = estimate * exposure / total if total else 0.0
    return Term(name, name.removesuffix(" (cancelled)"), float(estimate),
                (float(estimate - half), float(estimate + half)), float(share), cancelled)


def _named(terms: tuple[Term, ...]) -> Term | None:
    """The one term whose CI is above 0 and that explains most of the growth, if any."""
    hits = [term for term in terms if term.ci[0] > 0 and term.share > MOST]
    return max(hits, key=lambda term: term.share) if hits else None


def attribution_text(result: Attribution, amount: Callable[[float], str], amount_range: Callable[[float, float], str],
                     confidence: float = 0.95) -> str:
    """E.g. "≈ 2.1 MiB per `cancel` request (95 % CI 1.8–2.4 MiB); other scenarios ≈ 0", or why it
    is unclear. `amount` words a growth in the series' unit, `amount_range` a CI of it."""
    named = result.named
    if named is None:
        return ("attribution to scenarios is unclear (no scenario's growth per request is both above 0 "
                "and most of the growth)")
    if named.is_time:
        low, high = named.ci
        head = f"growth is tied to time, not requests: ≈ {amount(named.estimate * 3600)}/h"
        ci = f"{amount_range(low * 3600, high * 3600)}/h"
    else:
        kind = "cancelled " if named.cancelled else ""
        head = f"≈ {amount(named.estimate)} per {kind}`{named.scenario}` request"
        ci = amount_range(*named.ci)
    return f"{head} ({100 * confidence:g} % CI {ci}); {_others_text(result.terms, named)}"


def _others_text(terms: tuple[Term, ...], named: Term) -> str:
    others = [term for term in terms if term is not named and not term.is_time]
    if not others:
        return "no other scenario ran"
    contributing = [term for term in others if term.ci[0] > 0 and term.share >= 0.1]
    if not contributing:
        return "other scenarios ≈ 0"
    return "others also contribute: " + ", ".join(f"`{t.name}` {100 * t.share:.0f} %" for t in contributing)
