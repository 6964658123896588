"""The history of a release series as text cells (for `soak history`) and as one self-contained HTML page.

The page inlines plotly and its chart data like the run report (soak/report/render.py), so it opens offline.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import soak
from soak.analysis.history import FIGURES, CheckValue, Delta, EnvironmentChange, HistoryRow, status_counts
from soak.report.charts import PALETTE
from soak.report.formatting import MISSING, display_unit, format_utc, format_value, quantity_texts
from soak.report.render import environment, plotly_js, script_json, write_atomically

TEMPLATE = "history.html.j2"
VERDICT_COLOURS = {"PASS": "#15803d", "FAIL": "#b91c1c", "SUSPECT": "#b45309", "INCONCLUSIVE": "#6b7280",
                   "INVALID": "#7c3aed"}
FIGURE_TITLES = {key: title for key, title, _ in FIGURES}
FIGURE_UNITS = {key: unit for key, _, unit in FIGURES}


def quantity_text(value: Any, unit: str | None) -> str:
    """A value in its human unit: `48.5 ms`, `0.12 %`, `3.2 MiB/h`."""
    return quantity_texts(value, unit)["value"]


def delta_text(delta: Delta | None) -> str:
    """`+3.2 % regressed`, `−0.1 pp`, or "" without a delta."""
    if delta is None:
        return ""
    if delta.unit == "fraction":
        change = f"{100 * delta.delta:+.2f} pp"
    elif delta.delta_pct is not None:
        change = f"{delta.delta_pct:+.1f} %"
    else:
        change = f"{delta.delta:+.4g} {delta.unit or ''}".strip()
    return f"{change} {delta.status}" if delta.status else change


def check_text(entry: CheckValue | None) -> str:
    """`PASS 0 % of KV cache`, or "—" for a run without that finding."""
    if entry is None:
        return MISSING
    value = quantity_text(entry.value, entry.unit) if entry.value is not None else ""
    return f"{entry.verdict} {value}".strip()


def change_text(change: EnvironmentChange) -> str:
    """`vLLM 0.6.1 → 0.6.2`."""
    before = MISSING if change.before is None else format_value(change.before)
    after = MISSING if change.after is None else format_value(change.after)
    return f"{change.title} {before} → {after}"


def columns(rows: list[HistoryRow]) -> list[str]:
    """Column titles: run, started, verdict, labels, each chosen check, each figure."""
    checks = list(rows[0].checks) if rows else []
    return ["run", "started (UTC)", "verdict", "labels", *checks, *(title for _, title, _ in FIGURES)]


def cells(row: HistoryRow) -> list[dict[str, str]]:
    """One row's cells, each {"text", "delta", "status"} in the order of `columns`."""
    labels = "\n".join(f"{key}={value}" for key, value in row.run.labels.items())  # one a line in a terminal
    out = [{"text": row.run.run_id}, {"text": format_utc(row.run.started_at).removesuffix(" UTC")},
           {"text": row.verdict or row.run.status}, {"text": labels}]
    out += [{"text": check_text(entry), "delta": delta_text(row.deltas.get(check))}
            for check, entry in row.checks.items()]
    out += [{"text": quantity_text(row.figures[key], FIGURE_UNITS[key]), "delta": delta_text(row.deltas.get(key)),
             "status": _status(row.deltas.get(key))} for key, _, _ in FIGURES]
    return [{"delta": "", "status": "", **cell} for cell in out]


def _status(delta: Delta | None) -> str:
    return (delta.status or "") if delta is not None else ""


def series_chart(chart_id: str, title: str, unit: str | None, rows: list[HistoryRow],
                 values: list[Any]) -> dict[str, Any]:
    """One figure across the runs: a line through them, each point coloured by the run's verdict."""
    points = [(row, value) for row, value in zip(rows, values) if isinstance(value, (int, float))]
    if not points:
        return {"id": chart_id, "title": title, "figure": None}
    magnitude = max(abs(value) for _, value in points)
    factor, label = display_unit(unit, magnitude)
    trace = {"type": "scatter", "mode": "lines+markers", "name": title,
             "x": [row.run.run_id for row, _ in points], "y": [value * factor for _, value in points],
             "text": [_point_text(row) for row, _ in points],
             "hovertemplate": "%{x}<br>%{y:,.4~g} " + label + " (%{text})<extra></extra>",
             "line": {"color": PALETTE[0]},
             "marker": {"size": 10, "color": [VERDICT_COLOURS.get(row.verdict or "", "#6b7280") for row, _ in points]}}
    layout = {"height": 280, "margin": {"l": 64, "r": 24, "t": 16, "b": 90}, "showlegend": False,
              "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
              "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
              "xaxis": {"type": "category", "tickangle": -20, "automargin": True, "gridcolor": "#e5e7eb"},
              "yaxis": {"title": {"text": label}, "gridcolor": "#e5e7eb", "rangemode": "tozero"}}
    return {"id": chart_id, "title": title, "figure": {"data": [trace], "layout": layout}}


def _point_text(row: HistoryRow) -> str:
    """A point's hover line after its value: the run's verdict and labels."""
    labels = " ".join(f"{key}={value}" for key, value in row.run.labels.items())
    return f"{row.verdict or row.run.status} {labels}".strip()


def history_charts(rows: list[HistoryRow]) -> list[dict[str, Any]]:
    """A chart per chosen check's value and per figure, across the runs."""
    charts = []
    for index, check in enumerate(rows[0].checks if rows else []):
        entries = [row.checks.get(check) for row in rows]
        unit = next((entry.unit for entry in entries if entry and entry.unit), None)
        charts.append(series_chart(f"history-check-{index}", check, unit, rows,
                                   [entry.value if entry else None for entry in entries]))
    for index, (key, title, unit) in enumerate(FIGURES):
        charts.append(series_chart(f"history-figure-{index}", title, unit, rows, [row.figures[key] for row in rows]))
    return charts


def history_context(rows: list[HistoryRow], filters: dict[str, str]) -> dict[str, Any]:
    """Everything the history page shows."""
    charts = history_charts(rows)
    return {
        "title": "soak history" + ("".join(f" · {key}={value}" for key, value in filters.items())),
        "columns": columns(rows), "rows": [{"cells": cells(row), "verdict": row.verdict or "",
                                             "run_id": row.run.run_id} for row in rows],
        "changes": [{"run_id": row.run.run_id, "previous": row.previous,
                     "lines": [change_text(change) for change in row.environment_changes]}
                    for row in rows if row.environment_changes],
        "verdict_changes": [{"run_id": row.run.run_id, "previous": row.previous,
                             "changes": [change.as_dict() for change in row.verdict_changes]}
                            for row in rows if row.verdict_changes],
        "counts": status_counts(rows), "charts": [chart for chart in charts if chart["figure"]],
        "no_chart": [chart["title"] for chart in charts if not chart["figure"]],
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }


def render_history(rows: list[HistoryRow], filters: dict[str, str], out_path: Path) -> Path:
    """Write the self-contained history page to `out_path` and return that path."""
    context = history_context(rows, filters)
    chart_data = {chart["id"]: chart["figure"] for chart in context["charts"] if chart["figure"]}
    html = environment().get_template(TEMPLATE).render(
        **context, chart_json=script_json(chart_data), plotly_js=plotly_js(), soak_version=soak.__version__)
    return write_atomically(html, Path(out_path))
