"""Leak checks on memory and fds: `leak.rss`, `leak.vram`, `leak.fds`.

Each process of the server tree is reduced to one value per judged window — its floor (window
minimum) — or, when idle probes gave at least `min_windows` readings, to its probe readings, which
are taken at rest and so are cleaner still. Open fds are judged at the probe readings whenever probes
ran with fd readings, however few: open connections follow the load and fall to their floor only at
rest, so floors under load would read a load change as a leak. The tree total is the sum of the
per-process values.

The threshold is an absolute rate that does not loosen on a short run: for memory the gate's figure,
or the rate that would use up the headroom (the lowest host memory available, or GPU memory free,
over the judged windows) within the service horizon; for fds the gate's rate. Each series — the
total, and each process at a Bonferroni-corrected p so a leak in one process is not hidden by another
shrinking — gets the trend test and the step gate (a lasting step at least as large as a
threshold-rate leak would build over the judged span). The first of these that FAILs decides, in the
order total trend, process trend, total step, process step; the finding's figures (`value`, `ci`,
`threshold`, `detection_limit`, `trend`, `per_request`) are then those of the deciding series, named
in `details["judged_by"]`, with the tree total's figures in `details["tree_total"]`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from soak.analysis.attribution import Attribution, attribute, attribution_text
from soak.analysis.evidence import detection_sentence, settle_step, trend_sentence
from soak.analysis.findings import FAIL, SUSPECT, Finding, inconclusive, skipped
from soak.analysis.fmt import bytes_range_text, count_text, duration_text, hours_text, p_text, small_bytes_text
from soak.analysis.gates import FdLeakGate, Gates, MemoryLeakGate
from soak.analysis.inputs import ProbeReading, RunData
from soak.analysis.steps import StepResult, StepSpec, find_step
from soak.analysis.trend import TrendResult, assess_trend
from soak.analysis.windows import window_floors

HOUR_S = 3600.0


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
    """What a leak check measures, how to word it, and which headroom it eats (None: not known)."""

    check: str
    quantity: str
    is_bytes: bool
    probe_field: str
    resource: str | None = None
    always_at_rest: bool = False  # judge at probe readings whenever there are any

    def amount(self, value: float) -> str:
        return small_bytes_text(value) if self.is_bytes else f"{count_text(value)} fds"

    def amount_range(self, low: float, high: float) -> str:
        return bytes_range_text(low, high) if self.is_bytes else f"{count_text(low)}–{count_text(high)} fds"

    def rate(self, per_s: float) -> str:
        return f"{self.amount(per_s * HOUR_S)}/h"

    @property
    def unit(self) -> str:
        return "bytes/h" if self.is_bytes else "fds/h"

    @property
    def base_unit(self) -> str:
        return "bytes" if self.is_bytes else "fds"

    @property
    def chart(self) -> str:
        """The report chart that shows this quantity."""
        return {"leak.rss": "memory chart", "leak.vram": "per-process VRAM chart"}.get(self.check, "open-fds chart")


RSS = LeakKind("leak.rss", "RSS", True, "held_bytes", "host memory")
# Where any of it was found in swap, leak.rss judges resident + swapped memory and says so.
RSS_AND_SWAP = LeakKind("leak.rss", "resident + swapped memory", True, "held_bytes", "host memory")
VRAM = LeakKind("leak.vram", "VRAM", True, "vram_bytes", "GPU memory")
FDS = LeakKind("leak.fds", "open fds", False, "fds", always_at_rest=True)


@dataclass(frozen=True)
class Series:
    """One reduced series (per-window floors or probe readings) ready for the trend test."""

    label: str
    pid: int | None
    name: str
    t_s: np.ndarray
    values: np.ndarray


@dataclass(frozen=True)
class Judged:
    """One series with its trend test and step gate."""

    series: Series
    trend: TrendResult
    step: StepResult | None

    @property
    def step_found(self) -> bool:
        return self.step is not None and self.step.found


@dataclass(frozen=True)
class Outcome:
    """Everything a leak finding is built from."""

    kind: LeakKind
    source: str
    total: Judged
    per_process: list[Judged]
    chosen: Judged
    verdict: str
    headroom: float | None


def check_rss(run: RunData, gates: Gates) -> Finding:
    subjects = [Subject(p.pid, p.name, p.t_s, p.held_bytes) for p in run.processes]
    return check_leak(run, gates, RSS_AND_SWAP if run.swap_seen else RSS, gates.leak.rss, subjects)


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
    """Trend- and step-test the tree total and each process; see the module docstring."""
    if not subjects and not _probe_values(run.probes, kind):
        return skipped(kind.check, f"No {kind.quantity} samples of the server's processes: none could be seen "
                       "from soak's host and its /metrics serves no process_* series; for a server on this host "
                       "pass --server-pid PID.", gpu_seen=run.gpu_seen)
    source, rows = reduce_series(run, gates, kind, subjects)
    total = tree_total(rows)
    usable = 0 if total is None else int(np.isfinite(total.values).sum())
    if total is None or usable < gates.min_windows:
        return _too_few(run, gates, kind, source, usable)
    threshold_per_s, headroom = leak_threshold_per_s(run, kind, gate)
    judged_total = judge(total, gates, threshold_per_s, gates.p_value)
    # Bonferroni over the k processes, so per-process escalation keeps the check's false-alarm rate.
    per_process = ([judge(row, gates, threshold_per_s, gates.p_value / len(rows)) for row in rows]
                   if len(rows) > 1 else [judged_total])  # one process: the total is that process
    chosen, verdict = deciding(judged_total, per_process)
    outcome = Outcome(kind, source, judged_total, per_process, chosen, verdict, headroom)
    return leak_finding(run, gates, outcome)


def _too_few(run: RunData, gates: Gates, kind: LeakKind, source: str, usable: int) -> Finding:
    why = f"Only {usable} usable {source} of {kind.quantity} (< {gates.min_windows} needed) for a trend"
    if source == "idle-probe readings" and kind.always_at_rest:
        why += "; fds are judged only at rest, since open connections follow the load"
    return inconclusive(kind.check, why + ".",
                        details={"source": source, "points": usable, "gpu_seen": run.gpu_seen})


def reduce_series(run: RunData, gates: Gates, kind: LeakKind,
                  subjects: list[Subject]) -> tuple[str, list[Series]]:
    """Per-process series from idle probes when there are enough (for fds: any), else per-window floors."""
    probes = _probe_values(run.probes, kind)
    if len(probes) >= gates.min_windows or (probes and kind.always_at_rest):
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


def leak_threshold_per_s(run: RunData, kind: LeakKind, gate: MemoryLeakGate | FdLeakGate) -> tuple[float, float | None]:
    """(threshold in units per second, the headroom it was derived from or None)."""
    if isinstance(gate, FdLeakGate):
        return gate.slope_fds_per_h / HOUR_S, None
    headroom = headroom_bytes(run, kind)
    return gate.threshold_bytes_per_h(headroom, run.horizon_s) / HOUR_S, headroom


def headroom_bytes(run: RunData, kind: LeakKind) -> float | None:
    """The least host memory available (RSS) or GPU memory free (VRAM) over the judged windows."""
    if run.host is None:
        return None
    values = run.host.available_bytes if kind.check == RSS.check else run.host.gpu_free_bytes if kind is VRAM else None
    if values is None:
        return None
    t_s = run.host.t_s
    inside = np.zeros(t_s.size, dtype=bool)
    for window in run.judged_windows():
        inside |= (t_s >= window.start_s) & (t_s < window.end_s)
    chosen = values[inside & np.isfinite(values)]
    return float(chosen.min()) if chosen.size else None


def judge(series: Series, gates: Gates, threshold_per_s: float, p_value: float) -> Judged:
    """The trend test and the step gate of one series, sharing the given p half and half."""
    spec = replace(gates.trend_spec(threshold_per_s, persistence=True), p_value=p_value / 2)
    trend = assess_trend(series.t_s, series.values, spec)
    step = None
    if trend.n >= spec.min_points:
        # A step counts when it adds as much as a threshold-rate leak would over the judged span.
        step = find_step(series.t_s, series.values, StepSpec(threshold_per_s * trend.span_s, p_value / 2))
    return Judged(series, trend, step)


def deciding(total: Judged, per_process: list[Judged]) -> tuple[Judged, str]:
    """The series whose result decides, and the verdict: total trend, process trend, total step,
    process step — the first FAIL; else the total's own verdict."""
    # Per-process SUSPECTs never decide: k processes would multiply the chances of a noise SUSPECT by k.
    processes = per_process if len(per_process) > 1 else []
    candidates = [(j, j.trend.verdict == FAIL) for j in [total, *processes]]
    candidates += [(j, j.step_found) for j in [total, *processes]]
    for judged, failed in candidates:
        if failed:
            return judged, FAIL
    return total, total.trend.verdict


def leak_finding(run: RunData, gates: Gates, outcome: Outcome) -> Finding:
    kind, result = outcome.kind, outcome.chosen.trend
    rate_per_s = request_rate_per_s(run)
    exhaustion = _exhaustion(kind, result, outcome.headroom)
    attribution = None
    if kind.is_bytes and outcome.verdict in (FAIL, SUSPECT):
        attribution = attribute(_growth_times(run, outcome), outcome.chosen.series.values, run.scenario_windows,
                                gates.confidence)
    return Finding(
        check=kind.check, verdict=outcome.verdict, value=result.slope_per_s * HOUR_S, unit=kind.unit,
        ci=_per_h(result.ci_per_s), threshold=result.min_slope_per_s * HOUR_S,
        evidence=_leak_evidence(outcome, rate_per_s, gates.confidence, exhaustion, attribution),
        per_process=[_process_entry(kind, j) for j in outcome.per_process],
        per_request=_per_request(kind, result, rate_per_s), trend=result.line("linear"),
        detection_limit=_h(result.detection_limit_per_s), exhaustion=exhaustion,
        attribution=None if attribution is None else attribution.to_dicts(kind.base_unit),
        next_step=_leak_next_step(kind, outcome, attribution), details=_details(run, outcome),
    )


def _leak_next_step(kind: LeakKind, outcome: Outcome, attribution: Attribution | None) -> str | None:
    """Which traffic the growth follows, when attribution named it; else how long a run would settle it."""
    named = attribution.named if attribution is not None else None
    if named is not None and named.is_time:
        return f"the growth follows time, not requests: look for a timer or cache in the server; see the {kind.chart}"
    if named is not None:
        cancelled = "cancelled " if named.cancelled else ""
        return f"the growth follows {cancelled}`{named.scenario}` requests: see the {kind.chart} and the growth per scenario"
    return settle_step(outcome.chosen.trend, kind.rate)


def _growth_times(run: RunData, outcome: Outcome) -> np.ndarray:
    """Where each point's level was reached: probe readings at their time; a window floor of a
    growing series at the window's start (it is the window's minimum)."""
    if outcome.source == "window floors":
        return np.array([w.start_s for w in run.judged_windows()])
    return outcome.chosen.series.t_s


def _details(run: RunData, outcome: Outcome) -> dict:
    chosen, result = outcome.chosen, outcome.chosen.trend
    details = {"source": outcome.source, "points": result.n, "mk_p": result.mk_p, "gates": result.gates,
               "half_slope_per_h": _h(result.half_slope_per_s), "judged_by": chosen.series.label,
               "gpu_seen": run.gpu_seen, "step": None if chosen.step is None else chosen.step.to_dict(),
               "headroom": outcome.headroom, "horizon_s": run.horizon_s}
    if chosen is not outcome.total:
        details["tree_total"] = _summary(outcome.total)
    return details


def _summary(judged: Judged) -> dict:
    """A series' own figures (per hour), for details and per-process entries."""
    result = judged.trend
    tested = np.isfinite(result.slope_per_s)  # too few points: nothing was fitted
    return {"verdict": result.verdict, "value": _h(result.slope_per_s) if tested else None,
            "ci": list(_per_h(result.ci_per_s)) if tested else None,
            "detection_limit": _h(result.detection_limit_per_s) if tested else None,
            "mk_p": result.mk_p, "points": result.n,
            "step": judged.step.to_dict() if judged.step_found else None}  # only a found step is news


def _exhaustion(kind: LeakKind, result: TrendResult, headroom: float | None) -> dict | None:
    """When the headroom runs out at the measured slope (hours None when the slope is not upward)."""
    if kind.resource is None or headroom is None:
        return None
    per_h = result.slope_per_s * HOUR_S
    hours = headroom / per_h if per_h > 0 else None
    return {"resource": kind.resource, "headroom": headroom, "hours": hours}


def _leak_evidence(outcome: Outcome, rate_per_s: float | None, confidence: float,
                   exhaustion: dict | None, attribution: Attribution | None) -> str:
    kind, chosen, verdict = outcome.kind, outcome.chosen, outcome.verdict
    result = chosen.trend
    low, high = _per_h(result.ci_per_s)
    subject = f"{kind.quantity} of {chosen.series.label}"
    text = trend_sentence(result, subject, kind.rate(result.slope_per_s), f"{kind.amount_range(low, high)}/h",
                          kind.rate(result.min_slope_per_s), confidence)
    if verdict == FAIL and result.verdict != FAIL and chosen.step_found:
        text = f"{_step_text(kind, subject, chosen.step)}; as a straight line: {text}"
    parts = [text]
    if verdict in (FAIL, SUSPECT):
        if rate_per_s and result.slope_per_s > 0:
            parts.append(f"{kind.amount(result.slope_per_s / rate_per_s)}/request")
        if exhaustion and exhaustion["hours"] is not None:
            parts.append(f"{exhaustion['resource']} runs out in {hours_text(exhaustion['hours'])} at this slope")
        if attribution is not None:
            parts.append(attribution_text(attribution, kind.amount, kind.amount_range, confidence))
    else:
        parts.append(detection_sentence(result, kind.rate))
    return "; ".join(part for part in parts if part)


def _step_text(kind: LeakKind, subject: str, step: StepResult) -> str:
    """E.g. "RSS of X stepped up 400.0 MiB at 14h02m and stayed (1.2 GiB before, 1.6 GiB after, p=3e-9)"."""
    return (f"{subject} stepped up {kind.amount(step.shift)} at {duration_text(step.t_s)} and stayed "
            f"({kind.amount(step.before)} before, {kind.amount(step.after)} after, step gate {p_text(step.p_value)}, "
            f"a step of {kind.amount(step.min_shift)} or more counts)")


def _process_entry(kind: LeakKind, judged: Judged) -> dict:
    row, result = judged.series, judged.trend
    finite = row.values[np.isfinite(row.values)]
    entry = _summary(judged)
    entry.update({"pid": row.pid, "name": row.name, "unit": kind.unit,
                  "floor": float(finite.min()) if finite.size else None,
                  "trend": result.line("linear") if entry["value"] is not None else None})
    return entry


def _per_request(kind: LeakKind, result: TrendResult, rate_per_s: float | None) -> dict | None:
    """Slope divided by the request rate: how much each request leaves behind."""
    if not rate_per_s or result.slope_per_s != result.slope_per_s:
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
    return ci_per_s[0] * HOUR_S, ci_per_s[1] * HOUR_S


def _h(slope_per_s: float | None) -> float | None:
    return None if slope_per_s is None else slope_per_s * HOUR_S
