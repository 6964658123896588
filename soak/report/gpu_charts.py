"""The GPU charts: memory used per GPU, temperature and power, and when each clock-throttle reason was active.

Each GPU is one (source, UUID, index) of `gpu_samples`: NVML's GPUs and every dcgm-exporter page's, named by UUID
where the source gave one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from soak.report.charts import GIB, Frame, chart, colour, figure, hover, line
from soak.report.markers import plotly_text
from soak.report.reading import Columns, group_indices

# Clock-event (throttle) reason bits, as NVML and DCGM share them; "GPU idle" (0x1) is not a slowdown, left out.
THROTTLE_BITS = {
    0x2: "application clocks setting", 0x4: "SW power cap", 0x8: "HW slowdown", 0x10: "sync boost",
    0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake", 0x100: "display clock setting",
}
MAX_SPANS = 400  # per GPU and reason: beyond this a flapping reason is drawn by its first spans only


def gpu_groups(columns: Columns) -> list[tuple[str, np.ndarray]]:
    """(label, row indices) of each GPU: `GPU <UUID>` (or `GPU <index>`), with `(DCGM)` for an exporter's rows."""
    if not len(columns["t_s"]):
        return []
    groups = group_indices(columns["source"], columns["uuid"], columns["gpu_index"])
    return [(_label(source, uuid, gpu), index) for (source, uuid, gpu), index in groups]


def _label(source: object, uuid: object, gpu: float) -> str:  # source, uuid: text or None
    name = f"GPU {uuid}" if uuid else f"GPU {int(gpu)}"
    return f"{name} (DCGM)" if source else name


def gpu_memory_chart(columns: Columns, frame: Frame, no_gpu_note: str) -> dict[str, Any]:
    """Used (solid) and total (dashed) memory of each GPU in GiB (dcgm-exporter: its framebuffer)."""
    traces = []
    for i, (label, index) in enumerate(gpu_groups(columns)):
        t_s = columns["t_s"][index]
        traces.append(line(f"{label} used", t_s, columns["mem_used_bytes"][index], frame, 1 / GIB, 3,
                           line={"color": colour(i), "width": 1.5}))
        traces.append(line(f"{label} total", t_s, columns["mem_total_bytes"][index], frame, 1 / GIB, 3,
                           line={"color": colour(i), "width": 1, "dash": "dash"}))
    return chart("chart-vram-gpu", "VRAM per GPU",
                 "vLLM preallocates its KV cache, so 'used' is flat by design: only growth after warm-up matters.",
                 figure(traces, frame, "GiB"), no_gpu_note)


def gpu_health_chart(columns: Columns, frame: Frame, no_gpu_note: str) -> dict[str, Any]:
    """Temperature (solid, left axis) and power draw (dotted, right axis) of each GPU."""
    traces = []
    for i, (label, index) in enumerate(gpu_groups(columns)):
        t_s = columns["t_s"][index]
        traces.append(line(f"{label} °C", t_s, columns["temp_c"][index], frame, 1.0, 1,
                           line={"color": colour(i), "width": 1.5}))
        traces.append(line(f"{label} W", t_s, columns["power_w"][index], frame, 1.0, 1,
                           line={"color": colour(i), "width": 1, "dash": "dot"}, yaxis="y2"))
    return chart("chart-gpu-health", "GPU temperature and power",
                 "Each GPU's temperature (solid, °C) and power draw (dotted, W), from NVML or dcgm-exporter.",
                 figure(traces, frame, "°C", "W"), no_gpu_note)


def health_charts(columns: Columns, frame: Frame, no_gpu_note: str) -> list[dict[str, Any]]:
    """Temperature and power, and throttle reasons; none on a run without a GPU (the VRAM charts say why)."""
    if not len(columns["t_s"]):
        return []
    return [gpu_health_chart(columns, frame, no_gpu_note), throttle_chart(columns, frame, no_gpu_note)]


def spans(t_s: np.ndarray, active: np.ndarray) -> list[tuple[float, float]]:
    """(start, end) of each run of consecutive samples where `active` holds; a lone sample is a point."""
    edges = np.diff(np.concatenate(([0], active.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    return [(float(t_s[a]), float(t_s[b])) for a, b in zip(starts, ends, strict=True)]


def _reason_trace(label: str, reason: str, found: list[tuple[float, float]], frame: Frame,
                  i: int) -> dict[str, Any]:
    x: list[float | None] = []
    for start, end in found[:MAX_SPANS]:
        x += [round(start / frame.time_unit_s, 5), round(end / frame.time_unit_s, 5), None]
    y = [None if value is None else plotly_text(reason) for value in x]
    return {"type": "scatter", "mode": "lines+markers", "name": plotly_text(f"{label}: {reason}"), "x": x, "y": y,
            "line": {"color": colour(i), "width": 6}, "marker": {"size": 4, "color": colour(i)},
            "hovertemplate": hover(f"{label}: {reason}", frame)}


def throttle_chart(columns: Columns, frame: Frame, no_gpu_note: str) -> dict[str, Any]:
    """When each clock-throttle reason was active on each GPU, one row per reason."""
    traces = []
    for i, (label, index) in enumerate(gpu_groups(columns)):
        t_s, bits = columns["t_s"][index], columns["throttle_reasons"][index]
        known = np.isfinite(bits)
        for bit, reason in THROTTLE_BITS.items():
            active = known & ((np.where(known, bits, 0).astype(np.int64) & bit) > 0)
            if active.any():
                traces.append(_reason_trace(label, reason, spans(t_s, active), frame, i))
    fig = figure(traces, frame, "")
    if fig:  # the reasons name the rows: room for them on the left instead of an axis title
        layout = fig["layout"]
        layout["yaxis"] = {**layout["yaxis"], "type": "category", "rangemode": "normal", "automargin": True}
        layout["margin"] = {**layout["margin"], "l": 170}
    return chart("chart-gpu-throttle", "GPU clock-throttle reasons",
                 "When each reason slowed a GPU's clocks (NVML or dcgm-exporter clock-event reasons; idle left out).",
                 fig, "No GPU was throttled (no clock-event reason but idle)." if len(columns["t_s"]) else no_gpu_note)
