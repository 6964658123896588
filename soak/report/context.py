"""Reads one run from the database into the plain dict the report template renders (its context: an edge).

Everything but the verdicts comes from the database, so `soak report RUN_ID` rebuilds the same page years later.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from soak.analysis.baseline import BaselineComparison
from soak.analysis.gates import ClientGate
from soak.analysis.goodput import slo_text
from soak.contracts import Event, Summary, SummaryFinding, stored_summary
from soak.report import charts, gpu_charts, sections, timeline
from soak.report.charts import GIB, MIB, Frame, LagLimits
from soak.report.latency import latency_tables
from soak.report.markers import Marker, build_markers, legend_items, marker_shapes, marker_trace
from soak.report.outcomes import outcomes
from soak.report.reading import Columns, LatencyWindow, RequestWindow, RunSeries, read_data
from soak.store.models import ALL_SCENARIOS, ERROR_CLASSES
from soak.store.store import Store

LATENCY_CHART_METRICS = ("ttft", "itl", "e2e")

# Where a finding's fitted line is drawn: chart, factor from the fit's unit (bytes, 0–1 fraction, ms, count)
# to the chart's (MiB or GiB, %, ms, count), and y axis. Analysis fits the server tree's total for leaks.
CHECK_TRENDS: dict[str, tuple[str, float, str]] = {
    "leak.rss": ("chart-memory", 1 / MIB, "y"), "leak.vram": ("chart-vram-process", 1 / GIB, "y"),
    "leak.fds": ("chart-fds", 1.0, "y"), "leak.kv": ("chart-kv", 100.0, "y"),
    "errors.rise": ("chart-errors", 100.0, "y2"), "client.saturation": ("chart-lag", 1.0, "y"),
    "goodput.decay": ("chart-goodput", 100.0, "y"),
    **{f"creep.{metric}_p99": (f"chart-{metric}", 1.0, "y") for metric in LATENCY_CHART_METRICS},
}
# A trend may instead name its series explicitly.
TREND_SERIES: dict[str, tuple[str, float, str]] = {
    "rss": ("chart-memory", 1 / MIB, "y"), "pss": ("chart-memory", 1 / MIB, "y"),
    "vram": ("chart-vram-process", 1 / GIB, "y"), "kv": ("chart-kv", 100.0, "y"),
    "kv_usage": ("chart-kv", 100.0, "y"), "fds": ("chart-fds", 1.0, "y"), "lag_p99": ("chart-lag", 1.0, "y"),
    "error_rate": ("chart-errors", 100.0, "y2"), "requests_per_s": ("chart-throughput", 1.0, "y"),
    "tokens_per_s": ("chart-throughput", 1.0, "y2"),
    **{f"{metric}_p{pct}": (f"chart-{metric}", 1.0, "y") for metric in LATENCY_CHART_METRICS for pct in (50, 90, 95, 99)},
}
THROUGHPUT_MEASURES = {"tokens/s": ("chart-throughput", 1.0, "y2"), "requests/s": ("chart-throughput", 1.0, "y")}


def trend_target(finding: SummaryFinding) -> tuple[str, float, str] | None:
    """(chart id, unit factor, y axis) of a finding's fitted line; None without a trend or a chart in its unit."""
    trend, details, check = finding.trend, finding.details or {}, finding.check
    if trend is None:
        return None
    if trend.series in TREND_SERIES:
        return TREND_SERIES[trend.series]
    if check == "throughput.decay":  # fitted to tokens/s or to tokens per offered request, as it says
        return THROUGHPUT_MEASURES.get(details.get("measure"))
    if check == "leak.vram" and details.get("vram_source"):  # a GPU's DCGM framebuffer
        return ("chart-vram-gpu", 1 / GIB, "y")
    if check in CHECK_TRENDS:
        return CHECK_TRENDS[check]
    metric = check.removeprefix("creep.").split("_")[0]
    return (f"chart-{metric}", 1.0, "y") if check.startswith("creep.") and metric in LATENCY_CHART_METRICS else None


def trends_by_chart(findings: list[SummaryFinding], frame: Frame) -> dict[str, list[dict]]:
    """Fitted-line traces of the findings that carry a trend, grouped by the chart they are drawn on."""
    by_chart: dict[str, list[dict]] = {}
    for finding in findings:
        target = trend_target(finding)
        trace = charts.trend_trace(finding, frame, target[1], target[2]) if target else None
        if trace:
            by_chart.setdefault(target[0], []).append(trace)
        chart_of = target or CHECK_TRENDS.get(finding.check)  # a warming finding may have no fit
        if chart_of:  # where the data ended each judged series' warm-up
            by_chart.setdefault(chart_of[0], []).extend(charts.warmup_cut_traces(finding, frame))
    return by_chart


def process_names(columns: Columns) -> dict[int, str]:
    """pid → process name of the server tree (the name of each pid's latest sample)."""
    pids = columns["pid"]
    if len(pids) == 0:
        return {}
    uniques, first_from_end = np.unique(pids[::-1], return_index=True)
    last = len(pids) - 1 - first_from_end
    return {int(pid): str(columns["name"][index]) for pid, index in zip(uniques, last)}


def no_gpu_note(events: list[Event]) -> str:
    """Why the GPU charts are empty, in the telemetry's own words when it recorded a no_gpu event."""
    for event in events:
        if event.kind == "no_gpu":
            return f"No GPU: {event.message or 'none was seen'}."
    return "No GPU: no GPU samples were recorded (no NVIDIA GPU or no NVML on the host)."


def _star_latency(windows: Sequence[LatencyWindow], metric: str) -> list[LatencyWindow]:
    """One metric's latency windows of all scenarios together ("*"), by window index."""
    picked = [window for window in windows if window.scenario == ALL_SCENARIOS and window.metric == metric]
    return sorted(picked, key=lambda window: window.window_index)


def _star_requests(windows: Sequence[RequestWindow]) -> list[RequestWindow]:
    """The request windows of all scenarios together ("*"), by window index."""
    picked = [window for window in windows if window.scenario == ALL_SCENARIOS]
    return sorted(picked, key=lambda window: window.window_index)


def lag_limits(findings: list[SummaryFinding]) -> LagLimits:
    """The lag limits client.saturation recorded with its finding; the gates' defaults for a summary without them."""
    details = next((f.details for f in findings if f.check == "client.saturation"), None) or {}
    default = ClientGate()
    return LagLimits(suspect_ms=float(details.get("lag_p99_suspect_ms", default.lag_p99_suspect_ms)),
                     invalid_ms=float(details.get("lag_p99_invalid_ms", default.lag_p99_invalid_ms)))


def goodput_charts(rows: Sequence[RequestWindow], frame: Frame, trends: list[dict], findings: list[SummaryFinding]
                   ) -> list[dict[str, Any]]:
    """The goodput chart with the floor goodput.floor judged by; for a run without an SLO, the chart's place says
    so (as the GPU charts do without a GPU)."""
    if not any(row.slo_met is not None for row in rows):
        return [charts.chart("chart-goodput", "Goodput per window", "Share of each window's requests that met every "
                             "--slo target.", None, "The run set no SLO (--slo ttft=…,itl=…,e2e=…), so no request "
                             "was judged against one.")]
    details = next((f.details for f in findings if f.check == "goodput.floor"), None) or {}
    slo_ms = details.get("slo_ms") or {}
    return [charts.goodput_chart(rows, frame, trends, slo_text(slo_ms) if slo_ms else "--slo", details.get("floor"))]


def build_charts(data: RunSeries, frame: Frame, trends: dict[str, list[dict]],
                 events: list[Event], lag: LagLimits, findings: list[SummaryFinding]) -> list[dict[str, Any]]:
    """Every chart of the report, in page order."""
    lat, req, gpu_note = data.latency_windows, _star_requests(data.request_windows), no_gpu_note(events)
    trend = lambda chart_id: trends.get(chart_id, [])  # noqa: E731 - a short local lookup
    return [
        charts.memory_chart(data.server_procs, frame, trend("chart-memory")),
        gpu_charts.gpu_memory_chart(data.gpus, frame, gpu_note),
        charts.gpu_process_chart(data.gpu_procs, process_names(data.server_procs), frame,
                                 trend("chart-vram-process"), gpu_note),
        *gpu_charts.health_charts(data.gpus, frame, gpu_note),
        charts.kv_chart(data.server, frame, trend("chart-kv")),
        charts.queue_chart(data.server, frame),
        *(charts.latency_chart(metric, _star_latency(lat, metric), frame, trend(f"chart-{metric}"))
          for metric in LATENCY_CHART_METRICS),
        charts.throughput_chart(req, frame, trend("chart-throughput")),
        charts.errors_chart(req, frame, ERROR_CLASSES, trend("chart-errors")),
        *goodput_charts(req, frame, trend("chart-goodput"), findings),
        charts.fds_chart(data.server_procs, frame, trend("chart-fds")),
        charts.client_chart(data.client_procs, frame),
        charts.lag_chart(_star_latency(lat, "lag"), frame, trend("chart-lag"), lag),
    ]


def make_frame(end_s: float, markers: list[Marker]) -> Frame:
    """The shared x axis (minutes or hours) and event markers of every chart."""
    unit_s, label, short = charts.time_unit(end_s)
    return Frame(time_unit_s=unit_s, time_label=label, end_s=end_s, time_short=short,
                 shapes=marker_shapes(markers, unit_s), marker_trace=marker_trace(markers, unit_s))


def build_context(store: Store, run_id: str, summary: Summary | None,
                  baseline: BaselineComparison | None = None) -> dict[str, Any]:
    """The whole report as a plain dict; with no summary, the one stored with the run is used (read whatever
    schema it was written in), and a run never finalised has none."""
    run = store.get_run(run_id)
    if summary is None:
        summary = stored_summary(run.summary_json, run.id)
    events, data = store.read_events(run_id), read_data(store, run_id)
    last_s = data.last_s()
    duration_s = sections.run_duration_s(run, last_s)
    end_s = max(duration_s or 0.0, last_s, 1.0)
    markers = build_markers(events, run.warmup_s, end_s)
    frame = make_frame(end_s, markers)
    findings = summary.findings if summary else []
    trends = trends_by_chart(findings, frame)
    return {
        "header": sections.header(run, summary, duration_s),
        "gates": sections.gates(findings),
        "forensics": sections.forensics(summary),
        "what_next": sections.what_next(sections.gates(findings)),
        "run_facts": sections.run_facts(run, events, data.request_windows, duration_s),
        "outcomes": outcomes(summary),
        "latency": latency_tables(data.latency_windows),
        "events": timeline.events_table(events),
        "environment": sections.environment(run),
        "charts": build_charts(data, frame, trends, events, lag_limits(findings), findings),
        "marker_legend": legend_items(markers),
        "baseline": sections.baseline_table(baseline),
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "in_progress": bool(summary and summary.in_progress),  # a run still under way: banner says so
    }
