"""What next, for every check that did not PASS: one line saying what would settle it or where to look.

A check that knows more sets `Finding.next_step` itself (a trend says how long a run would rule its threshold
out; a leak names the traffic it follows). `add_next_steps` fills the rest from the finding and the run: too few
windows, too few samples or probe readings, a gauge the server does not expose, or the chart to read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from soak.analysis.findings import FAIL, INCONCLUSIVE, INVALID, SUSPECT, Finding
from soak.analysis.fmt import duration_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData

UNSETTLED = (FAIL, SUSPECT, INCONCLUSIVE, INVALID)
# Requests a window needs before its P99 is read (latency.py falls back to P95/P90 below it).
MIN_WINDOW_SAMPLES = 100
# Where each check's evidence is drawn, in the report's words.
WHERE = {
    "leak.rss": "the memory chart and the per-process rows", "leak.vram": "the per-process VRAM chart",
    "leak.kv": "the KV-cache chart and the idle-probe rows in Events", "leak.fds": "the open-fds chart",
    "creep.ttft_p99": "the TTFT chart", "creep.itl_p99": "the ITL chart", "creep.e2e_p99": "the E2E chart",
    "creep.server_itl": "the replica's inter-token latency histogram on its /metrics",
    "errors.rise": "the errors chart and Errors by message", "errors.budget": "Errors by message",
    "errors.bursts": "the errors chart at the burst windows and Errors by message",
    "hang": "the queue chart and the probe rows in Events", "crashes": "the crash rows in Events and server.log",
    "gpu.xid": "the gpu_xid rows in Events, then NVIDIA's XID catalog for the code",
    "gpu.ecc": "the GPU charts and `nvidia-smi -q -d ECC,ROW_REMAPPER` on the GPU's host",
    "throughput.decay": "the throughput chart next to the KV and queue charts",
    "client.saturation": "the schedule-lag chart and soak's own CPU chart",
    "server.log_errors": "the server-log rows in Events and server.log", "canary": "the canary rows in Events",
}


def add_next_steps(findings: list[Finding], run: RunData, gates: Gates) -> list[Finding]:
    """The findings with a `next_step` on every unsettled one (a PASS or SKIPPED keeps none)."""
    return [_with_step(finding, run, gates) for finding in findings]


def _with_step(finding: Finding, run: RunData, gates: Gates) -> Finding:
    if finding.verdict not in UNSETTLED:
        return replace(finding, next_step=None)
    if finding.next_step:
        return finding
    return replace(finding, next_step=next_step(finding, run, gates))


def next_step(finding: Finding, run: RunData, gates: Gates) -> str:
    """The most specific step that applies: a check's own rule, then too few windows, then where to look."""
    rule = RULES.get(finding.check)
    step = rule(finding, run, gates) if rule else None
    if step is None and finding.verdict == INCONCLUSIVE:
        step = too_few_windows(run, gates)
    return step or f"see {WHERE.get(finding.check, 'the charts')}"


# ---- shared ---------------------------------------------------------------------------------------------

def length_text(seconds: float) -> str:
    """A run length to ask for, rounded up (never promising less than needed): `2m10s`, `9h01m`."""
    if seconds < 600:
        minutes, secs = divmod(int(math.ceil(seconds / 10) * 10), 60)
        return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    return duration_text(math.ceil(seconds / 60) * 60)


def too_few_windows(run: RunData, gates: Gates) -> str | None:
    """How long a run with this window would give the trends the windows they need; None when it had them."""
    judged = len(run.judged_windows())
    if judged >= gates.min_windows or run.window_s <= 0:
        return None
    after_warmup = [w for w in run.windows if w.start_s >= run.warmup_s - 1e-9]
    usable = judged / len(after_warmup) if after_warmup else 1.0  # probes and outages take windows away
    needed_s = run.warmup_s + gates.min_windows * run.window_s / max(usable, 0.5)
    shorter = max((run.actual_duration_s - run.warmup_s) * max(usable, 0.5) / gates.min_windows, 0.0)
    return (f"only {judged} windows to trend ({gates.min_windows} needed): run ≥ {length_text(needed_s)} "
            f"with --window {duration_text(run.window_s)}, or keep this length with --window ≤ {duration_text(shorter)}")


def _requests_per_window(run: RunData) -> float:
    judged = run.judged_indices()
    counts = [w.requests for w in run.request_windows if w.index in judged]
    return sum(counts) / len(counts) if counts else 0.0


def _probe_period_s(run: RunData) -> float | None:
    """The spacing of this run's idle probes (the median gap between readings)."""
    times = sorted(p.t_s for p in run.probes)
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    return gaps[len(gaps) // 2] if gaps else None


# ---- per check -----------------------------------------------------------------------------------------

def _leak(finding: Finding, run: RunData, gates: Gates) -> str | None:
    """Too few idle-probe readings: how long a run at this probe period would give enough."""
    source = str((finding.details or {}).get("source") or "")
    if finding.verdict != INCONCLUSIVE or "probe" not in source:
        return None
    points = (finding.details or {}).get("points", len(run.probes))
    period_s = _probe_period_s(run)
    if period_s is None:
        return f"only {points} idle-probe readings ({gates.min_windows} needed): run longer, with idle probes"
    return (f"only {points} idle-probe readings ({gates.min_windows} needed): run ≥ "
            f"{length_text(run.warmup_s + (gates.min_windows + 1) * period_s)} with --idle-probe-every "
            f"{duration_text(period_s)}, or probe more often")


def _kv(finding: Finding, run: RunData, gates: Gates) -> str | None:
    """No KV gauge at all: say how to get one; drains that all timed out: look at the hang."""
    gauge = run.server.kv_usage if run.server is not None else None
    has_gauge = gauge is not None and bool(np.isfinite(gauge).any())
    if finding.verdict == INCONCLUSIVE and not has_gauge and all(p.kv_usage is None for p in run.probes):
        return ("the server exposes no KV-cache gauge soak can read: pass --metrics-url with its Prometheus "
                "endpoint, or --server-kind to name its dialect")
    if run.probes and not any(p.drained for p in run.probes):
        return "every idle-probe drain timed out: read the hang row and the queue chart; --drain-timeout waits longer"
    if finding.verdict == INCONCLUSIVE and not run.probes_ran:
        return "run with idle probes (--idle-probe-every) to read KV usage at rest"
    return None


def _creep(finding: Finding, run: RunData, gates: Gates) -> str | None:
    """Too few windows, or windows too thin for a high percentile: more windows, more requests per window."""
    usable = (finding.details or {}).get("usable_windows")
    if finding.verdict != INCONCLUSIVE or not isinstance(usable, int) or usable >= gates.min_windows:
        return None
    judged = len(run.judged_windows())
    steps = [too_few_windows(run, gates)] if judged < gates.min_windows else []
    per_window = _requests_per_window(run)
    if usable < judged and per_window < MIN_WINDOW_SAMPLES:
        longer = duration_text(run.window_s * MIN_WINDOW_SAMPLES / max(per_window, 1.0))
        steps.append(f"windows hold ≈ {per_window:.0f} requests and a high percentile needs {MIN_WINDOW_SAMPLES}: "
                     f"raise --rate or use --window {longer} or longer")
    return "; ".join(step for step in steps if step) or None


def _budget(finding: Finding, run: RunData, gates: Gates) -> str | None:
    """Too few requests to show the error rate within budget: how many more would."""
    if finding.verdict != INCONCLUSIVE:
        return None
    details = finding.details or {}
    needed = requests_for_budget(int(details.get("errors") or 0), int(details.get("requests") or 0),
                                 gates.errors.budget, gates.confidence)
    rate = _requests_per_window(run) / run.window_s if run.window_s > 0 else 0.0
    if needed is None:
        return "at this error rate no run length shows the rate within budget: see Errors by message"
    when = f" (about {length_text(needed / rate)} of judged load at this rate)" if rate > 0 else ""
    return f"≥ {needed:,} requests at this error rate would show it within the {100 * gates.errors.budget:g} % budget{when}"


def requests_for_budget(errors: int, requests: int, budget: float, confidence: float) -> int | None:
    """The fewest requests at the observed error rate whose Wilson upper bound is within `budget`; None when the
    rate itself is too close to the budget for any run length."""
    from soak.analysis.error_checks import wilson_interval  # the budget check's own interval

    rate = errors / requests if requests else 0.0
    if rate >= budget * 0.95:
        return None
    n = max(requests, 10)
    while n < 10**9:
        if wilson_interval(round(rate * n), n, confidence)[1] <= budget:
            return n
        n = int(n * 1.1) + 1
    return None


def _canary(finding: Finding, run: RunData, gates: Gates) -> str | None:
    if finding.verdict != INCONCLUSIVE:
        return None
    every = duration_text(max((run.actual_duration_s - run.warmup_s) / 4, 10.0))
    return f"send canaries more often (--canary-every {every} or less) so that at least 2 follow the reference"


def _saturation(finding: Finding, run: RunData, gates: Gates) -> str | None:
    return ("the load generator fell behind its schedule: add load workers (--workers N) or lower --rate, then "
            "compare the schedule-lag chart")


def _crashes(finding: Finding, run: RunData, gates: Gates) -> str | None:
    if finding.verdict != FAIL:
        return None
    step = "read the crash rows in Events (their record holds the log tail) and the end of server.log"
    restarted = (finding.details or {}).get("restarts")
    return step if restarted else step + "; --restart on-crash keeps a run going after a crash"


RULES: dict[str, Callable[[Finding, RunData, Gates], str | None]] = {
    "leak.rss": _leak, "leak.vram": _leak, "leak.fds": _leak, "leak.kv": _kv,
    "creep.ttft_p99": _creep, "creep.itl_p99": _creep, "creep.e2e_p99": _creep,
    "errors.budget": _budget, "canary": _canary, "client.saturation": _saturation, "crashes": _crashes,
}
