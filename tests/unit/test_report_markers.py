"""Event markers on charts: classes, probe and outage spans, shapes, and plotly-safe labels."""

from __future__ import annotations

import pytest

from soak.report.markers import build_markers, event_class, legend_items, marker_shapes, marker_trace, plotly_text
from support.records import stored_event

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(("kind", "expected"), [
    ("phase", "phase"), ("probe_start", "probe"), ("probe_drained", "probe"), ("probe_drain_timeout", "probe_timeout"),
    ("crash", "crash"), ("server_crash", "crash"), ("server_exit", "crash"), ("restart", "restart"),
    ("server_restart", "restart"), ("server_start", "server_start"), ("error_burst", "burst"),
    ("warmup_end", "warmup"), ("outage_start", "outage"), ("no_gpu", "other"), ("run_end", "other"),
    ("worker_lost", "worker_lost"), ("workers_joined", "other"),
])
def test_event_class(kind, expected):
    assert event_class(kind) == expected


def events(*items):
    return [stored_event(t, kind, message=message) for t, kind, message in items]


def test_markers_pair_probes_and_skip_duplicate_warm_up():
    markers = build_markers(events((100.0, "warmup_end", ""), (600.0, "probe_start", ""),
                                   (650.0, "probe_end", ""), (900.0, "probe_start", ""),
                                   (1000.0, "crash", "exit -9"), (1100.0, "no_gpu", "")), 100.0, 1800.0)
    assert [(m.marker_class, m.t_s, m.end_s) for m in markers] == [
        ("warmup", 100.0, None), ("probe", 600.0, 650.0), ("probe", 900.0, 1800.0), ("crash", 1000.0, None)]
    assert markers[-1].label == "crash: exit -9"


def test_shapes_lines_and_bands_in_chart_units():
    markers = build_markers(events((600.0, "probe_start", ""), (660.0, "probe_end", "")), 120.0, 3600.0)
    shapes = marker_shapes(markers, 60.0)
    assert shapes[0]["type"] == "line" and shapes[0]["x0"] == 2.0
    assert shapes[1]["type"] == "rect" and (shapes[1]["x0"], shapes[1]["x1"]) == (10.0, 11.0)
    assert [item["class"] for item in legend_items(markers)] == ["warmup", "probe"]


def test_hover_labels_are_literal_text_for_plotly():
    markers = build_markers(events((5.0, "crash", "<b>x</b> & <a href=x>y</a>")), None, 10.0)
    trace = marker_trace(markers, 1.0)
    assert trace["hovertext"] == ["crash: &lt;b&gt;x&lt;/b&gt; &amp; &lt;a href=x&gt;y&lt;/a&gt;"]
    assert plotly_text("<script>") == "&lt;script&gt;"
    assert marker_trace([], 1.0) is None


def test_too_many_markers_drop_the_least_telling_classes_first():
    many = events(*[(float(i), "error_burst", "") for i in range(500)], (600.0, "crash", ""), (700.0, "phase", ""))
    markers = build_markers(many, 100.0, 1000.0)
    assert [m.marker_class for m in markers] == ["warmup", "crash", "phase"]
