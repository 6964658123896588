"""`baseline.regression`: compare this run's summary.json with a baseline run's.

Rows compare latency percentiles (higher is worse, relative tolerance), the error rate (higher is
worse, absolute tolerance, since a baseline of 0 makes any relative change infinite), output
throughput in tokens/s (lower is worse, relative tolerance) and, when both runs set the same `--slo`,
goodput: the share of requests meeting it (lower is worse, absolute tolerance). A regression is SUSPECT, or FAIL when
`fail_on_regression` is set.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from soak.analysis.findings import FAIL, PASS, SUSPECT, Finding, skipped
from soak.analysis.gates import Gates
from soak.contracts import Summary

CHECK = "baseline.regression"
REGRESSED, IMPROVED, WITHIN = "regressed", "improved", "within noise"


@dataclass(frozen=True)
class ComparisonRow:
    """One metric of this run against the baseline run: the delta in % of the baseline, and whether it is beyond
    the tolerance (`tolerance` a fraction of the baseline, or an absolute difference; `tolerance_text` says which)."""

    name: str
    unit: str
    current: float
    baseline: float
    delta_pct: float | None
    tolerance: float
    tolerance_text: str
    status: str

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON (the finding's details, `soak compare --json`)."""
        return asdict(self)


@dataclass(frozen=True)
class BaselineComparison:
    """The before/after comparison with a baseline run that a report shows (`note`: why it has no rows)."""

    run_id: str
    rows: tuple[ComparisonRow, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_worse: bool
    relative: bool  # tolerance is a fraction of the baseline (else an absolute difference)


def _is_percentile(level: str) -> bool:
    return level.startswith("p") and level[1:].replace(".", "", 1).isdigit()


def _latency_values(summary: Summary) -> dict[str, float]:
    """Latency percentiles in ms; a stats entry's sample `count` is no latency and is left out."""
    values = {}
    for metric, stats in summary.latency_ms.model_dump().items():
        for level, value in stats.items():
            if _is_percentile(level) and isinstance(value, (int, float)):
                values[f"{metric}.{level}"] = float(value)
    return values


def _throughput(summary: Summary) -> float | None:
    tokens, duration_s = summary.totals.output_tokens, summary.duration_s
    return tokens / duration_s if tokens and duration_s else None


def _error_rate(summary: Summary) -> float | None:
    """The run's error rate; None for a run without requests (its 0.0 measures nothing)."""
    return float(summary.totals.error_rate) if summary.totals.requests else None


GOODPUT = "goodput"


def _goodput(summary: Summary) -> float | None:
    return summary.goodput.share if summary.goodput else None


def _same_slo(current: Summary, baseline: Summary) -> bool:
    """Goodput is comparable only against the same targets: a share of other targets is another quantity."""
    return (current.goodput and current.goodput.slo_ms) == (baseline.goodput and baseline.goodput.slo_ms)


def metric_values(summary: Summary) -> dict[Metric, float]:
    """The comparable numbers of one summary."""
    out = {Metric(f"latency.{k}", "ms", True, True): v for k, v in _latency_values(summary).items()}
    rate = _error_rate(summary)
    if rate is not None:
        out[Metric("error_rate", "fraction", True, False)] = rate
    tokens_per_s = _throughput(summary)
    if tokens_per_s is not None:
        out[Metric("throughput.output_tokens_per_s", "tokens/s", False, True)] = tokens_per_s
    goodput = _goodput(summary)
    if goodput is not None:
        out[Metric(GOODPUT, "fraction", False, False)] = goodput
    return out


def _tolerance(metric: Metric, gates: Gates) -> float:
    if metric.name.startswith("latency."):
        return gates.baseline.latency_tolerance
    if metric.name == "error_rate":
        return gates.baseline.error_rate_tolerance
    if metric.name == GOODPUT:
        return gates.baseline.goodput_tolerance
    return gates.baseline.throughput_tolerance


def _status(metric: Metric, current: float, baseline: float, tolerance: float) -> str:
    if metric.relative and not baseline:  # no scale to measure against: any change counts
        if current == baseline:
            return WITHIN
        return REGRESSED if (current > baseline) == metric.higher_is_worse else IMPROVED
    change = (current - baseline) / baseline if metric.relative else current - baseline
    worse = change if metric.higher_is_worse else -change
    return REGRESSED if worse > tolerance else (IMPROVED if worse < -tolerance else WITHIN)


def compare_row(metric: Metric, current: float, baseline: float, tolerance: float) -> ComparisonRow:
    """One comparison: delta in % of the baseline, and whether it is beyond tolerance."""
    tolerance_text = f"{100 * tolerance:g} %" if metric.relative else f"{100 * tolerance:g} pp"
    return ComparisonRow(name=metric.name, unit=metric.unit, current=current, baseline=baseline,
                         delta_pct=100 * (current - baseline) / baseline if baseline else None,
                         tolerance=tolerance, tolerance_text=tolerance_text,
                         status=_status(metric, current, baseline, tolerance))


def compare_baseline(current: Summary, baseline: Summary, gates: Gates) -> tuple[Finding, list[ComparisonRow]]:
    """(finding, rows) comparing two runs' summaries."""
    now, before = metric_values(current), metric_values(baseline)
    rows = [compare_row(m, now[m], before[m], _tolerance(m, gates)) for m in now
            if m in before and (m.name != GOODPUT or _same_slo(current, baseline))]
    base_id = baseline.run_id
    if not rows:
        return skipped(CHECK, f"No metric in common with {base_id}.", baseline_run=base_id), rows
    regressed = [r for r in rows if r.status == REGRESSED]
    verdict = (FAIL if gates.baseline.fail_on_regression else SUSPECT) if regressed else PASS
    finding = Finding(check=CHECK, verdict=verdict, value=len(regressed), unit="metrics regressed",
                      threshold=0, evidence=_text(regressed, rows, base_id),
                      details={"baseline_run": base_id, "rows": [row.as_dict() for row in rows],
                               "verdict_changes": _verdict_changes(current, baseline)})
    return finding, rows


def _row_text(row: ComparisonRow) -> str:
    delta = "n/a" if row.delta_pct is None else f"{row.delta_pct:+.1f} %"
    return f"{row.name} {row.current:.4g} vs {row.baseline:.4g} {row.unit} ({delta}, tolerance {row.tolerance_text})"


def _text(regressed: list[ComparisonRow], rows: list[ComparisonRow], base_id: str) -> str:
    if not regressed:
        improved = sum(r.status == IMPROVED for r in rows)
        return f"No regression against {base_id}: {len(rows)} metrics compared, {improved} improved."
    more = f"; {len(regressed) - 1} more regressed" if len(regressed) > 1 else ""
    return f"Regressed against {base_id}: {_row_text(regressed[0])}{more}."


def _verdict_changes(current: Summary, baseline: Summary) -> list[dict]:
    """Checks whose verdict changed between the runs (for the report's comparison table)."""
    before = {f.check: f.verdict.value for f in baseline.findings}
    return [{"check": f.check, "baseline": before[f.check], "current": f.verdict.value}
            for f in current.findings if f.check in before and before[f.check] != f.verdict.value]
