"""A release series of runs, oldest to newest: each run's key figures, what changed from the run before
(the same comparison as `soak compare`, from `baseline.py`) and what changed in the environment tested.

Pure: it reads the `StoredRun` records the store returns and imports no stage.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from soak.analysis.baseline import IMPROVED, REGRESSED, WITHIN, compare_baseline, metric_values
from soak.analysis.gates import Gates
from soak.contracts import Summary, stored_summary
from soak.store.records import StoredRun

LEAK_CHECKS = ("leak.rss", "leak.vram", "leak.kv", "leak.fds")
# The figures of every row: (key in compare_baseline's rows, column title, unit). The leak slopes come from the
# checks chosen with --check (by default LEAK_CHECKS).
FIGURES = (("latency.ttft.p99", "P99 TTFT", "ms"), ("latency.itl.p99", "P99 ITL", "ms"),
           ("latency.e2e.p99", "P99 E2E", "ms"), ("error_rate", "error rate", "fraction"),
           ("throughput.output_tokens_per_s", "throughput", "tokens/s"),
           ("goodput", "goodput", "fraction"))  # the share of requests meeting --slo (summary.json `goodput`)
# What a changed environment means for a before/after reading: (key, title).
ENVIRONMENT_KEYS = (("soak", "soak"), ("vllm", "vLLM"), ("torch", "torch"), ("driver", "GPU driver"),
                    ("cuda", "CUDA"), ("gpus", "GPUs"), ("model", "model"), ("serve_args", "serve args"),
                    ("server_cmd", "server command"), ("python", "Python"), ("host", "host"),
                    ("config_hash", "config hash"))
_PORT = re.compile(r"\s--port[ =]\d+")  # a server's port is chosen per run, not part of what was tested


@dataclass(frozen=True)
class HistoryRun:
    """One stored run as history reads it."""

    run_id: str
    started_at: str
    status: str
    labels: dict[str, str]
    environment: dict[str, Any]
    summary: Summary | None  # None until the run is finalised


@dataclass(frozen=True)
class CheckValue:
    """A chosen check's verdict, value and unit in one run."""

    verdict: str
    value: float | None
    unit: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Delta:
    """A figure's or a check's change from the previous run: `status` and `tolerance` as `soak compare` judges a
    figure; a check has neither (its verdict says enough)."""

    delta: float
    unit: str
    delta_pct: float | None
    status: str | None = None
    tolerance: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.tolerance is None:  # a check's delta has no tolerance key
            del out["tolerance"]
        return out


@dataclass(frozen=True)
class VerdictChange:
    """A check whose verdict differs from the previous run's."""

    check: str
    baseline: str
    current: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EnvironmentChange:
    """An ENVIRONMENT_KEYS entry whose value differs from the run before (`title` says it for people)."""

    key: str
    title: str
    before: Any
    after: Any

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HistoryRow:
    """One run of the series: its figures, the checks asked for, and what changed since the previous run."""

    run: HistoryRun
    verdict: str | None
    figures: dict[str, float | None]
    checks: dict[str, CheckValue | None]
    previous: str | None = None  # the run the deltas are against (the latest earlier run with a summary)
    deltas: dict[str, Delta] = field(default_factory=dict)
    verdict_changes: list[VerdictChange] = field(default_factory=list)
    environment_changes: list[EnvironmentChange] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The row as `soak history --json` prints it."""
        return {"run_id": self.run.run_id, "started_at": self.run.started_at, "status": self.run.status,
                "labels": self.run.labels, "verdict": self.verdict, "figures": self.figures,
                "checks": {check: None if value is None else value.as_dict() for check, value in self.checks.items()},
                "previous": self.previous, "deltas": {key: delta.as_dict() for key, delta in self.deltas.items()},
                "verdict_changes": [change.as_dict() for change in self.verdict_changes],
                "environment_changes": [change.as_dict() for change in self.environment_changes]}


def from_stored(run: StoredRun) -> HistoryRun:
    """A HistoryRun from a stored run (its summary and environment as stored, its model and serve args)."""
    environment = {**run.environment, "model": run.model,
                   "serve_args": (run.config.get("target") or {}).get("serve_args") or []}
    return HistoryRun(run_id=run.id, started_at=run.started_at, status=run.status, labels=dict(run.labels),
                      environment=environment, summary=stored_summary(run.summary_json, run.id))


def select_checks(summaries: list[Summary], wanted: tuple[str, ...]) -> list[str]:
    """The checks to show: each name in `wanted` or those it prefixes (`creep` → creep.*); default the leaks.

    ValueError for a name no run has a finding of.
    """
    if not wanted:
        return list(LEAK_CHECKS)
    known = list(dict.fromkeys(f.check for s in summaries for f in s.findings))
    chosen: list[str] = []
    for name in wanted:
        matches = [check for check in known if check == name or check.startswith(name.rstrip(".") + ".")]
        if not matches:
            raise ValueError(f"no run here has a check named {name!r} (known: {', '.join(known) or 'none'})")
        chosen += [check for check in matches if check not in chosen]
    return chosen


def figures_of(summary: Summary | None) -> dict[str, float | None]:
    """The FIGURES of one summary (None where it has none)."""
    values = {metric.name: value for metric, value in metric_values(summary).items()} if summary else {}
    return {key: values.get(key) for key, _, _ in FIGURES}


def checks_of(summary: Summary | None, checks: list[str]) -> dict[str, CheckValue | None]:
    """Verdict, value and unit of each chosen check (None when the run has no such finding)."""
    findings = {f.check: f for f in summary.findings} if summary else {}
    return {check: CheckValue(findings[check].verdict.value, findings[check].value, findings[check].unit)
            if check in findings else None for check in checks}


def _environment_value(environment: dict[str, Any], key: str) -> Any:
    value = environment.get(key)
    if key == "gpus":
        return [gpu.get("name") for gpu in value or [] if isinstance(gpu, dict)] or None
    if key == "server_cmd" and isinstance(value, str):
        return _PORT.sub("", value)
    return value or None


def environment_changes(before: dict[str, Any], after: dict[str, Any]) -> list[EnvironmentChange]:
    """Each ENVIRONMENT_KEYS entry whose value differs between two runs."""
    changes = []
    for key, title in ENVIRONMENT_KEYS:
        old, new = _environment_value(before, key), _environment_value(after, key)
        if old != new:
            changes.append(EnvironmentChange(key, title, old, new))
    return changes


def check_deltas(row: HistoryRow, previous: HistoryRow) -> None:
    """Each chosen check's change of value from the previous run (no tolerance: its verdict says enough)."""
    for check, now in row.checks.items():
        before = previous.checks.get(check)
        if now and before and isinstance(now.value, (int, float)) and isinstance(before.value, (int, float)):
            delta = now.value - before.value
            row.deltas[check] = Delta(delta, now.unit, 100 * delta / before.value if before.value else None)


def compare_with(row: HistoryRow, previous: HistoryRow, gates: Gates) -> None:
    """Fill `row`'s deltas, verdict changes and environment changes against the previous run."""
    row.previous = previous.run.run_id
    row.environment_changes = environment_changes(previous.run.environment, row.run.environment)
    if row.run.summary is None or previous.run.summary is None:
        return
    finding, compared = compare_baseline(row.run.summary, previous.run.summary, gates)
    row.deltas = {item.name: Delta(item.current - item.baseline, item.unit, item.delta_pct, item.status,
                                   item.tolerance_text)
                  for item in compared if item.name in dict.fromkeys(k for k, _, _ in FIGURES)}
    row.verdict_changes = [VerdictChange(**change) for change in (finding.details or {}).get("verdict_changes", [])]
    check_deltas(row, previous)


def build_history(runs: list[HistoryRun], gates: Gates, wanted_checks: tuple[str, ...] = ()) -> list[HistoryRow]:
    """One row per run, in the order given (oldest first), each compared with the latest earlier finalised
    run; the environment is compared with the run just before."""
    checks = select_checks([run.summary for run in runs if run.summary], wanted_checks)
    rows: list[HistoryRow] = []
    for run in runs:
        row = HistoryRow(run=run, verdict=run.summary.verdict.value if run.summary else None,
                         figures=figures_of(run.summary),
                         checks=checks_of(run.summary, checks))
        finalised = [earlier for earlier in rows if earlier.run.summary is not None]
        if rows:
            compare_with(row, finalised[-1] if finalised and run.summary else rows[-1], gates)
        rows.append(row)
    return rows


def status_counts(rows: list[HistoryRow]) -> dict[str, int]:
    """How many deltas regressed, improved or stayed within noise over the whole series."""
    statuses = [delta.status for row in rows for delta in row.deltas.values() if delta.status]
    return {status: statuses.count(status) for status in (REGRESSED, IMPROVED, WITHIN)}
