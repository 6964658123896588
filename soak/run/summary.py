"""Building the `Summary` of summary.json (schema soak.run.summary/1) from the database and the findings."""

from __future__ import annotations

from typing import Any

from soak.analysis.forensics import ProcessForensicsResult, read_forensics, short_path
from soak.analysis.server_kind import not_measured
from soak.contracts import (
    ErrorMessage,
    ErrorsByClass,
    Event,
    EventKind,
    GoodputWindow,
    LatencyMs,
    LostWorker,
    Percentiles,
    SentCounts,
    Summary,
    SummaryCapabilities,
    SummaryContext,
    SummaryFinding,
    SummaryForensics,
    SummaryGoodput,
    SummaryHeldStack,
    SummaryTarget,
    SummaryTrace,
    SummaryWorkers,
    Totals,
    ValidationGap,
    Verdict,
    trace_summary,
)
from soak.slo import stored_slo_ms
from soak.store.histograms import merged_percentiles
from soak.store.models import ALL_SCENARIOS, ERROR_CLASSES, LatencyWindowRow, RequestWindowRow
from soak.store.records import StoredRun
from soak.store.store import Store

SUMMARY_METRICS = tuple(LatencyMs.model_fields)  # ttft, itl, e2e
FORENSICS_STACKS = 10  # the lines summary.json lists per process (the flame graph has them all)


def request_totals(store: Store, run_id: str) -> Totals:
    """Requests, errors (cancelled and expected 4xx are not errors), error rate and output tokens."""
    rows = store.read_rows(RequestWindowRow, run_id, scenario=ALL_SCENARIOS)
    by_class = {name: sum(getattr(row, "err_" + name) for row in rows) for name in ERROR_CLASSES}
    errors = sum(by_class.values())
    requests, cancelled = sum(row.requests for row in rows), sum(row.cancelled for row in rows)
    judged = requests - cancelled
    return Totals(
        requests=requests, errors=errors, error_rate=errors / judged if judged else 0.0,
        output_tokens=sum(row.output_tokens for row in rows), cancelled=cancelled,
        errors_by_class=ErrorsByClass(**by_class),
    )


def latency_summary(store: Store, run_id: str) -> LatencyMs:
    """Run-wide percentiles after warm-up, per metric."""
    result = {}
    for metric in SUMMARY_METRICS:
        rows = store.read_rows(LatencyWindowRow, run_id, scenario=ALL_SCENARIOS, metric=metric)
        result[metric] = Percentiles(**merged_percentiles(row.hist for row in rows if row.window_index >= 0))
    return LatencyMs(**result)


def goodput_of(store: Store, run: StoredRun) -> SummaryGoodput | None:
    """The share of requests meeting the run's `--slo` after warm-up, overall and per window; None without one."""
    rows = [row for row in store.read_rows(RequestWindowRow, run.id, scenario=ALL_SCENARIOS)
            if row.window_index >= 0 and row.slo_met is not None]
    if not rows:
        return None
    windows = [GoodputWindow(index=row.window_index, start_s=row.start_s, end_s=row.end_s, requests=finished,
                             good=row.slo_met, share=row.slo_met / finished)
               for row in rows if (finished := row.requests - row.cancelled) > 0]
    requests, good = sum(w.requests for w in windows), sum(w.good for w in windows)
    return SummaryGoodput(slo_ms=stored_slo_ms(run.config), requests=requests, good=good,
                          share=good / requests if requests else None, windows=windows)


def largest_counts(events: list[Event], kind: str, key: tuple[str, ...]) -> list[dict[str, Any]]:
    """The data of `kind` events, one per group (`key` fields), the one with the largest count; most first."""
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for event in events:
        data = event.data
        if event.kind != kind or not isinstance(data.get("count"), int):
            continue
        group = tuple(data.get(name) for name in key)
        if group not in best or data["count"] > best[group]["count"]:
            best[group] = data
    return sorted(best.values(), key=lambda data: -data["count"])


def error_messages(events: list[Event]) -> list[ErrorMessage]:
    """Failed requests grouped by message (the ledger's `error_message` events)."""
    return [ErrorMessage.model_validate(data) for data in largest_counts(events, EventKind.ERROR_MESSAGE, ("message",))]


def validation_gaps(events: list[Event]) -> list[ValidationGap]:
    """200s where a refusal was expected, per scenario and expectation (the ledger's `validation_gap` events)."""
    groups = largest_counts(events, EventKind.VALIDATION_GAP, ("scenario", "expectation"))
    return [ValidationGap.model_validate(data) for data in groups]


def context_of(events: list[Event]) -> SummaryContext | None:
    """The context length the load stage used (its `context_length` event), if recorded."""
    found = [event.data for event in events if event.kind == EventKind.CONTEXT_LENGTH and event.data]
    return SummaryContext.model_validate(found[-1]) if found else None


def trace_of(store: Store, run: StoredRun, events: list[Event]) -> SummaryTrace | None:
    """The trace the run replayed (its `trace` event) beside what was sent of it; None without --trace."""
    found = [event.data for event in events if event.kind == EventKind.TRACE and event.data]
    if not found:
        return None
    windows = store.read_rows(RequestWindowRow, run.id, scenario=ALL_SCENARIOS)
    sent = SentCounts(requests=sum(row.requests for row in windows), answered=sum(row.ok for row in windows),
                      prompt_tokens=sum(row.prompt_tokens for row in windows),
                      output_tokens=sum(row.output_tokens for row in windows))
    return trace_summary(found[-1], sent, run.duration_s)


def capabilities_of(events: list[Event]) -> SummaryCapabilities | None:
    """What the server accepted before the load and the scenarios dropped for it (its `capabilities` event), each
    probe with what the server logged answering it (`server_log_provoked` events, by request id)."""
    found = [event.data for event in events if event.kind == EventKind.CAPABILITIES and event.data]
    if not found:
        return None
    logged: dict[str, list[str]] = {}
    for event in events:
        if event.kind == EventKind.SERVER_LOG_PROVOKED:
            said = event.data.get("exception") or event.data.get("line") or event.message
            logged.setdefault(str(event.data.get("request_id")), []).append(str(said).strip())
    capabilities = SummaryCapabilities.model_validate(found[-1])
    for name, feature in capabilities.features.items():
        request_id = found[-1]["features"][name].get("request_id")
        feature.logged = logged.get(str(request_id), []) if request_id else []
    return capabilities


def target_of(run: StoredRun, events: list[Event]) -> SummaryTarget:
    """The server loaded: kind, URL, model, the dialect its /metrics was read in, and what it left unmeasured."""
    dialects = [event.data for event in events if event.kind == EventKind.SERVER_DIALECT and event.data]
    missing = not_measured(events)
    return SummaryTarget(kind=run.target_kind, url=run.target_url, model=run.model,
                         dialect=dialects[-1].get("dialect") if dialects else None, not_measured=missing or None)


def workers_of(events: list[Event]) -> SummaryWorkers | None:
    """The load workers the run started with (`workers_joined`) and those it lost (`worker_lost`), if it had any."""
    joined = [event.data for event in events if event.kind == EventKind.WORKERS_JOINED and event.data]
    if not joined:
        return None
    workers = joined[-1].get("workers") or []
    lost = [LostWorker(t_s=event.t_s, **{key: event.data.get(key) for key in
                                             ("index", "host", "pid", "why", "unseen_s", "on_loss")})
            for event in events if event.kind == EventKind.WORKER_LOST]
    return SummaryWorkers(joined=len(workers), remote=sum(not w.get("local") for w in workers), lost=lost)


def stop_reason(events: list[Event]) -> str | None:
    """Why the run ended, as its `run_end` event says (None while it runs, or for a killed run)."""
    ends = [event for event in events if event.kind == EventKind.RUN_END]
    return (ends[-1].message or None) if ends else None


def forensics_of(events: list[Event], findings: list[SummaryFinding]) -> list[SummaryForensics] | None:
    """Each process a forensics window watched, judged against leak.rss's threshold (None when none did)."""
    leak = next((finding for finding in findings if finding.check == "leak.rss"), None)
    results = read_forensics(events, leak.threshold if leak is not None else None)
    return [forensics_record(result) for result in results] or None


def forensics_record(result: ProcessForensicsResult) -> SummaryForensics:
    stacks = [SummaryHeldStack(function=site.function, file=short_path(site.file), line=site.line,
                               caller=site.caller, bytes=site.bytes, allocations=site.allocations,
                               share=round(site.share, 4)) for site in result.sites[:FORENSICS_STACKS]]
    return SummaryForensics(
        pid=result.pid, process=result.name, role=result.role, method=result.method, started_s=result.started_s,
        ended_s=result.ended_s, held_bytes=result.held_bytes, named=result.named is not None, stacks=stacks,
        growth_by_mapping=result.mapping_sentence, sentence=result.sentence(), flamegraph=result.flamegraph,
        capture=result.capture, refusals=list(result.refusals))


def build_summary(run: StoredRun, store: Store, findings: list[SummaryFinding], verdict: Verdict,
                  reason: str, report_html: str | None) -> Summary:
    """The summary of a stored run (docs/summary.md)."""
    events = store.read_events(run.id)
    return Summary(
        run_id=run.id, status=run.status, started_at=run.started_at, ended_at=run.ended_at,
        duration_s=run.duration_s, planned_duration_s=run.planned_duration_s,
        target=target_of(run, events), labels=run.labels or None,
        verdict=verdict, verdict_reason=reason, findings=findings,
        totals=request_totals(store, run.id), latency_ms=latency_summary(store, run.id),
        context=context_of(events), error_messages=error_messages(events), validation_gaps=validation_gaps(events),
        workers=workers_of(events), goodput=goodput_of(store, run), trace=trace_of(store, run, events),
        capabilities=capabilities_of(events), forensics=forensics_of(events, findings),
        report_html=report_html,
        stop_reason=stop_reason(events),
    )
