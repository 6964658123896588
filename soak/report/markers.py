"""Run events as chart markers: warm-up end, phase changes, idle probes, outages of the server or of the network to
it, crashes, restarts, error bursts, GPU XIDs, LoRA
adapter loads (one per churn cycle; the unload just before it is not drawn) and refused loads or unloads.

Every chart gets the same vertical lines (plotly shapes) and, on top, one hover-only trace that names each one,
so a step in a memory chart can be matched to the restart or probe that caused it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from soak.contracts import Event

# Each marker class: its colour, line dash, and the words used in the legend under the charts.
STYLES: dict[str, dict[str, str]] = {
    "warmup": {"color": "#6b7280", "dash": "dash", "label": "warm-up end"},
    "phase": {"color": "#2563eb", "dash": "dot", "label": "phase change"},
    "probe": {"color": "#059669", "dash": "solid", "label": "idle probe"},
    "probe_timeout": {"color": "#b91c1c", "dash": "dashdot", "label": "probe drain timeout"},
    "outage": {"color": "#dc2626", "dash": "solid", "label": "server outage"},
    "network": {"color": "#0d9488", "dash": "dash", "label": "network outage (server out of reach; left out)"},
    "storage": {"color": "#a16207", "dash": "dot", "label": "storage outage (rows held in memory; nothing left out)"},
    "forensics": {"color": "#9333ea", "dash": "dash", "label": "forensics window (left out of the checks)"},
    "server_start": {"color": "#16a34a", "dash": "dot", "label": "server start"},
    "crash": {"color": "#dc2626", "dash": "solid", "label": "crash"},
    "restart": {"color": "#ea580c", "dash": "solid", "label": "restart"},
    "burst": {"color": "#db2777", "dash": "dot", "label": "error burst"},
    "worker_lost": {"color": "#7c3aed", "dash": "dashdot", "label": "load worker lost"},
    "lora": {"color": "#0891b2", "dash": "dot", "label": "LoRA adapter load"},
    "lora_error": {"color": "#b45309", "dash": "dashdot", "label": "LoRA load/unload refused"},
    "xid": {"color": "#7f1d1d", "dash": "solid", "label": "GPU XID"},
}
PROBE_FILL_OPACITY = 0.10
# Beyond this many markers a chart is a wall of lines (and slow): the least telling classes go first.
MAX_MARKERS = 300
DROP_ORDER = ("burst", "lora", "server_start", "probe", "probe_timeout", "phase", "worker_lost", "restart", "outage",
              "storage", "network", "crash", "lora_error", "xid", "forensics", "warmup")


def event_class(kind: str) -> str:
    """The class of an event kind, used for its colour in the events table and its marker on charts."""
    kind = (kind or "").lower()
    if kind.startswith("storage_outage"):
        return "storage"
    if kind == "worker_lost":
        return "worker_lost"
    if kind == "gpu_xid":
        return "xid"
    if kind.startswith("forensics"):
        return "forensics"
    if kind in ("lora_load", "lora_error"):
        return "lora" if kind == "lora_load" else "lora_error"
    if kind == "probe_drain_timeout":
        return "probe_timeout"
    if kind.startswith("probe"):
        return "probe"
    if kind.startswith("outage"):
        return "outage"
    if kind.startswith("network_outage"):
        return "network"
    if kind.startswith("phase"):
        return "phase"
    if kind.startswith("warmup"):
        return "warmup"
    if "restart" in kind:
        return "restart"
    if any(word in kind for word in ("crash", "died", "death", "exit", "dead")):
        return "crash"
    if "burst" in kind:
        return "burst"
    if "server" in kind and ("start" in kind or "ready" in kind):
        return "server_start"
    return "other"


@dataclass(frozen=True)
class Marker:
    """One marker of the charts: a line at `t_s`, or a band to `end_s` (an idle probe or an outage), of one of the
    classes in `STYLES`, named by `label` in its hover text."""

    marker_class: str
    t_s: float
    end_s: float | None
    label: str


def _line(t_s: float, marker_class: str, label: str) -> Marker:
    return Marker(marker_class, t_s, None, label)


def _event_label(event: Event) -> str:
    message = event.message or ""
    return f"{event.kind}: {message}" if message else str(event.kind)


SPAN_KINDS = {"probe": ("probe_start", "probe_end", "idle probe"),
              "outage": ("outage_start", "outage_end", "server outage"),
              "forensics": ("forensics_start", "forensics_end", "forensics window"),
              "storage": ("storage_outage_start", "storage_outage_end", "storage outage"),
              "network": ("network_outage_start", "network_outage_end", "network outage")}


def spans(events: list[Event], span_class: str, end_s: float) -> list[Marker]:
    """Probes, outages or forensics windows as (start, end) spans: each start paired with the next end (or the run's end)."""
    start_kind, end_kind, label = SPAN_KINDS[span_class]
    found, opened = [], None
    for event in events:
        if event.kind == start_kind and opened is None:
            opened = event
        elif event.kind == end_kind and opened is not None:
            found.append(Marker(span_class, _span_start(opened), event.t_s, label))
            opened = None
    if opened is not None:
        found.append(Marker(span_class, _span_start(opened), end_s, f"{label} (no end)"))
    return found


def _span_start(event: Event) -> float:
    """Where a span began: a network outage says (`since_s`, the last /health that answered), as the analysis reads it."""
    return min(event.t_s, float(event.data.get("since_s", event.t_s)))


def build_markers(events: list[Event], warmup_s: float | None, end_s: float) -> list[Marker]:
    """The markers of a run, in time order; the warm-up line comes from the run's own warm-up length."""
    markers = [_line(float(warmup_s), "warmup", "warm-up end")] if warmup_s else []
    for event in events:
        kind = event_class(event.kind)
        if kind in (*SPAN_KINDS, "other") or (kind == "warmup" and warmup_s):
            continue  # probes, outages and forensics windows are spans (below); warmup_end duplicates the line above
        markers.append(_line(event.t_s, kind, _event_label(event)))
    markers.extend(marker for span_class in SPAN_KINDS for marker in spans(events, span_class, end_s))
    return sorted(cap_markers(markers), key=lambda marker: marker.t_s)


def cap_markers(markers: list[Marker], limit: int = MAX_MARKERS) -> list[Marker]:
    """At most `limit` markers, dropping whole classes in DROP_ORDER (then the latest) until they fit."""
    for dropped in DROP_ORDER:
        if len(markers) <= limit:
            break
        markers = [marker for marker in markers if marker.marker_class != dropped]
    return markers[:limit]


def marker_shapes(markers: list[Marker], time_unit_s: float) -> list[dict[str, Any]]:
    """Plotly shapes: a full-height vertical line per marker, a shaded band per idle probe, outage or forensics
    window."""
    shapes = []
    for marker in markers:
        style = STYLES[marker.marker_class]
        x0 = marker.t_s / time_unit_s
        if marker.end_s is not None:
            shapes.append({
                "type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": marker.end_s / time_unit_s,
                "y0": 0, "y1": 1, "fillcolor": style["color"], "opacity": PROBE_FILL_OPACITY,
                "line": {"width": 0}, "layer": "below",
            })
        else:
            shapes.append({
                "type": "line", "xref": "x", "yref": "paper", "x0": x0, "x1": x0, "y0": 0, "y1": 1,
                "line": {"color": style["color"], "dash": style["dash"], "width": 1.2},
            })
    return shapes


def plotly_text(text: str) -> str:
    """Server- or log-supplied text made literal for plotly, which reads a subset of HTML in labels and hovers."""
    return html.escape(str(text), quote=False)


MARKER_AXIS = "y9"  # a hidden 0–1 axis laid over the chart, so the hover points sit at its top whatever the data
MARKER_AXIS_KEY = "yaxis9"


def marker_trace(markers: list[Marker], time_unit_s: float) -> dict[str, Any] | None:
    """A hover-only trace with one point per marker at the top of the chart, naming the event."""
    if not markers:
        return None
    return {
        "type": "scatter", "mode": "markers", "name": "events", "showlegend": False, "yaxis": MARKER_AXIS,
        "x": [round(marker.t_s / time_unit_s, 5) for marker in markers],
        "y": [0.97] * len(markers),
        "marker": {"symbol": "triangle-down", "size": 8,
                   "color": [STYLES[marker.marker_class]["color"] for marker in markers]},
        "hovertext": [plotly_text(marker.label) for marker in markers],
        "hoverinfo": "text",
    }


def marker_axis_layout() -> dict[str, Any]:
    """The layout entry of the hidden axis the marker trace is drawn against."""
    return {"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True}


def legend_items(markers: list[Marker]) -> list[dict[str, str]]:
    """The marker classes present, with colour and label, for the key printed under the charts (template rows)."""
    present = {marker.marker_class for marker in markers}
    return [{"class": name, **style} for name, style in STYLES.items() if name in present]
