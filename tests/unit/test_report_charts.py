"""Chart specs: fitted lines, tree totals, empty charts that say so, and trend routing by check."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from soak.report import charts
from soak.report.charts import MIB, Frame, memory_chart, tree_total, trend_trace
from soak.report.context import trend_target
from soak.report.reading import RequestWindow
from soak.report.sections import check_anchor
from support.records import run_summary, summary_finding

pytestmark = pytest.mark.timeout(60)
FRAME = Frame(time_unit_s=3600.0, time_label="hours since start", end_s=7200.0)


def test_linear_fit_is_drawn_over_the_fitted_span():
    finding = {"check": "leak.rss", "trend": {"slope_per_s": 2.0, "intercept": 100.0, "t0_s": 600.0,
                                               "space": "linear"}}
    trace = trend_trace(summary_finding(**finding), FRAME, 0.5)
    assert trace["x"] == [600 / 3600, 2.0] or trace["x"] == [round(600 / 3600, 5), 2.0]
    assert trace["y"] == [50.0, (100.0 + 2.0 * 6600) * 0.5]


def test_log_fit_is_exponentiated():
    finding = {"check": "creep.ttft_p99", "percentile_used": "p95",
               "trend": {"slope_per_s": math.log(2) / 3600, "intercept": math.log(100), "t0_s": 0.0, "space": "log"},
               "details": {"span_s": 3600.0}}
    trace = trend_trace(summary_finding(**finding), FRAME, 1.0)
    assert trace["y"][0] == pytest.approx(100.0) and trace["y"][-1] == pytest.approx(200.0, rel=1e-3)
    assert trace["x"][-1] == 1.0 and trace["name"] == "fit: creep.ttft_p99 (p95)"


def test_trend_without_numbers_draws_nothing():
    trend = {"slope_per_s": None, "intercept": 1.0, "t0_s": 0.0, "space": "linear"}
    assert trend_trace(summary_finding(trend=trend), FRAME, 1.0) is None
    assert trend_trace(summary_finding(), FRAME, 1.0) is None


LINE = {"slope_per_s": 0.0, "intercept": 1.0, "t0_s": 0.0, "space": "linear"}


@pytest.mark.parametrize(("finding", "target"), [
    ({"check": "leak.rss", "trend": LINE}, ("chart-memory", 1 / MIB, "y")),
    ({"check": "leak.vram", "trend": LINE}, ("chart-vram-process", 1 / 2**30, "y")),
    ({"check": "creep.itl_p99", "trend": LINE}, ("chart-itl", 1.0, "y")),
    ({"check": "errors.rise", "trend": LINE}, ("chart-errors", 100.0, "y2")),
    ({"check": "throughput.decay", "trend": LINE, "details": {"measure": "tokens/s"}}, ("chart-throughput", 1.0, "y2")),
    ({"check": "throughput.decay", "trend": LINE, "details": {"measure": "tokens per offered request"}}, None),
    ({"check": "anything", "trend": LINE | {"series": "kv"}}, ("chart-kv", 100.0, "y")),
    ({"check": "leak.rss"}, None),
])
def test_trend_target(finding, target):
    assert trend_target(summary_finding(**finding)) == target


def test_check_anchor():
    assert check_anchor("leak.rss") == "chart-memory" and check_anchor("crashes") == "events"
    assert check_anchor("creep.ttft_p95") == "chart-ttft" and check_anchor("mystery") == "charts"


def test_tree_total_needs_shared_sample_times():
    t_s = np.repeat(np.arange(10.0), 3)
    times, totals = tree_total(t_s, np.ones(30))
    assert len(times) == 10 and set(totals) == {3.0}
    assert tree_total(np.arange(30.0), np.ones(30)) is None


def test_memory_chart_without_samples_says_so():
    empty = {name: np.array([], dtype=float) for name in ("t_s", "pid", "rss_bytes", "pss_bytes")}
    empty["name"] = np.array([], dtype=object)
    chart = memory_chart(empty, FRAME, [{"type": "scatter", "x": [0], "y": [1]}])
    assert chart["figure"] is None and chart["empty"] == "No server process memory was sampled."


def test_errors_chart_with_no_errors_says_so():
    rows = [RequestWindow(window_index=i, scenario="*", start_s=60.0 * i, end_s=60.0 * (i + 1), requests=10)
            for i in range(3)]
    chart = charts.errors_chart(rows, FRAME, ("connect", "timeout"), [])
    assert chart["figure"] is None and chart["empty"] == "No errors in any of the 3 windows."


def test_many_processes_are_capped_with_a_note():
    n = charts.MAX_PROCESS_TRACES + 3
    columns = {"t_s": np.zeros(n), "pid": np.arange(n, dtype=float), "rss_bytes": np.arange(n, dtype=float) * MIB,
               "pss_bytes": np.full(n, np.nan), "name": np.array([f"p{i}" for i in range(n)], dtype=object)}
    chart = memory_chart(columns, FRAME, [])
    names = {trace["name"] for trace in chart["figure"]["data"]}
    assert "p0 (0) RSS" not in names and f"p{n - 1} ({n - 1}) RSS" in names
    assert chart["notes"] and "3 smaller processes" in chart["notes"][0]


def test_baseline_rows_read_the_comparison_rows():
    from soak.analysis.baseline import BaselineComparison, ComparisonRow
    from soak.report.sections import baseline_table

    table = baseline_table(BaselineComparison("b", (
        ComparisonRow(name="error_rate", unit="fraction", current=0.012, baseline=0.010, delta_pct=20.0,
                      tolerance=0.005, tolerance_text="0.5 pp", status="within noise"),
        ComparisonRow(name="latency.ttft.p99", unit="ms", current=640.0, baseline=520.0, delta_pct=23.1,
                      tolerance=0.10, tolerance_text="10 %", status="regressed"))))
    first, second = table["rows"]
    assert (first["metric"], first["current"], first["baseline"], first["tolerance"]) == (
        "error_rate", "1.20 %", "1.00 %", "± 0.5 pp")
    assert first["status_class"] == "b-within-noise"
    assert (second["metric"], second["delta"], second["tolerance"]) == ("latency.ttft.p99", "+23.1 %", "± 10 %")
    assert baseline_table(None) is None
    assert baseline_table(BaselineComparison("b", note="no summary yet"))["note"] == "no summary yet"


def run_with_lag(lag_p99_ms: float, windows: int = 6) -> Any:
    """A store over an in-memory database holding one run whose schedule-lag P99 is `lag_p99_ms` in every window."""
    from sqlalchemy import create_engine, insert

    from soak.store import Store
    from soak.store.models import ALL_SCENARIOS, Base, LatencyWindowRow, Run

    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    run = {"id": "r", "status": "completed", "started_at": "2026-01-01T00:00:00+00:00", "t0_epoch_s": 0.0,
           "planned_duration_s": 60.0 * windows, "duration_s": 60.0 * windows, "warmup_s": 0.0, "window_s": 60.0,
           "out_dir": "/tmp", "target_kind": "external", "config_json": "{}", "environment_json": "{}"}
    lag = [{"run_id": "r", "window_index": i, "scenario": ALL_SCENARIOS, "metric": "lag", "start_s": 60.0 * i,
            "end_s": 60.0 * (i + 1), "count": 100, "p99_ms": lag_p99_ms} for i in range(windows)]
    with engine.begin() as connection:
        connection.execute(insert(Run), [run])
        connection.execute(insert(LatencyWindowRow), lag)
    return Store(engine)


def test_lag_chart_draws_the_limits_the_run_was_judged_by():
    from soak.analysis.gates import ClientGate, Gates
    from soak.analysis.inputs import ClientSeries
    from soak.analysis.saturation import check_saturation
    from soak.report.context import build_context
    from support.synthetic import bare_run

    gates = Gates(client=ClientGate(lag_p99_suspect_ms=50.0, lag_p99_invalid_ms=80.0))
    client = ClientSeries(t_s=np.arange(0.0, 360.0, 10.0), sends=1000, late_sends_1s=0, lag_p99_ms=60.0)
    finding = check_saturation(bare_run(360.0, client=client), gates)
    assert finding.verdict == "SUSPECT"  # 60 ms is over this run's 50 ms limit, under its 80 ms one
    context = build_context(run_with_lag(60.0), "r", run_summary(verdict="SUSPECT", findings=[finding.to_dict()]))
    [chart] = [chart for chart in context["charts"] if chart["id"] == "chart-lag"]
    limits = sorted(shape["y0"] for shape in chart["figure"]["layout"]["shapes"] if shape.get("xref") == "paper")
    assert limits == [50.0, 80.0]
    assert "50 ms" in chart["description"] and "80 ms" in chart["description"]


def test_lag_chart_falls_back_to_the_default_gates():
    from soak.analysis.gates import ClientGate
    from soak.report.context import build_context

    context = build_context(run_with_lag(60.0), "r", run_summary())
    [chart] = [chart for chart in context["charts"] if chart["id"] == "chart-lag"]
    limits = sorted(shape["y0"] for shape in chart["figure"]["layout"]["shapes"] if shape.get("xref") == "paper")
    default = ClientGate()
    assert limits == [default.lag_p99_suspect_ms, default.lag_p99_invalid_ms]


def _goodput_rows(shares: list[float | None]) -> list[RequestWindow]:
    return [RequestWindow(window_index=i, scenario="*", start_s=600.0 * i, end_s=600.0 * (i + 1), requests=110,
                          cancelled=10, slo_met=None if share is None else round(100 * share))
            for i, share in enumerate(shares)]


def test_goodput_chart_draws_each_windows_share_the_floor_and_the_decay_fit():
    finding = {"check": "goodput.decay", "trend": {"slope_per_s": -1e-5, "intercept": 0.98, "t0_s": 300.0,
                                                   "space": "linear"}}
    chart_id, scale, axis = trend_target(summary_finding(**finding))
    fit = trend_trace(summary_finding(**finding), FRAME, scale, axis)
    chart = charts.goodput_chart(_goodput_rows([0.97, 0.95, 0.9]), FRAME, [fit], "TTFT ≤ 500 ms", 0.9)
    assert chart["id"] == chart_id == "chart-goodput" and "TTFT ≤ 500 ms" in chart["description"]
    share, drawn_fit = chart["figure"]["data"][:2]
    assert share["y"] == [97.0, 95.0, 90.0]  # of 100 finished requests: cancelled ones are left out
    assert drawn_fit["y"][0] == pytest.approx(98.0)
    assert [shape["y0"] for shape in chart["figure"]["layout"]["shapes"] if shape.get("xref") == "paper"] == [90.0]


def test_a_run_without_an_slo_says_so_where_the_goodput_chart_would_be():
    from soak.report.context import goodput_charts

    [without] = goodput_charts(_goodput_rows([None, None]), FRAME, [], [])
    assert without["figure"] is None and "--slo" in without["empty"]
    [with_slo] = goodput_charts(_goodput_rows([0.99, 0.98]), FRAME, [], [])
    assert with_slo["figure"]["data"][0]["y"] == [99.0, 98.0]
    assert check_anchor("goodput.floor") == "chart-goodput"


def test_a_warmup_the_data_ended_is_drawn_where_it_ended_and_the_configured_one_is_not_repeated():
    from soak.report.context import trends_by_chart

    cuts = {"server (pid 1)": {"t_s": 1800.0, "method": "mser-5", "still_settling": False},
            "api (pid 2)": {"t_s": 180.0, "method": "configured", "still_settling": False}}
    kv = {"t_s": 5400.0, "method": "mser-5", "still_settling": True}
    findings = [summary_finding(check="leak.rss", details={"warmup": cuts}),
                summary_finding(check="leak.kv", details={"warmup": kv})]
    by_chart = trends_by_chart(findings, FRAME)
    (memory,), (floor,) = by_chart["chart-memory"], by_chart["chart-kv"]
    assert memory["x"] == [0.5, 0.5] and memory["name"] == "warm-up end (from the data): server (pid 1)"
    assert memory["yaxis"] == "y9" and memory["y"] == [0, 1]  # full height on the markers' hidden axis
    assert floor["x"] == [1.5, 1.5] and floor["name"] == "still settling (from the data): floor"
