"""Early stop (`soak start --stop-on-fail`): a sequential rule that ends a run once a FAIL is beyond doubt.

docs/gates.md, "Early stop". The run so far is judged at looks: every `every_windows` complete windows
(more on a run planned with many windows, so it has at most about 24 looks),
from the first count a trend can be judged on (`gates.min_windows`) up to the last count before the
planned end (the planned end is the final verdict's own look). Only checks whose FAIL the rest of the
run cannot undo take part: leaks (with their persistence gate), latency creep and a hang — and, while the
client is late (`client.saturation` INVALID on the run so far), only FAILs its lateness cannot explain
(`saturation.voided_by_late_client`): a leak still stops the run, a creep or a probe drain timed by a late
client does not. Each look judges them with the gates' `p_value` divided by the number of looks the run will have — Bonferroni
over looks — so the chance that any look of a healthy run fails stays within the final verdict's own
false-alarm budget. A check must FAIL at `consecutive` looks in a row, and keep failing until the run
has half as many windows again as at the first of them (`confirm_frac`): slow drift, or a step at the
end of the windows so far, can read as a FAIL for a while and then fade, while a leak keeps failing as
the run grows. One look never stops a run.

Pure: plain `RunData` in, a decision out. The run side (`soak/run/early_stop.py`) reads the database.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

import numpy as np

from soak.analysis.checks import CHECKS
from soak.analysis.findings import FAIL, INVALID, SUSPECT, Finding
from soak.analysis.fmt import duration_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData
from soak.analysis.saturation import check_saturation, lateness, voided_by_late_client

log = logging.getLogger(__name__)

# Checks whose FAIL stands whatever the rest of the run does. Error rises, budgets and bursts may
# still settle, throughput depends on the load to come, and a crash ends the run by itself.
STOP_CHECKS = ("leak.rss", "leak.vram", "leak.kv", "leak.fds", "creep.ttft_p99", "creep.itl_p99",
               "creep.e2e_p99", "creep.server_itl", "hang")


@dataclass(frozen=True)
class StopRule:
    """When to look and how many FAILs in a row stop the run."""

    every_windows: int = 2
    consecutive: int = 2
    confirm_frac: float = 0.5  # the streak must also span this share more windows than its first look judged
    looks_per_run: int = 24  # a run of many windows looks less often, so Bonferroni does not starve each look

    def step(self, planned_windows: int) -> int:
        """Windows between looks: `every_windows`, or more on a run planned with over 24 × that many."""
        return max(self.every_windows, planned_windows // self.looks_per_run)

    def looks(self, planned_windows: int, min_windows: int) -> tuple[int, ...]:
        """The window counts judged: from `min_windows`, every `step` windows, before the planned end."""
        return tuple(range(min_windows, planned_windows, self.step(planned_windows)))


def planned_window_count(planned_s: float, warmup_s: float, window_s: float) -> int:
    """Complete windows a run of the planned length will have (as the loader counts them)."""
    return max(int(math.floor((planned_s - warmup_s) / window_s + 1e-9)), 0)


def look_gates(gates: Gates, looks: int) -> Gates:
    """The gates a look judges with: `p_value` shared out over the looks (Bonferroni)."""
    return gates.model_copy(update={"p_value": gates.p_value / max(looks, 1)})


@dataclass(frozen=True)
class Look:
    """What one look found: the checks that FAILed and their evidence."""

    windows: int
    t_s: float
    failed: dict[str, str] = field(default_factory=dict)
    client_late: str | None = None  # how late the client was, when client.saturation was INVALID at this look
    leak_verdict: str | None = None  # leak.rss at this look, whatever it was (forensics opens on SUSPECT or FAIL)
    leak_suspects: tuple[int, ...] = ()  # the server PIDs leak.rss found growing at this look
    verdicts: dict[str, str] = field(default_factory=dict)  # every stop check's verdict at this look (the metrics')


@dataclass(frozen=True)
class StopDecision:
    """Why a run stops early."""

    check: str
    t_s: float
    windows: int
    looks_in_a_row: int
    evidence: str
    client_late: str | None = None

    def reason(self) -> str:
        """One line for the summary, the report banner and the run's `early_stop` event."""
        late = f"; the client was late ({self.client_late})" if self.client_late else ""
        return (f"stopped early: {self.check} FAIL at {self.looks_in_a_row} looks in a row, the last over "
                f"{self.windows} windows ({duration_text(self.t_s)} into the run): {self.evidence}{late}")


class SequentialStop:
    """The sequential rule over one run's looks: call `due`, then `record(judge_look(...))`."""

    def __init__(self, gates: Gates, planned_windows: int, rule: StopRule | None = None):
        self.rule = rule or StopRule()
        self.looks = self.rule.looks(planned_windows, gates.min_windows)
        self.gates = look_gates(gates, len(self.looks))
        self.streaks: dict[str, int] = {}
        self.since: dict[str, int] = {}  # window count of each streak's first look
        self._next = 0  # index into self.looks of the next look

    def due(self, complete_windows: int) -> int | None:
        """The latest look count reached by `complete_windows` not yet judged, else None."""
        reached = [i for i in range(self._next, len(self.looks)) if self.looks[i] <= complete_windows]
        if not reached:
            return None
        self._next = reached[-1] + 1
        return self.looks[reached[-1]]

    def record(self, look: Look) -> StopDecision | None:
        """Count FAIL streaks; a decision once one is confirmed (`StopRule`)."""
        self.streaks = {check: self.streaks.get(check, 0) + 1 for check in look.failed}
        self.since = {check: self.since.get(check, look.windows) for check in look.failed}
        for check in STOP_CHECKS:  # the fixed order decides between checks failing together
            if check in look.failed and self._confirmed(check, look.windows):
                return StopDecision(check, look.t_s, look.windows, self.streaks[check], look.failed[check],
                                    look.client_late)
        return None

    def _confirmed(self, check: str, windows: int) -> bool:
        """Enough looks in a row, over enough more windows than the first of them judged."""
        first = self.since[check]
        return self.streaks[check] >= self.rule.consecutive and windows >= first * (1 + self.rule.confirm_frac)


def judge_look(run: RunData, gates: Gates, windows: int) -> Look:
    """Judge the first `windows` complete windows of `run` with the stop checks (while the client is late, a FAIL
    its lateness can explain stops nothing: `saturation.voided_by_late_client`)."""
    cut = cut_run(run, windows)
    late = client_lateness(cut, gates)
    failed, leak, verdicts = {}, None, {}
    for name in STOP_CHECKS:
        try:
            finding = CHECKS[name](cut, gates)
        except Exception:  # a check that cannot judge the run so far stops nothing; the final analysis says why
            log.exception("early stop: check %s failed at a look", name)
            continue
        leak = finding if name == "leak.rss" else leak
        verdicts[name] = str(finding.verdict)
        if finding.verdict == FAIL and not (late and voided_by_late_client(finding)):
            failed[name] = " ".join(finding.evidence.split())
    return Look(windows=windows, t_s=cut.actual_duration_s, failed=failed, client_late=late,
                leak_verdict=None if leak is None else str(leak.verdict), leak_suspects=growing_pids(leak),
                verdicts=verdicts)


def growing_pids(finding: Finding | None) -> tuple[int, ...]:
    """The server PIDs a SUSPECT or FAIL leak finding found growing: those whose own verdict is SUSPECT or FAIL,
    else the one that grew fastest (a leak seen only in the tree total); () for any other verdict."""
    if finding is None or finding.verdict not in (FAIL, SUSPECT) or not finding.per_process:
        return ()
    processes = [p for p in finding.per_process if p.pid > 0]
    growing = [p.pid for p in processes if p.verdict in (FAIL, SUSPECT)]
    if growing or not processes:
        return tuple(growing)
    return (max(processes, key=lambda p: p.value if p.value is not None else -math.inf).pid,)


def client_lateness(run: RunData, gates: Gates) -> str | None:
    """How late the client was on `run`, when `client.saturation` finds it INVALID; else None."""
    try:
        finding = check_saturation(run, gates)
    except Exception:  # no lateness known: every stop check judges, as the final verdict's scoping would allow
        log.exception("early stop: client.saturation failed at a look")
        return None
    return lateness(finding) if finding.verdict == INVALID else None


# -- the run so far ---------------------------------------------------------------------------------------
def cut_run(run: RunData, windows: int) -> RunData:
    """`run` as it stood at the end of its `windows`-th complete window: later windows, samples,
    probes and events dropped."""
    kept_measured = [w for w in run.windows if w.excluded != "warmup"][:windows]
    end_s = kept_measured[-1].end_s if kept_measured else run.warmup_s
    kept = tuple(w for w in run.windows if w.end_s <= end_s + 1e-9)
    indices = {w.index for w in kept}
    return replace(
        run, actual_duration_s=end_s, windows=kept, stopped_early=True,
        processes=tuple(_cut_series(p, end_s) for p in run.processes),
        gpu_processes=tuple(_cut_series(p, end_s) for p in run.gpu_processes),
        probes=tuple(p for p in run.probes if p.t_s < end_s),
        latency_windows=tuple(w for w in run.latency_windows if w.index in indices),
        request_windows=tuple(w for w in run.request_windows if w.index in indices),
        scenario_windows={name: tuple(w for w in rows if w.index in indices)
                          for name, rows in run.scenario_windows.items()},
        server=_cut_series(run.server, end_s), client=_cut_series(run.client, end_s),
        host=_cut_series(run.host, end_s), events=tuple(e for e in run.events if e.t_s < end_s),
        total_requests=sum(w.requests for w in run.request_windows if w.index in indices),
    )


def _cut_series(series: Any, end_s: float) -> Any:
    """A sampled series (a dataclass with `t_s`) without its samples at or after `end_s`."""
    if series is None or not is_dataclass(series):
        return series
    keep = np.asarray(series.t_s) < end_s
    cut = {f.name: getattr(series, f.name)[keep] for f in fields(series)
           if isinstance(getattr(series, f.name), np.ndarray) and getattr(series, f.name).shape == keep.shape}
    return replace(series, **cut)
