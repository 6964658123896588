"""The report's table sections as plain dicts: header, gates, run facts, events, environment, baseline.

Values stay raw text here (never pre-escaped markup): the template's autoescape makes server- and config-supplied
strings inert.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from soak.analysis.baseline import BaselineComparison, ComparisonRow
from soak.contracts import (
    Event,
    EventKind,
    SentCounts,
    Summary,
    SummaryFinding,
    SummaryPerRequest,
    SummaryProcessGrowth,
    SummaryScenarioGrowth,
    Verdict,
    trace_summary,
)
from soak.report import timeline
from soak.report.formatting import (
    MISSING,
    format_bytes,
    format_hours,
    format_percent,
    format_span,
    format_utc,
    format_value,
    is_number,
    parse_utc,
    quantity_texts,
)
from soak.report.markers import spans
from soak.report.reading import RequestWindow
from soak.store.models import ALL_SCENARIOS, ERROR_CLASSES
from soak.store.records import StoredRun

VERDICT_ORDER = ("FAIL", "INVALID", "SUSPECT", "INCONCLUSIVE", "SKIPPED", "PASS")  # the run verdict's order
UNSETTLED = ("INVALID", "FAIL", "INCONCLUSIVE", "SUSPECT")  # the verdicts a reader must act on
ENVIRONMENT_KEYS = ("host", "cpu", "gpus", "driver", "cuda", "python", "torch", "vllm", "soak", "platform",
                    "server_cmd", "scenarios", "config_hash")
Fields = list[dict[str, str]]  # (key, text) rows of the template's `fields` macro

# Where a gate row links to: the chart (or section) that shows its evidence.
CHECK_ANCHORS = {
    "leak.rss": "chart-memory", "leak.vram": "chart-vram-process", "leak.kv": "chart-kv", "leak.fds": "chart-fds",
    "creep.ttft_p99": "chart-ttft", "creep.itl_p99": "chart-itl", "creep.e2e_p99": "chart-e2e",
    "errors.rise": "chart-errors", "errors.budget": "chart-errors", "errors.bursts": "chart-errors",
    "hang": "chart-queue", "crashes": "events", "throughput.decay": "chart-throughput",
    "client.saturation": "chart-lag", "server.log_errors": "events", "canary": "events",
    "baseline.regression": "baseline",
}


def check_anchor(check: str) -> str:
    """The element id a gate row links to; a check unknown here goes to its family's chart or to all charts."""
    if check in CHECK_ANCHORS:
        return CHECK_ANCHORS[check]
    family, _, name = check.partition(".")
    if family == "creep" and name.split("_")[0] in ("ttft", "itl", "e2e"):
        return f"chart-{name.split('_')[0]}"
    return {"leak": "chart-memory", "errors": "chart-errors", "goodput": "chart-goodput"}.get(family, "charts")


def verdict_class(verdict: Any) -> str:
    """The CSS class of a verdict word (unknown words get the neutral style)."""
    word = str(verdict or "").upper()
    return f"v-{word.lower()}" if word in VERDICT_ORDER else "v-unknown"


# ---- header -------------------------------------------------------------------------------------------

def verdict_counts(findings: list[SummaryFinding]) -> list[dict[str, Any]]:
    """How many findings have each verdict, worst first."""
    counts: dict[str, int] = {}
    for finding in findings:
        word = finding.verdict.value
        counts[word] = counts.get(word, 0) + 1
    order = {word: i for i, word in enumerate(VERDICT_ORDER)}
    return [{"verdict": word, "count": n, "class": verdict_class(word)}
            for word, n in sorted(counts.items(), key=lambda item: order.get(item[0], 99))]


def exhaustion_lines(findings: list[SummaryFinding]) -> list[str]:
    """"host memory runs out in 31 h at this slope (leak.rss)" for each leak finding that found a leak (FAIL or
    SUSPECT) and could say when its headroom runs out; the soonest first.

    A PASS or INCONCLUSIVE slope is noise or unproven, so projecting it would put a guess in the banner.
    """
    found = []
    for finding in findings:
        exhaustion = finding.exhaustion
        if finding.verdict in (Verdict.FAIL, Verdict.SUSPECT) and exhaustion and is_number(exhaustion.hours):
            found.append((exhaustion.hours, exhaustion.resource or "the headroom", finding.check))
    return [f"{resource} runs out in {format_hours(hours)} at this slope ({check})"
            for hours, resource, check in sorted(found, key=lambda item: item[0])]


def stop_line(reason: str | None) -> str | None:
    """The banner's line on why a run ended before its planned time (None for one that ran it)."""
    return f"Why it ended: {reason}" if reason and reason != "completed" else None


def header(run: StoredRun, summary: Summary | None, duration_s: float | None) -> dict[str, Any]:
    """The verdict banner and the run's identity, status, times and duration against plan (from the run's row
    alone without a summary)."""
    verdict = str(summary.verdict.value if summary else run.verdict or "UNKNOWN").upper()
    findings, target = (summary.findings, summary.target) if summary else ([], None)
    planned_s = run.planned_duration_s
    share = duration_s / planned_s if is_number(duration_s) and is_number(planned_s) and planned_s > 0 else None
    return {
        "verdict": verdict, "verdict_class": verdict_class(verdict),
        "reason": (summary.verdict_reason if summary else "") or run.verdict_reason or "",
        "run_id": run.id, "status": run.status,
        "started": format_utc(run.started_at), "ended": format_utc(run.ended_at),
        "duration": format_span(duration_s), "planned": format_span(planned_s),
        "duration_share": format_percent(share) if share is not None else MISSING,
        "short": share is not None and share < 0.99,
        "target": {"kind": run.target_kind, "url": run.target_url, "model": run.model,
                   "dialect": target.dialect if target else None},
        "not_measured": [f"Not measured: {line}" for line in (target.not_measured if target else None) or []],
        "schedule": run.schedule_name,
        "labels": run.labels or (summary.labels if summary else None) or {},
        "counts": verdict_counts(findings),
        "exhaustion": exhaustion_lines(findings),
        "stop_reason": stop_line(summary.stop_reason if summary else None),
    }


def run_duration_s(run: StoredRun, last_sample_s: float) -> float | None:
    """The run's length: as recorded, else end − start, else up to its last sample (a run still going or killed)."""
    if is_number(run.duration_s):
        return float(run.duration_s)
    started, ended = parse_utc(run.started_at), parse_utc(run.ended_at)
    if started and ended:
        return (ended - started).total_seconds()
    return last_sample_s if last_sample_s > 0 else None


# ---- gates --------------------------------------------------------------------------------------------

def _field_text(key: str, value: Any) -> str:
    """One field of a finding's extra data; byte quantities (by their name) in binary units."""
    if "bytes" in key and is_number(value):
        per = key.split("bytes", 1)[1].replace("_per_", "/").strip("_")
        return format_bytes(value) + (per if per.startswith("/") else "")
    return format_value(value)


QUANTITY_KEYS = {"value", "unit", "ci", "trend"}  # shown together as one line; a trend is for the charts


def quantity_fields(record: SummaryProcessGrowth | SummaryPerRequest | None) -> Fields:
    """A per-process or per-request result as one human line (value and CI) and its other fields that are set."""
    if record is None:
        return []
    texts = quantity_texts(record.value, record.unit, record.ci)
    value = f"{texts['value']} ({texts['ci']})" if texts["ci"] else texts["value"]
    in_bytes = "byte" in record.unit
    rest = [{"key": key, "text": format_bytes(item) if in_bytes and key == "floor" and is_number(item)
             else _field_text(key, item)}
            for key, item in record.model_dump(exclude=QUANTITY_KEYS).items() if item is not None]
    return [{"key": "value", "text": value}, *rest]


def _detail_fields(data: dict[str, Any] | None) -> Fields:
    """A finding's check-specific figures as (key, text) pairs."""
    return [{"key": str(key), "text": _field_text(str(key), value)} for key, value in (data or {}).items()]


def attribution_lines(terms: list[SummaryScenarioGrowth] | None) -> list[str]:
    """A leak's growth per request of each scenario: `cancel (cancelled): 1.08 MiB/request (95 % CI 0.72 … 1.44 MiB/request)`."""
    lines = []
    for term in terms or []:
        texts = quantity_texts(term.per_request, term.unit, term.ci)
        lines.append(f"{term.scenario or '?'}: {texts['value']}" + (f" ({texts['ci']})" if texts["ci"] else ""))
    return lines


@dataclass(frozen=True)
class GateRow:
    """One row of the gates table: a finding's verdict, value with CI, threshold and detection limit in human
    units, its evidence, and the chart (or section) it links to."""

    check: str
    verdict: str
    verdict_class: str
    value: str
    ci: str
    threshold: str
    detection_limit: str
    evidence: str
    anchor: str
    next_step: str  # what would settle an unsettled check ("" for a settled one)
    percentile_used: str | None
    per_process: list[Fields]
    per_request: Fields
    attribution: list[str]
    details: Fields


@dataclass(frozen=True)
class NextStep:
    """One line of "What next": an unsettled check and what would settle it or where to look."""

    check: str
    verdict: str
    verdict_class: str
    anchor: str
    text: str


def gate_row(finding: SummaryFinding) -> GateRow:
    """One row of the gates table: verdict, value with CI and threshold in human units, evidence, link."""
    check, verdict = finding.check or "?", finding.verdict.value
    texts = quantity_texts(finding.value, finding.unit, finding.ci, finding.threshold, finding.detection_limit)
    return GateRow(
        check=check, verdict=verdict, verdict_class=verdict_class(verdict), value=texts["value"], ci=texts["ci"],
        threshold=texts["threshold"], detection_limit=texts["detection_limit"],
        evidence=finding.evidence, anchor=check_anchor(check),
        next_step=(finding.next_step or "") if verdict in UNSETTLED else "",
        percentile_used=finding.percentile_used,
        per_process=[quantity_fields(item) for item in finding.per_process or []],
        per_request=quantity_fields(finding.per_request),
        attribution=attribution_lines(finding.attribution),
        details=_detail_fields(finding.details),
    )


def gates(findings: list[SummaryFinding]) -> list[GateRow]:
    """The gates table, in the order analysis reported the findings."""
    return [gate_row(finding) for finding in findings]


def what_next(rows: list[GateRow]) -> list[NextStep]:
    """One line per unsettled check, worst verdict first: what would settle it or where to look.

    A summary written before checks carried `next_step` still gets a line: its evidence says why, the chart link
    says where.
    """
    order = {word: i for i, word in enumerate(VERDICT_ORDER)}
    unsettled = [row for row in rows if row.verdict in UNSETTLED]
    return [NextStep(check=row.check, verdict=row.verdict, verdict_class=row.verdict_class, anchor=row.anchor,
                     text=row.next_step or "see the chart this check links to")
            for row in sorted(unsettled, key=lambda row: order.get(row.verdict, 99))]


# ---- run facts ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestTotals:
    """One row of the Requests table: counts summed over some windows, errors by class, error rate and rates per
    second (None where nothing was sent or the windows span no time)."""

    label: str
    requests: int
    ok: int
    cancelled: int
    expected_errors: int
    output_tokens: int
    prompt_tokens: int
    late_sends_1s: int
    errors_by_class: dict[str, int]
    errors: int
    error_rate: float | None
    requests_per_s: float | None
    tokens_per_s: float | None


def request_sums(label: str, windows: Sequence[RequestWindow]) -> RequestTotals:
    """Counts summed over `windows`, with errors by class, error rate and rates per second."""
    by_class = {name: sum(window.errors_of(name) for window in windows) for name in ERROR_CLASSES}
    span_s = sum(max(window.end_s - window.start_s, 0.0) for window in windows)
    requests, output_tokens, errors = (sum(window.requests for window in windows),
                                       sum(window.output_tokens for window in windows), sum(by_class.values()))
    return RequestTotals(
        label=label, requests=requests, ok=sum(window.ok for window in windows),
        cancelled=sum(window.cancelled for window in windows),
        expected_errors=sum(window.expected_errors for window in windows), output_tokens=output_tokens,
        prompt_tokens=sum(window.prompt_tokens for window in windows),
        late_sends_1s=sum(window.late_sends_1s for window in windows),
        errors_by_class=by_class, errors=errors, error_rate=errors / requests if requests else None,
        requests_per_s=requests / span_s if span_s else None, tokens_per_s=output_tokens / span_s if span_s else None)


def request_totals(windows: Sequence[RequestWindow]) -> list[RequestTotals]:
    """Request totals: all scenarios over the whole run and after warm-up, then each scenario."""
    all_rows = [window for window in windows if window.scenario == "*"]
    scenarios = sorted({window.scenario for window in windows} - {"*"})
    if not all_rows:  # no "*" rows stored: the scenarios together are the whole
        all_rows = [window for window in windows if window.scenario != "*"]
    if not all_rows:
        return []
    totals = [request_sums("all scenarios, whole run", all_rows),
              request_sums("all scenarios, after warm-up", [window for window in all_rows if window.window_index >= 0])]
    for name in scenarios:
        totals.append(request_sums(name, [window for window in windows if window.scenario == name]))
    return totals


def run_facts(run: StoredRun, events: list[Event], windows: Sequence[RequestWindow],
              duration_s: float | None) -> dict[str, Any]:
    """The Run section: durations, window plan, phases, request totals."""
    return {
        "duration": format_span(duration_s), "planned": format_span(run.planned_duration_s),
        "warmup": format_span(run.warmup_s), "window": format_span(run.window_s),
        "windows": len({window.window_index for window in windows if window.window_index >= 0}),
        "phases": timeline.phases(events, duration_s),
        "totals": request_totals(windows),
        "error_classes": ERROR_CLASSES,
        "trace": trace_facts(events, windows, duration_s),
        "capabilities": capability_facts(events),
        "network": network_facts(events, duration_s),
    }


def network_facts(events: list[Event], duration_s: float | None) -> str | None:
    """The run's network outages in one line (the route to the server lost: out of reach, not down); None without."""
    found = spans(events, "network", duration_s or 0.0)
    if not found:
        return None
    each = ", ".join(f"{format_span(m.end_s - m.t_s)} from {format_span(m.t_s)}" for m in found)
    return (f"{len(found)} network outage(s), the server out of reach rather than down: {each}; arrivals paused, "
            "and the windows they overlap are left out of the checks")


def capability_facts(events: list[Event]) -> dict[str, Any] | None:
    """What the server accepted when asked before the load (its `capabilities` event), and the scenarios dropped
    for what it refused; None for a run recorded before soak asked."""
    found = [event.data for event in events if event.kind == EventKind.CAPABILITIES and event.data]
    if not found:
        return None
    words = {True: "accepted", False: "refused", None: "could not tell"}
    listed = {**words, True: "listed", False: "none listed"}  # adapters are read from /v1/models, not refused
    features = [{"feature": name, "verdict": (listed if name == "adapters" else words)[item.get("supported")],
                 "answer": item.get("answer", ""),
                 "supported": item.get("supported")} for name, item in found[-1].get("features", {}).items()]
    return {"features": features, "dropped": found[-1].get("dropped") or []}


def trace_facts(events: list[Event], windows: Sequence[RequestWindow],
                duration_s: float | None) -> dict[str, Any] | None:
    """The trace a `--trace` run replayed beside what it sent (summary.json's `trace`); None without one."""
    found = [event.data for event in events if event.kind == EventKind.TRACE and event.data]
    if not found:
        return None
    trace, sent = found[-1], [window for window in windows if window.scenario == ALL_SCENARIOS]
    counts = SentCounts(requests=sum(window.requests for window in sent), answered=sum(window.ok for window in sent),
                        prompt_tokens=sum(window.prompt_tokens for window in sent),
                        output_tokens=sum(window.output_tokens for window in sent))
    return {**trace_summary(trace, counts, duration_s).model_dump(), "windows": trace_windows(trace.get("windows"), sent),
            "histograms": [(title, histogram_cells(trace.get(key))) for title, key in
                           (("Prompt tokens", "prompt_histogram"), ("Output tokens", "output_histogram"))
                           if trace.get(key)]}


def trace_windows(planned: list[dict[str, Any]] | None, sent: Sequence[RequestWindow]) -> list[dict[str, Any]]:
    """Each window's requests and mean lengths as the trace planned them (the trace event's JSON) beside what was
    sent and answered."""
    by_index = {window.window_index: window for window in sent}
    rows = []
    for plan in planned or []:
        window, count = by_index.get(plan["index"]), plan["requests"]
        answered = window.ok if window else 0
        rows.append({"window": "warm-up" if plan["index"] < 0 else plan["index"], "planned": count,
                     "sent": window.requests if window else 0,
                     "planned_prompt": plan["prompt_tokens"] / count if count else None,
                     "sent_prompt": window.prompt_tokens / answered if window and answered else None,
                     "planned_output": plan["output_tokens"] / count if count else None,
                     "sent_output": window.output_tokens / answered if window and answered else None})
    return rows


def histogram_cells(histogram: dict[str, list[int]]) -> list[tuple[str, int]]:
    """A length histogram's bins as ("≤ 16", rows), ("17–32", rows), …"""
    upper, rows = histogram["upper"], histogram["rows"]
    labels = [f"≤ {upper[0]:,}"] + [f"{low + 1:,}–{high:,}" for low, high in zip(upper, upper[1:])]
    return list(zip(labels, rows))


# ---- events, environment, baseline ---------------------------------------------------------------------

def _item_text(item: Any) -> str:
    """One list item of the environment: a dict as `key: value` pairs (byte sizes in binary units)."""
    if isinstance(item, dict):
        return ", ".join(f"{key}: {_field_text(str(key), value)}" for key, value in item.items())
    return format_value(item)


def value_lines(value: Any) -> list[str]:
    """A stored environment value as lines: one per list item or dict entry, "—" when missing."""
    if isinstance(value, dict) and value:
        return [f"{key}: {_field_text(str(key), item)}" for key, item in value.items()]
    if isinstance(value, (list, tuple)) and value:
        return [_item_text(item) for item in value]
    return [format_value(value)]


def command_line(value: Any) -> str:
    """A stored command (a list, or a JSON list as text) as the shell line that would run it."""
    if isinstance(value, str) and value.startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, (list, tuple)):
        return shlex.join(str(part) for part in value)
    return format_value(value)


def environment(run: StoredRun) -> dict[str, Any]:
    """The Environment section: known keys first (missing as "—"), then any others, then target and config."""
    env = run.environment or {}
    keys = list(ENVIRONMENT_KEYS) + sorted(key for key in env if key not in ENVIRONMENT_KEYS)
    rows = [{"key": key, "lines": value_lines(env.get(key))} for key in keys]
    return {
        "rows": rows,
        "target": [{"key": "target kind", "lines": value_lines(run.target_kind)},
                   {"key": "target URL", "lines": value_lines(run.target_url)},
                   {"key": "model", "lines": value_lines(run.model)},
                   {"key": "server command", "lines": [command_line(run.server_cmd)]},
                   {"key": "output folder", "lines": value_lines(run.out_dir)}],
        "config": json.dumps(run.config or {}, indent=2, sort_keys=True, ensure_ascii=False, default=str),
    }


def _delta_text(delta_pct: Any) -> str:
    return f"{delta_pct:+.1f} %" if is_number(delta_pct) else MISSING


def baseline_row(row: ComparisonRow) -> dict[str, str]:
    """One before/after row; values in the row's unit when it names one."""
    texts = quantity_texts(row.current, row.unit, None, row.baseline)
    return {"metric": row.name, "current": texts["value"], "baseline": texts["threshold"],
            "delta": _delta_text(row.delta_pct), "tolerance": f"± {row.tolerance_text}", "status": row.status,
            "status_class": "b-" + row.status.replace(" ", "-")}


def baseline_table(baseline: BaselineComparison | None) -> dict[str, Any] | None:
    """The before/after comparison with a baseline run, or None without one."""
    if baseline is None:
        return None
    return {"run_id": baseline.run_id, "note": baseline.note, "rows": [baseline_row(row) for row in baseline.rows]}


def forensics(summary: Summary | None) -> list[dict[str, Any]]:
    """"Where the memory went": one entry per process a forensics window watched (docs/forensics.md)."""
    records = (summary.forensics or []) if summary else []
    return [_forensics_entry(record) for record in records]


def _forensics_entry(record: Any) -> dict[str, Any]:
    """A process's window: its heading, the sentence, the lines holding most, the mapping growth, the links."""
    who = f"{record.process or record.role} (pid {record.pid})" if record.pid is not None else "the server"
    span = (f", {format_span(record.ended_s - record.started_s)} from {format_span(record.started_s)} into the run"
            if record.started_s is not None and record.ended_s is not None else "")
    return {
        "title": f"{who}: {record.role}, {record.method}{span}", "sentence": record.sentence,
        "named": record.named, "held": format_bytes(record.held_bytes) if record.held_bytes is not None else None,
        "rows": [{"where": f"{stack.file}:{stack.line}" if stack.file else "", "function": stack.function,
                  "caller": stack.caller or "", "bytes": format_bytes(stack.bytes), "allocations": stack.allocations,
                  "share": format_percent(stack.share)} for stack in record.stacks],
        "mappings": record.growth_by_mapping, "flamegraph": record.flamegraph, "capture": record.capture,
        "refusals": record.refusals,
    }
