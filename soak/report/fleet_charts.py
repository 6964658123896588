"""The fleet report's small multiples: for each replica, its server tree's memory and its P99 E2E per window, side by
side on shared axes, so the replica that leaks or slows stands out by eye next to its peers.

Read from each replica's stored samples (the same tables its own report reads), downsampled like every chart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from soak.contracts import FleetSummary
from soak.report.charts import MIB, Frame, colour, figure, line, time_unit, tree_total
from soak.report.reading import read_columns
from soak.store.models import LatencyWindowRow, ProcessSample
from soak.store.store import Store

SMALL_HEIGHT = 190
SMALL_POINTS = 600  # a small chart is ~300 px wide: more points than this draws nothing more
ALL_SCENARIOS = "*"


def replica_memory_mib(store: Store, run_id: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The server tree's total RSS (MiB) at each sample of a replica's run (one process: its own), or None
    without process samples."""
    columns = read_columns(store, ProcessSample, run_id, ("t_s", "pid", "rss_bytes"), role="server")
    if not len(columns["t_s"]):
        return None
    if len(np.unique(columns["pid"])) == 1:
        return columns["t_s"], columns["rss_bytes"] / MIB
    total = tree_total(columns["t_s"], columns["rss_bytes"])
    return None if total is None else (total[0], total[1] / MIB)


def replica_e2e_p99_ms(store: Store, run_id: str) -> tuple[np.ndarray, np.ndarray] | None:
    """P99 E2E latency (ms) of each window of a replica's run, at the window's middle; None without requests."""
    columns = read_columns(store, LatencyWindowRow, run_id, ("start_s", "end_s", "p99_ms"), scenario=ALL_SCENARIOS,
                           metric="e2e")
    if not len(columns["start_s"]):
        return None
    order = np.argsort(columns["start_s"])
    middles = (columns["start_s"] + columns["end_s"])[order] / 2
    return middles, columns["p99_ms"][order]


def _small(series: dict[str, tuple[np.ndarray, np.ndarray] | None], frame: Frame, y_title: str,
           prefix: str) -> dict[str, dict[str, Any]]:
    """One small figure per replica with data, every one on the same y range (the largest value of any)."""
    finite = [float(np.nanmax(values)) for _, values in filter(None, series.values()) if np.isfinite(values).any()]
    top = max(finite, default=0.0) * 1.05 or 1.0
    figures = {}
    for index, (name, data) in enumerate(series.items()):
        trace = line(name, *data, frame, line={"color": colour(index), "width": 1.5}) if data else None
        fig = figure([trace], frame, y_title, height=SMALL_HEIGHT, showlegend=False,
                     margin={"l": 56, "r": 12, "t": 8, "b": 40},
                     yaxis={"title": {"text": y_title}, "gridcolor": "#e5e7eb", "range": [0, top]})
        if fig:
            figures[f"{prefix}-{name}"] = fig
    return figures


def fleet_small_multiples(store: Store, summary: FleetSummary) -> dict[str, dict[str, Any]]:
    """Chart id → figure: `fleet-memory-NAME` and `fleet-e2e-NAME` for each replica whose run stored them."""
    runs = {r.name: r.run_id for r in summary.replicas if r.run_id}
    end_s = summary.planned_duration_s or 1.0
    unit_s, label, short = time_unit(end_s)
    frame = Frame(unit_s, label, end_s, short, max_points=SMALL_POINTS)
    memory = {name: replica_memory_mib(store, run_id) for name, run_id in runs.items()}
    e2e = {name: replica_e2e_p99_ms(store, run_id) for name, run_id in runs.items()}
    return {**_small(memory, frame, "server RSS, MiB", "fleet-memory"), **_small(e2e, frame, "P99 E2E, ms",
                                                                                  "fleet-e2e")}
