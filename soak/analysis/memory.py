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
shrinking — is judged from the end of its own warm-up (`warmup.py`: found from the data, never before
the configured one; memory only), and gets the trend test, the step gate (a lasting step at least as
large as a threshold-rate leak would build over the judged span) and, for memory, the net growth in
lasting steps (`steps.find_staircase`). Memory growth must also be material: a slope's rise over the
span and a single step must reach `min_change` (MiB, or a share of the series' level) before they
can FAIL, so a short run's small rise ends SUSPECT, never FAIL. A series still settling at the end
never FAILs; when the total (or a process whose own trend is over the threshold) is, the check is
INCONCLUSIVE. The first FAIL decides, in the order net growth in two or more steps (total, process),
total trend, process trend, total step, process step, net growth in one step; the finding's figures
(`value`, `ci`, `threshold`, `detection_limit`, `trend`, `per_request`) are then those of the
deciding series, named in `details["judged_by"]`, with the tree total's figures in
`details["tree_total"]` and every series' warm-up cut in `details["warmup"]`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from soak.analysis.attribution import Attribution, attribute, attribution_text
from soak.analysis.churn import ChurnFit, cycle_times, fit_churn
from soak.analysis.evidence import MATERIAL_PHRASE, detection_sentence, settle_step, trend_sentence
from soak.analysis.findings import (
    FAIL,
    INCONCLUSIVE,
    SUSPECT,
    Exhaustion,
    Finding,
    PerRequest,
    ProcessGrowth,
    inconclusive,
    skipped,
)
from soak.analysis.fmt import bytes_range_text, count_text, duration_text, hours_text, p_text, small_bytes_text
from soak.analysis.gates import FdLeakGate, Gates, MemoryLeakGate
from soak.analysis.inputs import ProbeReading, RunData
from soak.analysis.step_records import Staircase, StepResult
from soak.analysis.steps import StepSpec, find_staircase, find_step
from soak.analysis.trend import TrendResult, assess_trend, trend_verdict
from soak.analysis.warmup import WarmupCut, settle_index
from soak.analysis.windows import window_floors

HOUR_S = 3600.0
# A series' own figures: the first fields of its per-process entry, and `details["tree_total"]`.
OWN_FIGURES = ("verdict", "value", "ci", "detection_limit", "mk_p", "points", "step", "net_growth", "warmup")


@dataclass(frozen=True)
class Subject:
    """Raw samples of one quantity of one process."""

    pid: int
    name: str
    t_s: np.ndarray
    values: np.ndarray

    @property
    def label(self) -> str:
        if self.pid < 0:  # a whole GPU read from dcgm-exporter: no process, its name says which GPU
            return self.name
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
    chart_name: str = ""  # the report chart that shows it, where not the check's usual one

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
        usual = {"leak.rss": "memory chart", "leak.vram": "per-process VRAM chart"}.get(self.check, "open-fds chart")
        return self.chart_name or usual


RSS = LeakKind("leak.rss", "RSS", True, "held_bytes", "host memory")
# Where any of it was found in swap, leak.rss judges resident + swapped memory and says so.
RSS_AND_SWAP = LeakKind("leak.rss", "resident + swapped memory", True, "held_bytes", "host memory")
VRAM = LeakKind("leak.vram", "VRAM", True, "vram_bytes", "GPU memory")
# A GPU's whole framebuffer, from dcgm-exporter (no process is seen).
GPU_VRAM = replace(VRAM, chart_name="VRAM-per-GPU chart")
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
class Limits:
    """What one leak check holds a series to: the threshold rate, the least growth that can FAIL (a
    slope's rise over the span or one step) and the net growth in lasting steps that FAILs (None: no
    net-growth check)."""

    threshold_per_s: float
    min_change: float = 0.0
    net_growth: float | None = None


@dataclass(frozen=True)
class Judged:
    """One series with its warm-up cut, trend test, step gate and net growth in lasting steps."""

    series: Series
    trend: TrendResult
    step: StepResult | None
    cut: WarmupCut | None = None
    staircase: Staircase | None = None
    net_growth: float | None = None
    min_change: float = 0.0

    @property
    def step_found(self) -> bool:
        return self.step is not None and self.step.found

    @property
    def settling(self) -> bool:
        return self.cut is not None and self.cut.still_settling

    @property
    def net_failed(self) -> bool:
        """Lasting steps, not a ramp, that add up to the net-growth threshold, and as much growth in all."""
        stairs, limit = self.staircase, self.net_growth
        return (stairs is not None and limit is not None and stairs.is_staircase
                and stairs.stepped >= limit and stairs.net >= limit)

    @property
    def immaterial(self) -> bool:
        """The trend would FAIL but its rise over the judged span is under the least change that counts."""
        return self.trend.gates.get("material") is False

    @property
    def surest_rise(self) -> float:
        """The rise the material gate holds to `min_change`: the lower of the rise at the slope's lower
        bound over the judged span and the rise observed from the first tenth to the last."""
        return surest_rise(self.trend, observed_rise(self.series.values))


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
    subjects: tuple[Subject, ...] = ()  # the raw samples the series were reduced from


def check_rss(run: RunData, gates: Gates) -> Finding:
    subjects = [Subject(p.pid, p.name, p.t_s, p.held_bytes) for p in run.processes]
    return check_leak(run, gates, RSS_AND_SWAP if run.swap_seen else RSS, gates.leak.rss, subjects)


def check_vram(run: RunData, gates: Gates) -> Finding:
    if not run.gpu_seen and not run.gpu_processes:
        return skipped(VRAM.check, "No GPU was seen serving the process tree.", gpu_seen=False)
    subjects = [Subject(g.pid, g.name or f"gpu{g.gpu_index}", g.t_s, g.used_bytes)
                for g in run.gpu_processes]
    framebuffers = [] if subjects else dcgm_framebuffers(run)
    if framebuffers:
        return worst_gpu(run, gates, framebuffers)
    return check_leak(run, gates, VRAM, gates.leak.vram, subjects)


def dcgm_framebuffers(run: RunData) -> list[Subject]:
    """Each GPU's framebuffer used, from dcgm-exporter (for when NVML named no server process on a GPU); negative
    ids, since a GPU has no pid."""
    gpus = [g for g in run.gpus if g.source and g.mem_used_bytes is not None]
    return [Subject(-1 - i, g.label, g.t_s, g.mem_used_bytes) for i, g in enumerate(gpus)]


# The order in which a GPU's finding outranks another's: the worst verdict first.
VERDICT_RANK = {FAIL: 0, SUSPECT: 1, INCONCLUSIVE: 2}


def worst_gpu(run: RunData, gates: Gates, framebuffers: list[Subject]) -> Finding:
    """leak.vram on each GPU's framebuffer alone (GPUs share no memory, so no total), at a Bonferroni-corrected p;
    the worst GPU's finding stands, with every GPU's verdict in details["per_gpu"]."""
    each_gates = gates.model_copy(update={"p_value": gates.p_value / len(framebuffers)})
    findings = [check_leak(run, each_gates, GPU_VRAM, gates.leak.vram, [gpu]) for gpu in framebuffers]
    worst = min(findings, key=lambda f: (VERDICT_RANK.get(f.verdict, 3), -(f.value or 0.0)))
    worst.details["per_gpu"] = [{"gpu": gpu.name, "verdict": str(f.verdict), "value": f.value}
                                for gpu, f in zip(framebuffers, findings, strict=True)]
    worst.details["vram_source"] = "dcgm-exporter framebuffer (NVML saw no server process on a GPU)"
    return worst


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
    floor_s = run.warmup_s if kind.is_bytes else math.inf  # fds do not warm up: no data-driven cut
    judged_total = judge(total, gates, _limits(gate, total, threshold_per_s, headroom), gates.p_value, floor_s,
                         run.load_clock)
    # Bonferroni over the k processes, so per-process escalation keeps the check's false-alarm rate.
    per_process = ([judge(row, gates, _limits(gate, row, threshold_per_s, headroom), gates.p_value / len(rows),
                          floor_s, run.load_clock) for row in rows]
                   if len(rows) > 1 else [judged_total])  # one process: the total is that process
    chosen, verdict = deciding(judged_total, per_process)
    outcome = Outcome(kind, source, judged_total, per_process, chosen, verdict, headroom, tuple(subjects))
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
    headrooms = {RSS.check: run.host.available_bytes, VRAM.check: run.host.gpu_free_bytes}
    values = headrooms.get(kind.check)
    if values is None:
        return None
    t_s = run.host.t_s
    inside = np.zeros(t_s.size, dtype=bool)
    for window in run.judged_windows():
        inside |= (t_s >= window.start_s) & (t_s < window.end_s)
    chosen = values[inside & np.isfinite(values)]
    return float(chosen.min()) if chosen.size else None


def _limits(gate: MemoryLeakGate | FdLeakGate, series: Series, threshold_per_s: float,
            headroom: float | None) -> Limits:
    if isinstance(gate, FdLeakGate):
        return Limits(threshold_per_s, gate.min_change_fds)
    finite = series.values[np.isfinite(series.values)]
    level = float(np.median(finite)) if finite.size else 0.0
    return Limits(threshold_per_s, gate.min_change(level), gate.net_growth_threshold(headroom))


def judge(series: Series, gates: Gates, limits: Limits, p_value: float, floor_s: float = math.inf,
          clock: Callable[[np.ndarray], np.ndarray] | None = None) -> Judged:
    """The warm-up cut, then the trend test and the step gate sharing the given p half and half, and
    the net growth in lasting steps. Points before the cut are left out (nan, so series stay aligned);
    `floor_s` inf keeps every point (no data-driven cut). The trend is fitted on `clock` (`RunData.load_clock`:
    a network outage's pause taken out) when given; steps and the cut keep the run's own times."""
    spec = replace(gates.trend_spec(limits.threshold_per_s, persistence=True), p_value=p_value / 2,
                   min_change=limits.min_change, wanders=True)
    cut = None
    if math.isfinite(floor_s):
        cut = settle_index(series.t_s, series.values, floor_s, min_kept=spec.min_points)
        values = np.where(np.arange(series.values.size) < cut.index, np.nan, series.values)
        series = replace(series, values=values)
    t_s = clock(series.t_s) if clock is not None else series.t_s
    trend = material_trend(assess_trend(t_s, series.values, spec), observed_rise(series.values),
                           limits.min_change)
    step, staircase = None, None
    if trend.n >= spec.min_points:
        # A step counts when it adds as much as a threshold-rate leak would over the judged span, and
        # never less than the least change that counts, however short the run.
        min_shift = max(limits.threshold_per_s * trend.span_s, limits.min_change)
        step = find_step(series.t_s, series.values, StepSpec(min_shift, p_value / 2))
        if limits.net_growth is not None:
            staircase = find_staircase(series.t_s, series.values, limits.min_change, spec.min_points)
    return Judged(series, trend, step, cut, staircase, limits.net_growth, limits.min_change)


def observed_rise(values: np.ndarray) -> float:
    """How much the series rose from its first tenth to its last (medians; at least 3 points each),
    scaled to the whole span (the tenths' middles lie 90 % of it apart): a line's whole rise, a
    single step's own size."""
    finite = values[np.isfinite(values)]
    if finite.size < 6:
        return 0.0
    tenth = max(3, finite.size // 10)
    return float(np.median(finite[-tenth:]) - np.median(finite[:tenth])) / 0.9


def surest_rise(trend: TrendResult, observed: float) -> float:
    """The rise a slope has surely built: the lower of the rise at its interval's lower bound over the judged
    span and the rise observed from the first tenth to the last."""
    return min(trend.ci_per_s[0] * trend.span_s, observed)


def material_trend(trend: TrendResult, observed: float, min_change: float) -> TrendResult:
    """The trend with a `material` gate when it would FAIL: both the rise over the judged span at the
    lower end of the slope's interval and the rise observed from the first tenth to the last must
    reach `min_change`. A short run whose
    slope is over the threshold but whose memory grew only a few MiB cannot tell slow wander or a
    long warm-up from a leak; it ends SUSPECT, never FAIL."""
    if trend.verdict != FAIL or min_change <= 0:
        return trend
    gates = {**trend.gates, "material": surest_rise(trend, observed) >= min_change}
    return replace(trend, gates=gates,
                   verdict=trend_verdict(gates, trend.slope_per_s, trend.detection_limit_per_s, trend.min_slope_per_s))


def deciding(total: Judged, per_process: list[Judged]) -> tuple[Judged, str]:
    """The series whose result decides, and the verdict: net growth in two or more lasting steps (total,
    then process), total trend, process trend, total step, process step, net growth in one step — the
    first FAIL of a series that has settled;
    else INCONCLUSIVE when a series is still warming up at the end (the total, or a process whose own
    trend is over the threshold); else the total's own verdict."""
    # Per-process SUSPECTs never decide: k processes would multiply the chances of a noise SUSPECT by k.
    processes = per_process if len(per_process) > 1 else []
    settled = [j for j in [total, *processes] if not j.settling]
    # Two or more lasting steps are told as a staircase first: a line through them, or one of them
    # alone, says less about what happened.
    candidates = [(j, j.net_failed and len(j.staircase.stairs) > 1) for j in settled]
    candidates += [(j, j.trend.verdict == FAIL) for j in settled]
    candidates += [(j, j.step_found) for j in settled]
    candidates += [(j, j.net_failed) for j in settled]
    for judged, failed in candidates:
        if failed:
            return judged, FAIL
    warming = [j for j in [total, *processes]
               if j.settling and (j is total or j.trend.verdict in (FAIL, SUSPECT))]
    if warming:
        return warming[0], INCONCLUSIVE
    return total, total.trend.verdict


def leak_finding(run: RunData, gates: Gates, outcome: Outcome) -> Finding:
    kind, result = outcome.kind, outcome.chosen.trend
    rate_per_s = request_rate_per_s(run)
    exhaustion = _exhaustion(kind, result, outcome.headroom)
    attribution = churn = None
    if kind.is_bytes and outcome.verdict in (FAIL, SUSPECT):
        attribution = attribute(_growth_times(run, outcome), outcome.chosen.series.values, run.scenario_windows,
                                gates.confidence)
        churn = _churn_fit(run, outcome, gates.confidence)
    return Finding(
        check=kind.check, verdict=outcome.verdict, value=result.slope_per_s * HOUR_S, unit=kind.unit,
        ci=_per_h(result.ci_per_s), threshold=result.min_slope_per_s * HOUR_S,
        evidence=_leak_evidence(outcome, rate_per_s, gates.confidence, exhaustion, attribution, churn),
        per_process=[_process_entry(kind, j) for j in outcome.per_process],
        per_request=_per_request(kind, result, rate_per_s), trend=result.line("linear"),
        detection_limit=_h(result.detection_limit_per_s), exhaustion=exhaustion,
        attribution=None if attribution is None else attribution.growths(kind.base_unit),
        next_step=_leak_next_step(kind, outcome, attribution, churn), details=_details(run, outcome, churn),
    )


def _churn_fit(run: RunData, outcome: Outcome, confidence: float) -> ChurnFit | None:
    """The growth per LoRA load/unload cycle of the deciding series' raw samples over the judged span (None
    without churn)."""
    cycles = cycle_times(run.events)
    raw = _raw_samples(outcome) if cycles.size else None
    if raw is None:
        return None
    cut = outcome.chosen.cut
    start_s = max(run.warmup_s, cut.t_s if cut is not None else 0.0)
    t_s, values = raw
    judged = t_s >= start_s
    return fit_churn(t_s[judged], values[judged], cycles, confidence)


def _raw_samples(outcome: Outcome) -> tuple[np.ndarray, np.ndarray] | None:
    """The deciding process's samples; for the tree total, the sum of processes sampled together (else the one
    that grew most)."""
    subjects = [s for s in outcome.subjects if s.t_s.size]
    chosen = [s for s in subjects if s.pid == outcome.chosen.series.pid]
    if chosen or len(subjects) == 1:
        return (chosen or subjects)[0].t_s, (chosen or subjects)[0].values
    if not subjects:
        return None
    if len({s.t_s.size for s in subjects}) == 1:
        return subjects[0].t_s, np.sum([s.values for s in subjects], axis=0)
    grown = max(subjects, key=lambda s: float(np.nanmax(s.values) - np.nanmin(s.values)))
    return grown.t_s, grown.values


def _leak_next_step(kind: LeakKind, outcome: Outcome, attribution: Attribution | None,
                    churn: ChurnFit | None = None) -> str | None:
    """Which traffic the growth follows, when attribution named it; else how long a run would settle it."""
    if churn is not None and churn.named:
        return (f"the growth follows LoRA adapter loads and unloads: look for what an unload leaves behind; see the "
                f"{kind.chart}, where each load is marked")
    named = attribution.named if attribution is not None else None
    if named is not None and named.is_time:
        return f"the growth follows time, not requests: look for a timer or cache in the server; see the {kind.chart}"
    if named is not None:
        cancelled = "cancelled " if named.cancelled else ""
        return f"the growth follows {cancelled}`{named.scenario}` requests: see the {kind.chart} and the growth per scenario"
    return _settle_step(kind, outcome.chosen)


def _settle_step(kind: LeakKind, judged: Judged) -> str | None:
    """How long a run would settle it: past a warm-up still under way, past wander too small to
    tell from a leak, or long enough to rule the threshold out."""
    result = judged.trend
    if judged.settling:
        return (f"run ≥ {duration_text(_longer_s(judged))} longer: {kind.quantity} was still warming up at the "
                "end, and the warm-up must end in the first half of what is judged")
    if judged.immaterial and result.min_slope_per_s > 0:
        needed_s = judged.min_change / result.min_slope_per_s
        return (f"run ≥ {duration_text(needed_s)} of judged load to tell slow wander from a leak (a leak at "
                f"{kind.rate(result.min_slope_per_s)} grows {kind.amount(judged.min_change)} by then)")
    return settle_step(result, kind.rate)


def _longer_s(judged: Judged) -> float:
    """How much longer a run must be for a warm-up still under way to end in its first half: as long
    again as the series so far, from the configured warm-up."""
    cut, t_s = judged.cut, judged.series.t_s
    start_s = cut.floor_s if cut is not None else float(t_s[0])
    return max(float(t_s[-1]) - start_s, 0.0)


def _growth_times(run: RunData, outcome: Outcome) -> np.ndarray:
    """Where each point's level was reached: probe readings at their time; a window floor of a
    growing series at the window's start (it is the window's minimum)."""
    if outcome.source == "window floors":
        return np.array([w.start_s for w in run.judged_windows()])
    return outcome.chosen.series.t_s


def _details(run: RunData, outcome: Outcome, churn: ChurnFit | None = None) -> dict:
    chosen, result = outcome.chosen, outcome.chosen.trend
    details = {"source": outcome.source, "points": result.n, "mk_p": result.mk_p, "gates": result.gates,
               "autocorrelation": result.autocorrelation, "correlation_time_s": result.correlation_time_s,
               "bound_note": result.bound_note,
               "half_slope_per_h": _h(result.half_slope_per_s), "judged_by": chosen.series.label,
               "gpu_seen": run.gpu_seen, "step": None if chosen.step is None else chosen.step.to_dict(),
               "headroom": outcome.headroom, "horizon_s": run.horizon_s,
               "warmup": _warmup_cuts(outcome), "min_change": chosen.min_change,
               "net_growth": None if chosen.staircase is None else chosen.staircase.to_dict(),
               "net_growth_threshold": chosen.net_growth}
    if chosen is not outcome.total:
        details["tree_total"] = _summary(outcome.kind, outcome.total)
    if churn is not None:
        details["lora_churn"] = churn.to_dict(outcome.kind.base_unit)
    return details


def _warmup_cuts(outcome: Outcome) -> dict[str, dict]:
    """Where each judged series' warm-up ended (found from the data or the configured one), by label."""
    series = [outcome.total, *(j for j in outcome.per_process if j is not outcome.total)]
    return {j.series.label: j.cut.to_dict() for j in series if j.cut is not None}


def _summary(kind: LeakKind, judged: Judged) -> dict:
    """A series' own figures (per hour) for details: a per-process entry's, without whose they are."""
    entry = _process_entry(kind, judged).as_dict()
    return {key: entry[key] for key in OWN_FIGURES}


def _exhaustion(kind: LeakKind, result: TrendResult, headroom: float | None) -> Exhaustion | None:
    """When the headroom runs out at the measured slope (hours None when the slope is not upward)."""
    if kind.resource is None or headroom is None:
        return None
    per_h = result.slope_per_s * HOUR_S
    hours = headroom / per_h if per_h > 0 else None
    return Exhaustion(kind.resource, headroom, hours)


def _leak_evidence(outcome: Outcome, rate_per_s: float | None, confidence: float,
                   exhaustion: Exhaustion | None, attribution: Attribution | None, churn: ChurnFit | None = None) -> str:
    kind, chosen, verdict = outcome.kind, outcome.chosen, outcome.verdict
    result = chosen.trend
    low, high = _per_h(result.ci_per_s)
    subject = f"{kind.quantity} of {chosen.series.label}"
    if verdict == INCONCLUSIVE and chosen.settling:
        return _warming_text(kind, subject, chosen)
    text = trend_sentence(result, subject, kind.rate(result.slope_per_s), f"{kind.amount_range(low, high)}/h",
                          kind.rate(result.min_slope_per_s), confidence)
    if verdict == FAIL and chosen.net_failed and (len(chosen.staircase.stairs) > 1 or not chosen.step_found):
        text = f"{_staircase_text(kind, subject, chosen)}; as a straight line: {text}"
    elif verdict == FAIL and result.verdict != FAIL and chosen.step_found:
        text = f"{_step_text(kind, subject, chosen.step)}; as a straight line: {text}"
    if chosen.immaterial:  # the gate's general phrase, with this run's figures
        text = text.replace(MATERIAL_PHRASE, f"it grows {kind.amount(result.projected_change)} over the "
                            f"{duration_text(result.span_s)} judged, but only "
                            f"{kind.amount(max(chosen.surest_rise, 0.0))} surely (the slope's lower bound, and the rise "
                            f"seen), under the {kind.amount(chosen.min_change)} a slope must build before it can FAIL")
    parts = [text]
    if verdict in (FAIL, SUSPECT):
        if rate_per_s and result.slope_per_s > 0:
            parts.append(f"{kind.amount(result.slope_per_s / rate_per_s)}/request")
        if exhaustion and exhaustion.hours is not None:
            parts.append(f"{exhaustion.resource} runs out in {hours_text(exhaustion.hours)} at this slope")
        if churn is not None:
            parts.append(churn.text(kind.amount, kind.amount_range, confidence))
        if attribution is not None and not (churn is not None and churn.named and not _names_scenario(attribution)):
            parts.append(attribution_text(attribution, kind.amount, kind.amount_range, confidence))
    else:
        parts.append(detection_sentence(result, kind.rate))
    return "; ".join(part for part in parts if part)


def _names_scenario(attribution: Attribution) -> bool:
    """Whether the attribution named a scenario (not time, not unclear): news beside growth that follows churn."""
    return attribution.named is not None and not attribution.named.is_time


def _warming_text(kind: LeakKind, subject: str, judged: Judged) -> str:
    """E.g. "RSS of X was still warming up at the end of the run (…); run ≥ 30m00s longer"."""
    cut = judged.cut
    return (f"{subject} was still warming up at the end of the run: it moved fastest early and still moves "
            f"in the second half (its warm-up had not ended by {duration_text(cut.t_s)}, half-way through the "
            f"judged span), so this run cannot tell where it settles or whether it then leaks; "
            f"run ≥ {duration_text(_longer_s(judged))} longer")


def _staircase_text(kind: LeakKind, subject: str, judged: Judged) -> str:
    """E.g. "RSS of X grew +610.0 MiB in 2 steps (12h05m, 18h02m), none returned (…)"."""
    stairs = judged.staircase
    times = ", ".join(duration_text(stair.t_s) for stair in stairs.stairs)
    count = f"{len(stairs.stairs)} step{'s' if len(stairs.stairs) != 1 else ''}"
    return (f"{subject} grew +{kind.amount(stairs.stepped)} in {count} ({times}), none returned "
            f"({kind.amount(stairs.first)} at the first settled level, {kind.amount(stairs.last)} at the last; "
            f"lasting steps adding up to {kind.amount(judged.net_growth)} or more count)")


def _step_text(kind: LeakKind, subject: str, step: StepResult) -> str:
    """E.g. "RSS of X stepped up 400.0 MiB at 14h02m and stayed (1.2 GiB before, 1.6 GiB after, p=3e-9)"."""
    return (f"{subject} stepped up {kind.amount(step.shift)} at {duration_text(step.t_s)} and stayed "
            f"({kind.amount(step.before)} before, {kind.amount(step.after)} after, step gate {p_text(step.p_value)}, "
            f"a step of {kind.amount(step.min_shift)} or more counts)")


def _process_entry(kind: LeakKind, judged: Judged) -> ProcessGrowth:
    """One process's own figures (per hour), what it stepped and where its warm-up ended."""
    row, result = judged.series, judged.trend
    finite = row.values[np.isfinite(row.values)]
    tested = bool(np.isfinite(result.slope_per_s))  # too few points: nothing was fitted
    return ProcessGrowth(
        verdict=result.verdict, value=_h(result.slope_per_s) if tested else None,
        ci=_per_h(result.ci_per_s) if tested else None,
        detection_limit=_h(result.detection_limit_per_s) if tested else None, mk_p=result.mk_p, points=result.n,
        step=judged.step if judged.step_found else None,  # only a found step is news
        net_growth=judged.staircase if judged.net_failed else None, warmup=judged.cut,
        pid=row.pid, name=row.name, unit=kind.unit, floor=float(finite.min()) if finite.size else None,
        trend=result.line("linear") if tested else None)


def _per_request(kind: LeakKind, result: TrendResult, rate_per_s: float | None) -> PerRequest | None:
    """Slope divided by the request rate: how much each request leaves behind."""
    if not rate_per_s or result.slope_per_s != result.slope_per_s:
        return None
    unit = "bytes/request" if kind.is_bytes else "fds/request"
    low, high = result.ci_per_s
    return PerRequest(result.slope_per_s / rate_per_s, (low / rate_per_s, high / rate_per_s), unit)


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
