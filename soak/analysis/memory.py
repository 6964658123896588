"""Leak checks on memory and fds: `leak.rss`, `leak.vram`, `leak.fds`.

Each process of the server tree is reduced to one value per judged window — its floor (window
minimum) — or, when idle probes gave at least `min_windows` readings, to its probe readings, which
are taken at rest and so are cleaner still. The tree total is the sum of the per-process values.
The verdict is the total's trend test, escalated to FAIL by any single process whose own trend FAILs
at a Bonferroni-corrected p, so a leak in one process is not hidden by another shrinking.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from soak.analysis.evidence import trend_sentence
from soak.analysis.findings import FAIL, INCONCLUSIVE, SUSPECT, Finding, inconclusive, skipped
from soak.analysis.fmt import bytes_range_text, bytes_text
from soak.analysis.gates import FdLeakGate, Gates, MemoryLeakGate
from soak.analysis.inputs import ProbeReading, RunData
from soak.analysis.trend import TrendResult, TrendSpec, assess_trend
from soak.analysis.windows import window_floors


@dataclass(frozen=True)
class Subject:
    """Raw samples of one quantity of one process."""

    pid: int
    name: str
    t_s: np.ndarray
    values: np.ndarray

    @property
    def label(self) -> str:
        return f"{self.name or 'process'} (pid {self.pid})"


@dataclass(frozen=True)
class LeakKind:
    """What a leak check measures and how to word it."""

    check: str
    quantity: str
    is_bytes: bool
    probe_field: str

    def amount(self, value: float) -> str:
        return bytes_text(value) if self.is_bytes else f"{value:.1f} fds"

    def amount_range(self, low: float, high: float) -> str:
        return bytes_range_text(low, high) if self.is_bytes else f"{low:.1f}–{high:.1f} fds"

    @property
    def unit(self) -> str:
        return "bytes/h" if self.is_bytes else "fds/h"


RSS = LeakKind("leak.rss", "RSS", True, "rss_bytes")
VRAM = LeakKind("leak.vram", "VRAM", True, "vram_bytes")
FDS = LeakKind("leak.fds", "open fds", False, "fds")


@dataclass(frozen=True)
class Series:
    """One reduced series (per-window floors or probe readings) ready for the trend test."""

    label: str
    pid: int | None
    name: str
    t_s: np.ndarray
    values: np.ndarray


def check_rss(run: RunData, gates: Gates) -> Finding:
    subjects = [Subject(p.pid, p.name, p.t_s, p.rss_bytes) for p in run.processes]
    return check_leak(run, gates, RSS, gates.leak.rss, subjects)


def check_vram(run: RunData, gates: Gates) -> Finding:
    if not run.gpu_seen and not run.gpu_processes:
        return skipped(VRAM.check, "No GPU was seen serving the process tree.", gpu_seen=False)
    subjects = [Subject(g.pid, g.name or f"gpu{g.gpu_index}", g.t_s, g.used_bytes)
                for g in run.gpu_processes]
    return check_leak(run, gates, VRAM, gates.leak.vram, subjects)


def check_fds(run: RunData, gates: Gates) -> Finding:
    subjects = [Subject(p.pid, p.name, p.t_s, p.fds) for p in run.processes if p.fds is not None]
    return check_leak(run, gates, FDS, gates.leak.fds, subjects)


def check_leak(run: RunData, gates: Gates, kind: LeakKind, gate: MemoryLeakGate | FdLeakGate,
               subjects: list[Subject]) -> Finding:
    """Trend-test the tree total and each process; see the module docstring."""
    if not subjects and not _probe_values(run.probes, kind):
        return skipped(kind.check, f"No {kind.quantity} samples of the server's processes.",
                       gpu_seen=run.gpu_seen)
    source, rows = reduce_series(run, gates, kind, subjects)
    total = tree_total(rows)
    if total is None or np.isfinite(total.values).sum() < gates.min_windows:
        usable = 0 if total is None else int(np.isfinite(total.values).sum())
        return inconclusive(kind.check, f"Only {usable} usable {source} of {kind.quantity} "
                            f"(< {gates.min_windows} needed) for a trend.",
                            details={"source": source, "points": usable, "gpu_seen": run.gpu_seen})
    total_result = assess_trend(total.t_s, total.values, _spec(gates, gate, total))
    per_process = [(row, assess_trend(row.t_s, row.values, _process_spec(gates, gate, row, len(rows))))
                   for row in rows]
    return _leak_finding(run, gates, kind, source, total, total_result, per_process)


def reduce_series(run: RunData, gates: Gates, kind: LeakKind,
                  subjects: list[Subject]) -> tuple[str, list[Series]]:
    """Per-process series from idle probes when there are enough, else per-window floors."""
    probes = _probe_values(run.probes, kind)
    if len(probes) >= gates.min_windows:
        return "idle-probe readings", _probe_rows(probes, kind)
    windows = run.judged_windows()
    t_s = np.array([w.mid_s for w in windows])
    rows = [Series(s.label, s.pid, s.name, t_s, window_floors(s.t_s, s.values, windows))
            for s in subjects]
    return "window floors", rows


def _probe_values(probes: tuple[ProbeReading, ...], kind: LeakKind) -> list[ProbeReading]:
    """Drained probes that carry a reading of this quantity."""
    return [p for p in probes if p.drained
            and any(getattr(r, kind.probe_field) is not None for r in p.processes)]


def _probe_rows(probes: list[ProbeReading], kind: LeakKind) -> list[Series]:
    t_s = np.array([p.t_s for p in probes])
    names = {r.pid: r.name for p in probes for r in p.processes}
    rows = []
    for pid, name in sorted(names.items()):
        values = [next((getattr(r, kind.probe_field) for r in p.processes if r.pid == pid), None)
                  for p in probes]
        values = np.array([np.nan if v is None else v for v in values], dtype=float)
        rows.append(Series(f"{name} (pid {pid})", pid, name, t_s, values))
    return rows


def tree_total(rows: list[Series]) -> Series | None:
    """Sum over processes, kept only at points where the usual number of processes reported.

    A point where a process is missing (not yet started, restarted, sample lost) would look like
    a drop, so it is left out rather than summed short.
    """
    if not rows:
        return None
    matrix = np.vstack([row.values for row in rows])
    present = np.isfinite(matrix).sum(axis=0)
    if not present.any():
        return None
    usual = np.bincount(present[present > 0]).argmax()
    total = np.where(present == usual, np.nansum(matrix, axis=0), np.nan)
    label = rows[0].label if len(rows) == 1 else f"the server tree ({len(rows)} processes)"
    return Series(label, rows[0].pid if len(rows) == 1 else None, "", rows[0].t_s, total)


def _practical(gate: MemoryLeakGate | FdLeakGate) -> tuple[float, float, float]:
    """(slope per hour, growth fraction, minimum growth) in the check's own unit."""
    if isinstance(gate, FdLeakGate):
        return gate.slope_fds_per_h, gate.growth_frac, gate.min_growth_fds
    return gate.slope_bytes_per_h, gate.growth_frac, gate.min_growth_bytes


def min_slope_per_s(gate: MemoryLeakGate | FdLeakGate, series: Series) -> float:
    """The practical threshold as a slope: the hourly rate, or the growth that must build up over
    the judged span relative to the starting floor — whichever is larger."""
    slope_per_h, growth_frac, min_growth = _practical(gate)
    finite = np.isfinite(series.values)
    t_s, values = series.t_s[finite], series.values[finite]
    span_s = max(float(t_s[-1] - t_s[0]), 1.0) if t_s.size else 1.0
    start_floor = float(np.median(values[:5])) if values.size else 0.0
    growth = max(growth_frac * start_floor, min_growth)
    return max(slope_per_h / 3600.0, growth / span_s)


def _spec(gates: Gates, gate: MemoryLeakGate | FdLeakGate, series: Series) -> TrendSpec:
    return gates.trend_spec(min_slope_per_s(gate, series), persistence=True)


def _process_spec(gates: Gates, gate: MemoryLeakGate | FdLeakGate, row: Series, k: int) -> TrendSpec:
    # Bonferroni over the k processes, so per-process escalation keeps the check's false-alarm rate.
    return replace(_spec(gates, gate, row), p_value=gates.p_value / max(k, 1))


def _leak_finding(run: RunData, gates: Gates, kind: LeakKind, source: str, total: Series,
                  total_result: TrendResult, per_process: list[tuple[Series, TrendResult]]) -> Finding:
    worst_row, worst = total, total_result
    for row, result in per_process:
        # Only a per-process FAIL escalates: per-process SUSPECTs stay in `per_process`, since
        # k processes would otherwise multiply the chances of a noise SUSPECT by k.
        if len(per_process) > 1 and result.verdict == FAIL and worst.verdict != FAIL:
            worst_row, worst = row, result
    rate_per_s = request_rate_per_s(run)
    return Finding(
        check=kind.check, verdict=worst.verdict, value=total_result.slope_per_s * 3600,
        unit=kind.unit, ci=_per_h(total_result.ci_per_s), threshold=total_result.min_slope_per_s * 3600,
        evidence=_leak_evidence(kind, worst_row, worst, rate_per_s, gates.confidence),
        per_process=[_process_entry(kind, row, result) for row, result in per_process],
        per_request=_per_request(kind, total_result, rate_per_s),
        trend=total_result.line("linear"),
        details={"source": source, "points": total_result.n, "mk_p": total_result.mk_p,
                 "gates": total_result.gates, "half_slope_per_h": _h(total_result.half_slope_per_s),
                 "judged_by": worst_row.label, "gpu_seen": run.gpu_seen,
                 "largest_step": largest_step(total)},
    )


def largest_step(series: Series) -> dict | None:
    """Where the single most likely level shift sits (ruptures, diagnostic only): a ramp puts it
    mid-run with half the rise; an allocator step shows as a sharp shift with flat sides."""
    import ruptures  # imported here: it is slow to import and only this diagnostic needs it

    finite = np.isfinite(series.values)
    t_s, values = series.t_s[finite], series.values[finite]
    if values.size < 8 or np.ptp(values) == 0:
        return None
    split = ruptures.Binseg(model="l2", min_size=3).fit(values).predict(n_bkps=1)[0]
    return {"t_s": float(t_s[split]), "size": float(values[split:].mean() - values[:split].mean())}


def _leak_evidence(kind: LeakKind, row: Series, result: TrendResult, rate_per_s: float | None,
                   confidence: float) -> str:
    per_h = result.slope_per_s * 3600
    low, high = _per_h(result.ci_per_s)
    text = trend_sentence(result, f"{kind.quantity} of {row.label}", f"{kind.amount(per_h)}/h",
                          f"{kind.amount_range(low, high)}/h",
                          f"{kind.amount(result.min_slope_per_s * 3600)}/h", confidence)
    if rate_per_s and result.verdict in (FAIL, SUSPECT):
        text += f"; {kind.amount(result.slope_per_s / rate_per_s)}/request"
    return text


def _process_entry(kind: LeakKind, row: Series, result: TrendResult) -> dict:
    finite = row.values[np.isfinite(row.values)]
    return {
        "pid": row.pid, "name": row.name, "verdict": result.verdict,
        "value": result.slope_per_s * 3600 if result.verdict != INCONCLUSIVE else None,
        "ci": list(_per_h(result.ci_per_s)) if result.verdict != INCONCLUSIVE else None,
        "unit": kind.unit, "floor": float(finite.min()) if finite.size else None,
        "mk_p": result.mk_p, "points": result.n,
        "trend": result.line("linear") if result.verdict != INCONCLUSIVE else None,
    }


def _per_request(kind: LeakKind, result: TrendResult, rate_per_s: float | None) -> dict | None:
    """Slope divided by the request rate: how much each request leaves behind."""
    if not rate_per_s:
        return None
    unit = "bytes/request" if kind.is_bytes else "fds/request"
    low, high = result.ci_per_s
    return {"value": result.slope_per_s / rate_per_s,
            "ci": [low / rate_per_s, high / rate_per_s], "unit": unit}


def request_rate_per_s(run: RunData) -> float | None:
    """Finished requests per second over the judged windows (None without request counts)."""
    judged = run.judged_indices()
    rows = [w for w in run.request_windows if w.index in judged]
    seconds = sum(w.end_s - w.start_s for w in rows)
    requests = sum(w.requests for w in rows)
    return requests / seconds if seconds > 0 and requests > 0 else None


def _per_h(ci_per_s: tuple[float, float]) -> tuple[float, float]:
    return ci_per_s[0] * 3600, ci_per_s[1] * 3600


def _h(slope_per_s: float | None) -> float | None:
    return None if slope_per_s is None else slope_per_s * 3600

