"""Chart specs of the report as plain plotly figure dicts (data + layout), built from column arrays and rows.

Figures are plain dicts rather than `plotly.graph_objects` (whose validation would cost seconds on a 72 h run);
the page's script hands them to `Plotly.newPlot`. Every series goes through the min/max envelope first.
Each chart is {"id", "title", "description", "figure" or None, "empty" (why there is no figure), "notes"}.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from soak.contracts import SummaryFinding, SummaryTrend
from soak.report.downsample import MAX_POINTS, chart_series
from soak.report.latency import METRIC_LABELS, window_percentile_ms
from soak.report.markers import MARKER_AXIS, MARKER_AXIS_KEY, STYLES, marker_axis_layout, plotly_text
from soak.report.reading import Columns, LatencyWindow, RequestWindow, group_indices

MIB = 2**20
GIB = 2**30  # VRAM is tens of GiB: MiB ticks would read "120k"
MAX_PROCESS_TRACES = 12  # more lines than this is unreadable; the rest are named in a note
PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d", "#4d7c0f",
           "#9333ea", "#0f766e", "#b45309", "#1d4ed8")
ERROR_COLOURS = {"connect": "#7c3aed", "timeout": "#d97706", "http_4xx": "#0891b2", "http_5xx": "#dc2626",
                 "bad_stream": "#be185d", "invalid_output": "#4d7c0f"}


@dataclass(frozen=True)
class LagLimits:
    """The schedule-lag P99 limits (ms) client.saturation judged the run by: SUSPECT above one, INVALID above the other."""

    suspect_ms: float
    invalid_ms: float


@dataclass(frozen=True)
class Frame:
    """What every time chart shares: the x unit, the run's time span, event markers, the point budget."""

    time_unit_s: float
    time_label: str
    end_s: float
    time_short: str = "h"
    shapes: list[dict[str, Any]] = field(default_factory=list)
    marker_trace: dict[str, Any] | None = None
    max_points: int = MAX_POINTS


def time_unit(end_s: float) -> tuple[float, str, str]:
    """Minutes for runs under 2 h, hours beyond: the x axis then reads in round numbers. (seconds, label, short)"""
    return (60.0, "minutes since start", "min") if end_s < 2 * 3600 else (3600.0, "hours since start", "h")


def hover(name: str, frame: Frame) -> str:
    """Hover text of a trace: value, time since start, and the (escaped) series name."""
    return "%{y:,.4~g} at %{x:.3~f} " + frame.time_short + "<extra>" + plotly_text(name) + "</extra>"


def _plain_list(values: np.ndarray, decimals: int) -> list[float | None]:
    """Rounded floats for JSON, NaN as null (JSON has no NaN, and null breaks a plotly line)."""
    rounded = np.round(np.asarray(values, dtype=float), decimals)
    return [x if math.isfinite(x) else None for x in rounded.tolist()]


def line(name: str, t_s: np.ndarray, values: np.ndarray, frame: Frame, scale: float = 1.0,
         decimals: int = 3, **style: Any) -> dict[str, Any] | None:
    """A downsampled line trace of (t_s, values × scale), or None when nothing finite is left."""
    t_s, values = chart_series(t_s, values, frame.max_points)
    if len(t_s) == 0:
        return None
    return {
        "type": "scatter", "mode": "lines", "name": plotly_text(name),
        "x": _plain_list(t_s / frame.time_unit_s, 5), "y": _plain_list(values * scale, decimals),
        "hovertemplate": hover(name, frame), **style,
    }


def figure(traces: list[dict[str, Any] | None], frame: Frame, y_title: str,
           y2_title: str | None = None, **layout_extra: Any) -> dict[str, Any] | None:
    """A figure of the non-empty traces plus the event markers, or None when no trace has data."""
    data = [trace for trace in traces if trace]
    if not data:
        return None
    layout = {
        "height": 330, "margin": {"l": 64, "r": 64 if y2_title else 24, "t": 16, "b": 44},
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff", "hovermode": "closest",
        "xaxis": {"title": {"text": frame.time_label}, "range": [0, round(frame.end_s / frame.time_unit_s, 5)],
                  "gridcolor": "#e5e7eb", "zeroline": False},
        "yaxis": {"title": {"text": y_title}, "gridcolor": "#e5e7eb", "rangemode": "tozero"},
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"},
        "shapes": list(frame.shapes), MARKER_AXIS_KEY: marker_axis_layout(),
        **layout_extra,
    }
    if y2_title:
        layout["yaxis2"] = {"title": {"text": y2_title}, "overlaying": "y", "side": "right",
                            "rangemode": "tozero", "showgrid": False}
    if frame.marker_trace:
        data.append(frame.marker_trace)
    return {"data": data, "layout": layout}


def chart(chart_id: str, title: str, description: str, fig: dict[str, Any] | None, empty: str,
          notes: list[str] | None = None) -> dict[str, Any]:
    """One chart entry of the report; `empty` is shown instead of a frame when there is no figure."""
    return {"id": chart_id, "title": title, "description": description, "figure": fig,
            "empty": None if fig else empty, "notes": notes or []}


def with_trends(traces: list[dict[str, Any] | None], trends: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """The data traces plus the fitted lines, or nothing when there is no data (a fit alone is not a chart)."""
    return traces + trends if any(traces) else []


def colour(index: int) -> str:
    """The palette colour of the index-th series."""
    return PALETTE[index % len(PALETTE)]


# ---- trends of findings -------------------------------------------------------------------------------

def _trend_span_s(trend: SummaryTrend, details: dict[str, Any] | None, frame: Frame) -> tuple[float, float]:
    """Where the fitted line is drawn: from its t0 over the span the fit covered when the details say
    (`span_s`), else to the end."""
    start_s = float(trend.t0_s)
    span_s = (details or {}).get("span_s")
    return start_s, float(start_s + span_s if isinstance(span_s, (int, float)) else frame.end_s)


def trend_trace(finding: SummaryFinding, frame: Frame, scale: float, yaxis: str = "y") -> dict[str, Any] | None:
    """The fitted line of a finding: intercept + slope·(t − t0), exponentiated in log space, × scale."""
    trend = finding.trend
    if trend is None:
        return None
    slope, intercept = trend.slope_per_s, trend.intercept
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (slope, intercept)):
        return None
    start_s, end_s = _trend_span_s(trend, finding.details, frame)
    log_space = trend.space == "log"
    t_s = np.linspace(start_s, end_s, 80 if log_space else 2)
    values = intercept + slope * (t_s - float(trend.t0_s))
    values = np.exp(values) if log_space else values
    name = f"fit: {finding.check}"
    if finding.percentile_used:
        name += f" ({finding.percentile_used})"
    return {
        "type": "scatter", "mode": "lines", "name": plotly_text(name), "yaxis": yaxis,
        "x": _plain_list(t_s / frame.time_unit_s, 5), "y": _plain_list(values * scale, 4),
        "line": {"color": "#111827", "dash": "dash", "width": 2},
        "hovertemplate": hover(name, frame),
    }


def warmup_cut_traces(finding: SummaryFinding, frame: Frame) -> list[dict[str, Any]]:
    """A full-height line where the data, not the configured warm-up, ended a judged series' warm-up
    (`details.warmup`: one cut, or one per series label), named in the legend."""
    cuts = (finding.details or {}).get("warmup") or {}
    if "method" in cuts:  # one series (the KV floor)
        cuts = {"floor": cuts}
    traces = []
    for label, cut in cuts.items():
        if not isinstance(cut, dict) or cut.get("method") != "mser-5" or not isinstance(cut.get("t_s"), (int, float)):
            continue
        state = "still settling" if cut.get("still_settling") else "warm-up end"
        name = f"{state} (from the data): {label}"
        x = round(float(cut["t_s"]) / frame.time_unit_s, 5)
        traces.append({"type": "scatter", "mode": "lines", "name": plotly_text(name), "yaxis": MARKER_AXIS,
                       "x": [x, x], "y": [0, 1],
                       "hovertemplate": f"at %{{x:.3~f}} {frame.time_short}<extra>{plotly_text(name)}</extra>",
                       "line": {"color": STYLES["warmup"]["color"], "dash": "longdash", "width": 1.5}})
    return traces


# ---- process memory and fds ---------------------------------------------------------------------------

def _process_groups(columns: Columns, value_key: str) -> tuple[list[tuple[tuple, np.ndarray]], list[str]]:
    """(pid, name) groups with data, the largest first, capped; and a note naming the ones left out."""
    groups = group_indices(columns["pid"], columns["name"])
    peak = {key: np.nanmax(columns[value_key][index], initial=-np.inf) for key, index in groups}
    groups = sorted(groups, key=lambda group: -peak[group[0]])
    notes = []
    if len(groups) > MAX_PROCESS_TRACES:
        left_out = ", ".join(f"{name} ({int(pid)})" for (pid, name), _ in groups[MAX_PROCESS_TRACES:])
        notes.append(f"{len(groups) - MAX_PROCESS_TRACES} smaller processes not drawn: {left_out}")
    return groups[:MAX_PROCESS_TRACES], notes


def tree_total(t_s: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The sum over processes at each sample time, when the processes share sample times (one sweep, one t_s)."""
    keep = np.isfinite(values)
    times, inverse = np.unique(t_s[keep], return_inverse=True)
    if len(times) == 0 or len(times) > 0.75 * keep.sum():
        return None  # times not shared: a sum per timestamp would not be a tree total
    return times, np.bincount(inverse, weights=values[keep])


def memory_chart(columns: Columns, frame: Frame, trends: list[dict[str, Any]]) -> dict[str, Any]:
    """RSS (solid), PSS (dotted) and, where any was found, swap (dashed) per server process in MiB, the tree's
    total (resident + swapped where swap was found: what `leak.rss` judges), and leak fits."""
    groups, notes = _process_groups(columns, "rss_bytes")
    swap = columns.get("swap_bytes")
    swapped = swap is not None and bool(np.nanmax(swap, initial=0.0) > 0)
    traces = []
    for i, ((pid, name), index) in enumerate(groups):
        label, group = f"{name} ({int(pid)})", {"legendgroup": f"p{int(pid)}"}
        t_s = columns["t_s"][index]
        traces.append(line(f"{label} RSS", t_s, columns["rss_bytes"][index], frame, 1 / MIB, 2,
                           line={"color": colour(i), "width": 1.5}, **group))
        traces.append(line(f"{label} PSS", t_s, columns["pss_bytes"][index], frame, 1 / MIB, 2,
                           line={"color": colour(i), "width": 1, "dash": "dot"}, **group))
        if swapped:
            traces.append(line(f"{label} swap", t_s, swap[index], frame, 1 / MIB, 2,
                               line={"color": colour(i), "width": 1, "dash": "dash"}, **group))
    if swapped:
        traces.append(_held_line(columns, groups, frame))
    elif len(groups) > 1:
        traces.append(total_line("server tree total RSS", columns["t_s"], columns["rss_bytes"], frame, 1 / MIB))
    explain = "Resident (RSS, solid) and proportional (PSS, dotted) memory of each process of the server tree"
    if swapped:
        explain += ", and its memory in swap (dashed): a leak that is never read again leaves RSS for swap"
    return chart("chart-memory", "Memory per server process", explain + ".",
                 figure(with_trends(traces, trends), frame, "MiB"), "No server process memory was sampled.", notes)


def _held_line(columns: Columns, groups: list[tuple[tuple, np.ndarray]], frame: Frame) -> dict[str, Any] | None:
    """Resident + swapped memory, what `leak.rss` judges where swap was found: the tree's total, or the one
    process's own, as the thin black line its fit is drawn against."""
    held = columns["rss_bytes"] + np.nan_to_num(columns["swap_bytes"])
    if len(groups) > 1:
        return total_line("server tree total resident + swapped", columns["t_s"], held, frame, 1 / MIB)
    (pid, name), index = groups[0]
    return line(f"{name} ({int(pid)}) resident + swapped", columns["t_s"][index], held[index], frame, 1 / MIB, 2,
                line={"color": "#111827", "width": 1})


def total_line(name: str, t_s: np.ndarray, values: np.ndarray, frame: Frame, scale: float = 1.0,
               decimals: int = 2) -> dict[str, Any] | None:
    """The server tree's total as a thin black line (what a leak finding's fit is drawn against)."""
    total = tree_total(t_s, values)
    return line(name, *total, frame, scale, decimals, line={"color": "#111827", "width": 1}) if total else None


def fds_chart(columns: Columns, frame: Frame, trends: list[dict[str, Any]]) -> dict[str, Any]:
    """Open file descriptors per server process, and their total over the tree."""
    groups, notes = _process_groups(columns, "fds")
    traces = [line(f"{name} ({int(pid)})", columns["t_s"][index], columns["fds"][index], frame, decimals=0,
                   line={"color": colour(i), "width": 1.5}) for i, ((pid, name), index) in enumerate(groups)]
    if len(groups) > 1:
        traces.append(total_line("server tree total", columns["t_s"], columns["fds"], frame, decimals=0))
    return chart("chart-fds", "Open file descriptors per server process",
                 "A count that only grows points at a descriptor leak (fd exhaustion ends in failed requests).",
                 figure(with_trends(traces, trends), frame, "open fds"), "No file-descriptor counts were sampled.", notes)


# ---- GPU ----------------------------------------------------------------------------------------------

def gpu_process_chart(columns: Columns, names: dict[int, str], frame: Frame,
                      trends: list[dict[str, Any]], no_gpu_note: str) -> dict[str, Any]:
    """VRAM held by each server process on each GPU, in MiB, with leak fits."""
    traces, groups = [], group_indices(columns["gpu_index"], columns["pid"])
    for i, ((gpu, pid), index) in enumerate(groups):
        label = f"{names.get(int(pid), 'pid')} ({int(pid)}) on GPU {int(gpu)}"
        traces.append(line(label, columns["t_s"][index], columns["used_bytes"][index], frame, 1 / GIB, 3,
                           line={"color": colour(i), "width": 1.5}))
    if len(groups) > 1:
        traces.append(total_line("server tree total", columns["t_s"], columns["used_bytes"], frame, 1 / GIB, 3))
    return chart("chart-vram-process", "VRAM per server process",
                 "GPU memory held by each process of the server tree (NVML compute processes).",
                 figure(with_trends(traces, trends), frame, "GiB"), no_gpu_note)


# ---- server gauges ------------------------------------------------------------------------------------

def _per_source(columns: Columns, key: str, frame: Frame, label: str, scale: float = 1.0,
                dash: str = "solid", offset: int = 0) -> list[dict[str, Any] | None]:
    """One trace of `key` per scrape source (a single source keeps the plain label)."""
    groups = group_indices(columns["source"])
    traces = []
    for i, ((source,), index) in enumerate(groups):
        name = label if len(groups) == 1 else f"{label} ({source})"
        traces.append(line(name, columns["t_s"][index], columns[key][index], frame, scale, 2,
                           line={"color": colour(i + offset), "width": 1.5, "dash": dash}))
    return traces


def kv_chart(columns: Columns, frame: Frame, trends: list[dict[str, Any]]) -> dict[str, Any]:
    """KV-cache usage in % of its capacity."""
    traces = _per_source(columns, "kv_usage", frame, "KV cache usage", 100.0)
    return chart("chart-kv", "KV-cache usage",
                 "Share of KV-cache blocks in use; after an idle probe drains the server it must be back at ≈ 0 %.",
                 figure(with_trends(traces, trends), frame, "% of KV cache"),
                 "The server exposed no KV-cache usage gauge.")


def queue_chart(columns: Columns, frame: Frame) -> dict[str, Any]:
    """Running and waiting requests as the server reports them."""
    traces = _per_source(columns, "running", frame, "running") + _per_source(
        columns, "waiting", frame, "waiting", dash="dot", offset=1)
    return chart("chart-queue", "Running and waiting requests",
                 "Requests the server reports as running or queued; running > 0 with no tokens generated is a hang.",
                 figure(traces, frame, "requests"), "The server exposed no running/waiting gauges.")


# ---- windows: latency, throughput, errors, client -----------------------------------------------------

def midpoints_s(rows: Sequence[LatencyWindow | RequestWindow]) -> np.ndarray:
    """The middle of each window, in seconds since the start."""
    return np.array([(row.start_s + row.end_s) / 2 for row in rows], dtype=float)


def latency_chart(metric: str, rows: Sequence[LatencyWindow], frame: Frame,
                  trends: list[dict[str, Any]]) -> dict[str, Any]:
    """Windowed P50, P95 and P99 of one latency metric (all scenarios), at window midpoints, with creep fits."""
    label = METRIC_LABELS.get(metric, metric)
    t_s = midpoints_s(rows)
    traces = [
        line(f"{label} P{pct}", t_s, np.array([window_percentile_ms(r, pct) for r in rows], dtype=float), frame,
             decimals=3, mode="lines+markers", marker={"size": 4}, line={"color": colour(i), "width": 1.5})
        for i, pct in enumerate((50, 95, 99))
    ]
    return chart(f"chart-{metric}", f"{label} per window",
                 f"P50, P95 and P99 of {label} in each window over all scenarios (P99 of a small window is noisy).",
                 figure(with_trends(traces, trends), frame, "ms"),
                 f"No {label} was measured.")


def _window_lengths_s(rows: Sequence[RequestWindow]) -> np.ndarray:
    return np.array([max(row.end_s - row.start_s, 1e-9) for row in rows], dtype=float)


def throughput_chart(rows: Sequence[RequestWindow], frame: Frame, trends: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests/s (left axis) and output tokens/s (right axis) per window."""
    t_s, length_s = midpoints_s(rows), _window_lengths_s(rows)
    requests = np.array([row.requests for row in rows], dtype=float) / length_s
    tokens = np.array([row.output_tokens for row in rows], dtype=float) / length_s
    traces = [
        line("requests/s", t_s, requests, frame, decimals=3, mode="lines+markers", marker={"size": 4},
             line={"color": colour(0), "width": 1.5}),
        line("output tokens/s", t_s, tokens, frame, decimals=1, mode="lines+markers", marker={"size": 4},
             yaxis="y2", line={"color": colour(3), "width": 1.5}),
    ]
    return chart("chart-throughput", "Throughput per window", "Requests sent and output tokens received per second.",
                 figure(with_trends(traces, trends), frame, "requests/s", "output tokens/s"),
                 "No request windows were recorded.")


def _error_traces(rows: Sequence[RequestWindow], frame: Frame, classes: tuple[str, ...]) -> list[dict[str, Any] | None]:
    """Stacked bars per error class when the windows fit the point budget, else enveloped lines."""
    t_s, width_s = midpoints_s(rows), _window_lengths_s(rows)
    as_bars = len(rows) <= frame.max_points // 2
    traces = []
    for name in classes:
        counts = np.array([row.errors_of(name) for row in rows], dtype=float)
        if not counts.any():
            continue
        if as_bars:
            traces.append({"type": "bar", "name": name, "x": _plain_list(t_s / frame.time_unit_s, 5),
                           "y": counts.astype(int).tolist(), "width": _plain_list(width_s / frame.time_unit_s, 5),
                           "marker": {"color": ERROR_COLOURS.get(name, "#6b7280")}})
        else:
            traces.append(line(name, t_s, counts, frame, decimals=0, line={"color": ERROR_COLOURS.get(name)}))
    return traces


def _error_rate_line(rows: Sequence[RequestWindow], frame: Frame, classes: tuple[str, ...]) -> dict[str, Any] | None:
    """The error rate of each window in % (right axis): what the errors.rise trend is fitted to."""
    requests = np.array([row.requests for row in rows], dtype=float)
    errors = np.array([sum(row.errors_of(name) for name in classes) for row in rows], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(requests > 0, errors / requests, np.nan)
    return line("error rate", midpoints_s(rows), rate, frame, 100.0, 4, yaxis="y2",
                line={"color": "#111827", "width": 1}, mode="lines+markers", marker={"size": 3})


def errors_chart(rows: Sequence[RequestWindow], frame: Frame, classes: tuple[str, ...],
                 trends: list[dict[str, Any]]) -> dict[str, Any]:
    """Errors per window by class (stacked) and the window error rate; says so when there were none at all."""
    traces = _error_traces(rows, frame, classes)
    empty = f"No errors in any of the {len(rows)} windows." if rows else "No request windows were recorded."
    if traces:
        traces.append(_error_rate_line(rows, frame, classes))
    return chart("chart-errors", "Errors per window by class",
                 "Failed requests in each window (connect, timeout, HTTP 4xx, HTTP 5xx, broken streams), "
                 "stacked; the line is the window's error rate.",
                 figure(with_trends(traces, trends), frame, "errors per window", "error rate %", barmode="stack",
                        bargap=0), empty)


def goodput_shares(rows: Sequence[RequestWindow]) -> np.ndarray:
    """Each window's share of finished requests (cancelled ones left out) that met every --slo target; nan when
    it had none."""
    finished = np.array([row.requests - row.cancelled for row in rows], dtype=float)
    good = np.array([row.slo_met for row in rows], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(finished > 0, good / finished, np.nan)


def goodput_chart(rows: Sequence[RequestWindow], frame: Frame, trends: list[dict[str, Any]], slo_text: str,
                  floor: float | None) -> dict[str, Any]:
    """The share of requests meeting the SLO per window in %, the floor goodput.floor holds windows to (red
    dashes) and goodput.decay's fit."""
    rows = [row for row in rows if row.slo_met is not None]
    trace = line("requests meeting the SLO", midpoints_s(rows), goodput_shares(rows), frame, 100.0, 2,
                 mode="lines+markers", marker={"size": 4}, line={"color": colour(2), "width": 1.5})
    fig = figure(with_trends([trace], trends), frame, "% of requests")
    if fig and floor is not None:
        fig["layout"]["shapes"] += [_hline(100.0 * floor, "#dc2626")]
    floor_text = f"; red dashes: the {100 * floor:g} % floor" if floor is not None else ""
    return chart("chart-goodput", "Goodput per window",
                 f"Share of each window's finished requests that met every target ({slo_text}); failed requests "
                 f"count as missed{floor_text}.", fig, "No window counted requests against the SLO.")


def client_chart(columns: Columns, frame: Frame) -> dict[str, Any]:
    """soak's own CPU % (left) and RSS in MiB (right), per client process."""
    traces = []
    for i, ((pid,), index) in enumerate(group_indices(columns["pid"])):
        t_s, label = columns["t_s"][index], f"soak ({int(pid)})"
        traces.append(line(f"{label} CPU", t_s, columns["cpu_percent"][index], frame, decimals=1,
                           line={"color": colour(2 * i), "width": 1.5}))
        traces.append(line(f"{label} RSS", t_s, columns["rss_bytes"][index], frame, 1 / MIB, 1, yaxis="y2",
                           line={"color": colour(2 * i + 1), "width": 1.5, "dash": "dot"}))
    return chart("chart-client", "soak's own CPU and memory",
                 "The load generator itself: if it runs out of CPU its sends are late and latency is not the server's.",
                 figure(traces, frame, "CPU %", "RSS MiB"), "soak did not sample its own process.")


def _hline(y: float, colour_hex: str) -> dict[str, Any]:
    return {"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y, "y1": y,
            "line": {"color": colour_hex, "dash": "dash", "width": 1}}


def lag_chart(rows: Sequence[LatencyWindow], frame: Frame, trends: list[dict[str, Any]], limits: LagLimits
              ) -> dict[str, Any]:
    """Schedule lag P99 per window (sent − intended), with the run's client.saturation limits."""
    t_s = midpoints_s(rows)
    p99 = np.array([window_percentile_ms(row, 99) for row in rows], dtype=float)
    trace = line("schedule lag P99", t_s, p99, frame, decimals=3, mode="lines+markers", marker={"size": 4},
                 line={"color": colour(0), "width": 1.5})
    fig = figure(with_trends([trace], trends), frame, "ms")
    peak_ms = np.nanmax(p99, initial=0.0) if len(p99) else 0.0
    if fig:  # a limit line far above the data would squash it flat, so draw only the limits it comes near
        fig["layout"]["shapes"] += [_hline(limit_ms, hexcolour) for limit_ms, hexcolour in
                                    ((limits.suspect_ms, "#d97706"), (limits.invalid_ms, "#dc2626"))
                                    if peak_ms >= limit_ms / 2]
    return chart("chart-lag", "Schedule lag P99 per window",
                 "How late soak sent requests against their planned times; "
                 f"above {limits.suspect_ms:g} ms (amber) the client is suspect, "
                 f"above {limits.invalid_ms:g} ms (red) the run is invalid.",
                 fig, "No schedule lag was recorded.")
