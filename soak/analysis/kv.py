"""`leak.kv`: the idle floor.

With idle probes: after a probe's drain nothing may stay in the KV cache. No statistics: KV blocks or
running requests left after every client request has finished are a leak by definition (vLLM #54947,
#29906, #46502), so one residual reading is a FAIL. A probe whose drain timed out is judged only when
the engine ran nothing at the reading: waiting requests hold no KV blocks (vLLM allocates at scheduling,
and a preempted request gives its blocks back), so KV still in use then belongs to no request — the
very leak that starves the queue. Other timed-out probes are left to `hang`.

Without probes the load never stops, but each judged window still has a least-busy moment: the floor
of the window's KV usage (its minimum). Leaked blocks raise every reading, the floor included, so the
floor series — from the end of its warm-up, found from the data (`warmup.py`; a floor still settling at the
end is INCONCLUSIVE) — gets the trend test and the step gate, against a threshold from the headroom: the rate
that would fill the rest of the cache (1 − the starting floor) within the service horizon, and a step
at least as large as that rate builds over the judged span. PASS needs the CI to rule that rate out. A FAIL is
SUSPECT instead when the server's running requests rose with the floor: more requests held, not blocks leaked,
may be all it shows.
SKIPPED only without a KV-usage series at all.
"""

from __future__ import annotations

import numpy as np

from soak.analysis.evidence import detection_sentence, settle_step, trend_sentence
from soak.analysis.findings import FAIL, PASS, SUSPECT, Finding, inconclusive, skipped
from soak.analysis.fmt import duration_text, hours_text, p_text, pct_text
from soak.analysis.gates import Gates, KvGate
from soak.analysis.inputs import ProbeReading, RunData
from soak.analysis.server_kind import server_name
from soak.analysis.step_records import StepResult
from soak.analysis.steps import find_step
from soak.analysis.trend import TrendResult, assess_trend
from soak.analysis.warmup import WarmupCut, settle_index
from soak.analysis.windows import window_floors, window_medians

CHECK = "leak.kv"
FLOOR_SOURCE = "window floors of KV usage"
HOUR_S = 3600.0


def check_kv(run: RunData, gates: Gates) -> Finding:
    if run.probes_ran and run.probes:
        return check_probes(run, gates)
    return check_floor(run, gates)


def check_probes(run: RunData, gates: Gates) -> Finding:
    """The residue rule at the idle probes' readings."""
    drained = [p for p in run.probes if p.drained or _engine_idle(p)]
    readable = [p for p in drained if p.kv_usage is not None or p.running is not None]
    if drained and not readable:
        return skipped(CHECK, f"{len(run.probes)} idle probes ran but {server_name(run)} exposes neither a "
                       "KV-cache usage gauge nor a running-requests gauge on /metrics, so the idle floor cannot be "
                       "read.", probes_ran=True, probes=len(run.probes))
    if not readable:
        return inconclusive(CHECK, f"{len(run.probes)} idle probes ran but every idle probe's drain timed out.",
                            details={"probes_ran": True, "probes": len(run.probes)})
    residues = [p for p in readable if _residue(p, gates.leak.kv)]
    if residues:
        return _residue_finding(residues, readable, gates.leak.kv)
    finding = _clean_finding(readable, len(run.probes), gates.leak.kv)
    if _max_kv(readable) is None:
        finding.evidence += (f" {server_name(run)} exposes no KV-cache usage gauge; idle probes read running "
                             "requests only.")
    return finding


def _engine_idle(probe: ProbeReading) -> bool:
    """Nothing running at the reading, so KV usage then is not held by any request."""
    return probe.running is not None and probe.running == 0 and probe.kv_usage is not None


def _residue(probe: ProbeReading, gate: KvGate) -> bool:
    kv_left = probe.kv_usage is not None and probe.kv_usage > gate.max_kv_usage
    running_left = probe.running is not None and probe.running > gate.max_running
    return kv_left or running_left


def _reading_text(probe: ProbeReading) -> str:
    kv = "n/a" if probe.kv_usage is None else f"{100 * probe.kv_usage:.2f} %"
    running = "n/a" if probe.running is None else f"{probe.running:g}"
    return f"KV usage {kv}, running {running} at {duration_text(probe.t_s)}"


def _max_kv(probes: list[ProbeReading]) -> float | None:
    values = [p.kv_usage for p in probes if p.kv_usage is not None]
    return max(values) if values else None


def _residue_finding(residues: list[ProbeReading], readable: list[ProbeReading], gate: KvGate) -> Finding:
    first = residues[0]
    return Finding(
        check=CHECK, verdict=FAIL, value=_max_kv(residues), unit="fraction of KV cache",
        threshold=gate.max_kv_usage,
        evidence=(f"After the idle-probe drain the server still held {_reading_text(first)} "
                  f"({len(residues)} of {len(readable)} judged probes left a residue"
                  f"{'; requests queued behind the held blocks' if any(not p.drained for p in residues) else ''})."),
        details={"probes_ran": True, "residues": [_reading_dict(p) for p in residues],
                 "probes": [_reading_dict(p) for p in readable]})


def _clean_finding(readable: list[ProbeReading], probes_run: int, gate: KvGate) -> Finding:
    max_kv = _max_kv(readable)
    seen = [] if max_kv is None else [f"max KV usage {100 * max_kv:.2f} %"]
    if any(p.running is not None for p in readable):
        seen.append("no running requests")
    return Finding(
        check=CHECK, verdict=PASS, value=max_kv, unit="fraction of KV cache", threshold=gate.max_kv_usage,
        evidence=(f"All {len(readable)} drained idle probes (of {probes_run}) returned to an empty "
                  f"server: {', '.join(seen)}."),
        details={"probes_ran": True, "probes": [_reading_dict(p) for p in readable]})


def _reading_dict(probe: ProbeReading) -> dict:
    return {"t_s": probe.t_s, "kv_usage": probe.kv_usage, "running": probe.running,
            "waiting": probe.waiting, "drained": probe.drained}


# ---- without probes: the floor of each window ---------------------------------------------------------

def floor_series(run: RunData) -> tuple[np.ndarray, np.ndarray] | None:
    """(window middles, KV-usage floor per judged window), or None without a KV-usage series."""
    server = run.server
    if server is None or server.kv_usage is None or not np.isfinite(server.kv_usage).any():
        return None
    windows = run.judged_windows()
    return np.array([w.mid_s for w in windows]), window_floors(server.t_s, server.kv_usage, windows)


def floor_threshold_per_s(floors: np.ndarray, gate: KvGate, horizon_s: float) -> tuple[float, float]:
    """(threshold per second, starting floor: the median of the first five settled floors)."""
    finite = floors[np.isfinite(floors)]
    start = float(np.median(finite[:5])) if finite.size else 0.0
    return gate.floor_threshold_per_h(start, horizon_s) / HOUR_S, start


def check_floor(run: RunData, gates: Gates) -> Finding:
    """Trend and step of the KV-usage floor when no probes ran."""
    series = floor_series(run)
    if series is None:
        return skipped(CHECK, f"No idle probes ran and {server_name(run)} exposes no KV-cache usage gauge, so "
                       "the KV floor was not measured.", probes_ran=run.probes_ran)
    t_s, floors = series
    usable = int(np.isfinite(floors).sum())
    if usable < gates.min_windows:
        return inconclusive(CHECK, f"No idle probes ran and only {usable} judged windows have KV usage "
                            f"(< {gates.min_windows} needed) for a trend of its floor.",
                            details={"probes_ran": run.probes_ran, "source": FLOOR_SOURCE, "points": usable})
    cut = settle_index(t_s, floors, run.warmup_s, min_kept=gates.min_windows)
    if cut.still_settling:
        return _warming_finding(run, t_s, cut)
    floors = np.where(np.arange(floors.size) < cut.index, np.nan, floors)
    threshold_per_s, start = floor_threshold_per_s(floors, gates.leak.kv, run.horizon_s)
    trend = assess_trend(t_s, floors, gates.trend_spec(threshold_per_s, persistence=True))
    min_step = max(threshold_per_s * trend.span_s, gates.leak.kv.floor_min_step)
    step = find_step(t_s, floors, gates.step_spec(min_step))
    finding = _floor_finding(run, gates, trend, step, start)
    finding.details["warmup"] = cut.to_dict()
    return _unless_held_by_load(finding, run, cut.index)


# Running requests (window medians) this much higher late in the run than early hold more blocks at every quiet
# moment: at least one more request, and a quarter more.
RUNNING_RISE, RUNNING_RISE_FRAC = 1.0, 0.25


def running_load_rise(run: RunData, first_index: int) -> tuple[float, float] | None:
    """(early, late): the median of the windows' median running requests over the first and last third of the
    judged windows from `first_index`; None without that gauge."""
    server = run.server
    if server is None or server.running is None or not np.isfinite(server.running).any():
        return None
    medians = window_medians(server.t_s, server.running, run.judged_windows())[first_index:]
    finite = medians[np.isfinite(medians)]
    if finite.size < 6:
        return None
    third = finite.size // 3
    return float(np.median(finite[:third])), float(np.median(finite[-third:]))


def _unless_held_by_load(finding: Finding, run: RunData, first_index: int) -> Finding:
    """A floor FAIL becomes SUSPECT when the server's running requests rose with it: a server that slows holds
    more requests, and their blocks, at every window's quietest moment, which window floors cannot tell from
    leaked blocks (idle probes read the KV at rest and can)."""
    rise = running_load_rise(run, first_index)
    if finding.verdict != FAIL or rise is None or rise[1] - rise[0] < max(RUNNING_RISE, RUNNING_RISE_FRAC * rise[0]):
        return finding
    finding.verdict = SUSPECT
    finding.evidence += (f"; but the requests the server held running rose with it (median {rise[0]:g} → "
                         f"{rise[1]:g}): requests held longer hold blocks at each window's quietest moment, which "
                         "window floors cannot tell from leaked blocks")
    finding.next_step = "run with idle probes (the default; drop --no-idle-probes): they read the KV cache at rest"
    finding.details["running"] = {"early_median": rise[0], "late_median": rise[1]}
    return finding


def _warming_finding(run: RunData, t_s: np.ndarray, cut: WarmupCut) -> Finding:
    """A KV floor still settling at the end: no trend of it can be told from its warm-up."""
    longer_s = max(float(t_s[-1]) - run.warmup_s, 0.0)
    return inconclusive(
        CHECK, "Without idle probes, the KV-usage floor (each window's lowest reading) was still warming up at "
        "the end of the run: it moved fastest early and still moves in the second half, so this run cannot tell "
        f"where it settles or whether it then leaks; run ≥ {duration_text(longer_s)} longer.",
        next_step=f"run ≥ {duration_text(longer_s)} longer, so the KV floor's warm-up ends in the first half of "
                  "what is judged",
        details={"probes_ran": run.probes_ran, "source": FLOOR_SOURCE, "warmup": cut.to_dict()})


def _floor_finding(run: RunData, gates: Gates, trend: TrendResult, step: StepResult | None, start: float) -> Finding:
    stepped = step is not None and step.found
    verdict = FAIL if stepped else trend.verdict
    return Finding(
        check=CHECK, verdict=verdict, value=trend.slope_per_s * HOUR_S, unit="fraction of KV cache/h",
        ci=(trend.ci_per_s[0] * HOUR_S, trend.ci_per_s[1] * HOUR_S), threshold=trend.min_slope_per_s * HOUR_S,
        evidence=_floor_evidence(trend, step if stepped else None, verdict, start, run.horizon_s, gates.confidence),
        trend=trend.line("linear", series="kv_usage"),
        detection_limit=trend.detection_limit_per_s * HOUR_S, next_step=settle_step(trend, _rate),
        details={"probes_ran": run.probes_ran, "source": FLOOR_SOURCE, "points": trend.n, "mk_p": trend.mk_p,
                 "gates": trend.gates, "start_floor": start, "step": None if step is None else step.to_dict()})


def _rate(per_s: float) -> str:
    return f"{pct_text(per_s * HOUR_S, 2)}/h"


def _floor_evidence(trend: TrendResult, step: StepResult | None, verdict: str, start: float,
                    horizon_s: float, confidence: float) -> str:
    subject = "Without idle probes, the KV-usage floor (each window's lowest reading)"
    low, high = trend.ci_per_s
    text = trend_sentence(trend, subject, _rate(trend.slope_per_s), f"{100 * low * HOUR_S:.2f}–{_rate(high)}",
                          _rate(trend.min_slope_per_s), confidence)
    text += (f"; {_rate(trend.min_slope_per_s)} would fill the other {pct_text(1 - start)} of the cache "
             f"within {hours_text(horizon_s / HOUR_S)}")
    if step is not None:
        text = (f"The KV-usage floor stepped up {pct_text(step.shift, 2)} at {duration_text(step.t_s)} and "
                f"stayed ({pct_text(step.before, 2)} before, {pct_text(step.after, 2)} after, step gate "
                f"{p_text(step.p_value)}); as a straight line: " + text[len("Without idle probes, "):])
    limit = detection_sentence(trend, _rate) if verdict != FAIL else ""
    return f"{text}; {limit}" if limit else text
