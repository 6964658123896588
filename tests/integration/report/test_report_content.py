"""The rendered report of a realistic run: banner, gates, run facts, latency from merged histograms, events,
environment, charts data, baseline, and that nothing hostile from the server, log or config runs."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import numpy as np
import pytest
from report_run import HOSTILE, RUN_ID, build_run, encode_hist, summary_dict
from sqlalchemy import insert, update

from soak.contracts import parse_summary
from soak.errors import UnknownRunError
from soak.report import render_report
from soak.report.downsample import MAX_POINTS
from soak.report.formatting import format_number
from soak.report.sections import ENVIRONMENT_KEYS
from soak.store.models import EventRow, Run
from support.records import run_summary

pytestmark = pytest.mark.timeout(120)


def chart_data(html: str) -> dict:
    match = re.search(r'<script type="application/json" id="soak-chart-data">(.*?)</script>', html, re.S)
    return json.loads(match.group(1))


def table_html(html: str, css_class: str, scenario: str | None = None) -> str:
    pattern = rf'<table class="{css_class}"' + (rf' data-scenario="{re.escape(scenario)}"' if scenario else "")
    start = html.index(re.search(pattern, html).group(0))
    return html[start:html.index("</table>", start)]


def row_cells(table: str, metric: str) -> list[str]:
    row = re.search(rf'<tr data-metric="{metric}">(.*?)</tr>', table, re.S).group(1)
    return [unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def without_plotly(html: str) -> str:
    """The page minus the inlined plotly.js (whose own source mentions URLs it never fetches for our charts)."""
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    biggest = max(scripts, key=len)
    return html.replace(biggest, "")


# ---- header and gates -----------------------------------------------------------------------------------

def test_banner_shows_verdict_reason_and_run_identity(rendered):
    html = rendered["html"]
    banner = html[html.index('<header class="banner'):html.index("</header>")]
    assert 'class="banner v-fail"' in banner
    assert '<div class="verdict-word">FAIL</div>' in banner
    assert "leak.rss FAIL: EngineCore grows 40 MiB/h" in banner
    assert RUN_ID in banner and "completed" in banner
    assert "2026-12-02 10:15:00 UTC" in banner and "2026-12-02 10:45:00 UTC" in banner
    assert "30m of 30m planned (100.0 %)" in banner
    # The FAIL leak's projection is in the banner; a PASS finding's (a noise slope) is not.
    assert '<div class="exhaustion">host memory runs out in 31 h at this slope (leak.rss)</div>' in banner
    assert "GPU memory" not in banner


def test_one_gates_row_per_finding_each_linking_to_an_existing_anchor(rendered):
    html, findings = rendered["html"], rendered["summary"]["findings"]
    rows = re.findall(r'<tr class="gate-row ([^"]+)" data-check="([^"]+)">(.*?)</tr>', html, re.S)
    assert [check for _, check, _ in rows] == [finding["check"] for finding in findings]
    for (css, check, body), finding in zip(rows, findings):
        assert css == f"v-{finding['verdict'].lower()}"
        anchor = re.search(r'<a href="#([^"]+)">view</a>', body).group(1)
        assert f'id="{anchor}"' in html, f"{check} links to missing #{anchor}"


def test_gate_values_are_in_human_units(rendered):
    html = rendered["html"]
    rss = re.search(r'data-check="leak.rss">(.*?)</tr>', html, re.S).group(1)
    assert "40.0 MiB/h" in rss and "95 % CI 35.0 … 45.0 MiB/h" in rss and "16.0 MiB/h" in rss
    assert "1.80 KiB/request" in rss  # per_request: bytes per request in binary units
    assert "detection limit 45.0 MiB/h" in rss  # next to the threshold, in the same unit
    kv = re.search(r'data-check="leak.kv">(.*?)</tr>', html, re.S).group(1)
    assert "1.00 % of KV cache" in kv
    assert "percentile used per window: p99" in re.search(r'data-check="creep.ttft_p99">(.*?)</tr>', html, re.S).group(1)


# ---- run facts, latency ------------------------------------------------------------------------------

def test_run_section_has_phases_and_request_totals(rendered):
    run = rendered["html"][rendered["html"].index('<section id="run">'):rendered["html"].index('<section id="latency">')]
    assert "steady" in run and "burst" in run and "+0:15:00" in run
    assert "steady at 2.5 req/s for 13m" in run
    assert "5 req/s with bursts of 15 req/s for 30s every 5m for 15m" in run
    totals = table_html(run, "totals")
    whole = re.search(r"<tr><td>all scenarios, whole run</td>(.*?)</tr>", totals, re.S).group(1)
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", whole)]
    headers = [re.sub(r"<[^>]+>", "", h) for h in re.findall(r"<th[^>]*>(.*?)</th>", totals)][1:]
    by_header = dict(zip(headers, cells, strict=True))
    assert by_header["Requests"] == "4,500"  # 29 windows × (120 + 30) requests of 60 s, warm-up window 120 s × 2.5/s
    assert by_header["timeout"] == "8" and by_header["http_5xx"] == "9"
    assert by_header["Error rate"] == "0.38 %"


def test_overall_latency_comes_from_merged_histograms(rendered):
    values = np.concatenate(rendered["star_values"]["ttft"])
    direct = encode_hist(values)  # one histogram of every value: what a correct merge must equal
    cells = row_cells(table_html(rendered["html"], "latency", "*"), "ttft")
    expected = [format_number(direct.get_value_at_percentile(p) / 1000) for p in (50, 95, 99)]
    assert cells[:3] == expected
    assert cells[3] == f"{len(values):,}"
    assert float(cells[2].replace(",", "")) == pytest.approx(np.percentile(values, 99), rel=0.01)


def test_first_and_last_windows_skip_warm_up(rendered):
    first, last = rendered["star_values"]["e2e"][0], rendered["star_values"]["e2e"][-1]
    cells = row_cells(table_html(rendered["html"], "latency", "*"), "e2e")
    assert cells[4:7] == [format_number(encode_hist(first).get_value_at_percentile(p) / 1000) for p in (50, 95, 99)]
    assert cells[7:10] == [format_number(encode_hist(last).get_value_at_percentile(p) / 1000) for p in (50, 95, 99)]


def test_latency_tables_per_scenario(rendered):
    html = rendered["html"]
    assert [s for s in re.findall(r'<table class="latency" data-scenario="([^"]+)"', html)] == ["*", "chat", "long"]
    for scenario in ("*", "chat", "long"):
        table = table_html(html, "latency", scenario)
        assert re.findall(r'<tr data-metric="(\w+)">', table) == ["ttft", "itl", "e2e"]


# ---- events, environment ------------------------------------------------------------------------------

def test_events_are_listed_with_the_crash_log_tail(rendered):
    events = rendered["html"][rendered["html"].index('<section id="events">'):]
    events = events[:events.index("</section>")]
    for kind in ("server start", "warmup end", "phase", "idle probe", "crash", "restart", "error burst",
                 "outage start"):
        assert f">{kind}</span>" in events
    assert "Traceback (most recent call last):" in events and "<details" in events
    # The probe's four events are one row; the drain timeout with no probe around it is a row of its own.
    assert events.count(">idle probe</span>") == 2
    assert "idle probe 1: drained in 12 s; KV 0 %, 0 running; RSS 900 MiB; idle for 42 s" in events
    assert "idle probe 2: drain timed out after 1m with 3 in flight; no server gauges; idle for 1m30s" in events


def test_environment_lists_known_keys_with_missing_ones_as_dash(rendered):
    env = rendered["html"][rendered["html"].index('<section id="environment">'):]
    for key in ENVIRONMENT_KEYS:
        assert f'<tr data-key="{key}">' in env
    config_hash = re.search(r'<tr data-key="config_hash">(.*?)</tr>', env, re.S).group(1)
    assert "—" in config_hash
    assert '<tr data-key="kernel_note">' in env  # keys beyond the known ones are shown too
    assert "NVIDIA H200" in re.search(r'<tr data-key="gpus">(.*?)</tr>', env, re.S).group(1)


def test_hostile_strings_are_escaped_everywhere(rendered):
    html = rendered["html"]
    assert HOSTILE not in html
    assert "alert(1)</script>" not in html
    assert html.count("<script") == 3  # the chart JSON, plotly.js, the report's own script: nothing injected
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert html.count(escaped) >= 6  # reason, evidence, server_cmd ×2, event message, config, env key
    env = html[html.index('<section id="environment">'):]
    assert escaped in re.search(r'<tr data-key="server command">(.*?)</tr>', env, re.S).group(1)


def test_report_fetches_nothing(rendered):
    page = without_plotly(rendered["html"])
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "@import" not in page and "url(" not in page
    assert "<link" not in page


# ---- charts -------------------------------------------------------------------------------------------

def test_chart_data_is_bounded_and_carries_markers_and_fits(rendered):
    charts = chart_data(rendered["html"])
    assert {"chart-memory", "chart-vram-gpu", "chart-vram-process", "chart-kv", "chart-queue", "chart-ttft",
            "chart-itl", "chart-e2e", "chart-throughput", "chart-errors", "chart-fds", "chart-client",
            "chart-lag"} == set(charts)
    for chart_id, figure in charts.items():
        assert f'id="{chart_id}-plot"' in rendered["html"]
        shapes = figure["layout"]["shapes"]
        assert any(shape["type"] == "rect" for shape in shapes), f"{chart_id} lacks the idle-probe band"
        assert sum(1 for shape in shapes if shape["type"] == "line") >= 6  # warm-up, phases, crash, restart…
        for trace in figure["data"]:
            assert len(trace["x"]) == len(trace["y"]) <= MAX_POINTS + 50
    names = [trace["name"] for trace in charts["chart-memory"]["data"]]
    assert "fit: leak.rss" in names and "server tree total RSS" in names
    assert any("&lt;script&gt;" in name for name in names)
    assert "fit: creep.ttft_p99 (p99)" in [trace["name"] for trace in charts["chart-ttft"]["data"]]
    fit = next(t for t in charts["chart-ttft"]["data"] if t["name"].startswith("fit:"))
    assert fit["y"][0] == pytest.approx(700, rel=1e-3) and fit["y"][-1] == pytest.approx(700 * 1.41, rel=1e-3)


def test_memory_spike_survives_in_chart(rendered):
    charts = chart_data(rendered["html"])
    api = next(t for t in charts["chart-memory"]["data"] if t["name"] == "vllm-api (4101) RSS")
    assert max(y for y in api["y"] if y is not None) > 1300  # 900 MiB + the 500 MiB single-sample spike


def test_baseline_table(rendered):
    html = rendered["html"]
    section = html[html.index('<section id="baseline">'):]
    assert "20261125T200000Z-aaaa" in section
    assert re.findall(r'<span class="badge (b-[\w-]+)">', section) == ["b-regressed", "b-within-noise", "b-improved"]
    assert "+23.1 %" in section and "± 10 %" in section


# ---- other runs ---------------------------------------------------------------------------------------

def test_run_without_gpu_says_so(tmp_path):
    built = build_run(tmp_path / "soak.db", gpu=False)
    with built["store"].engine.begin() as connection:
        connection.execute(insert(EventRow), [{"run_id": RUN_ID, "t_s": 1.0, "at": "2026-12-02T10:15:01+00:00",
                                            "kind": "no_gpu", "message": "NVML not found"}])
    html = render_report(built["store"], RUN_ID, parse_summary(summary_dict()), tmp_path / "r.html").read_text()
    assert html.count("No GPU: NVML not found.") == 2
    assert 'id="chart-vram-gpu-plot"' not in html and "chart-vram-gpu" not in chart_data(html)


def test_missing_histograms_fall_back_to_stored_percentiles(tmp_path):
    built = build_run(tmp_path / "soak.db", with_hist=False)
    html = render_report(built["store"], RUN_ID, parse_summary(summary_dict()), tmp_path / "r.html").read_text()
    cells = row_cells(table_html(html, "latency", "*"), "ttft")
    first = encode_hist(built["star_values"]["ttft"][0])
    assert cells[4:7] == [format_number(first.get_value_at_percentile(p) / 1000) for p in (50, 95, 99)]
    assert cells[2].endswith("≈")  # overall is a weighted mean of stored percentiles, and says so


def test_empty_aborted_run_renders_with_no_data_notes(tmp_path):
    from soak.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    with store.engine.begin() as connection:
        connection.execute(insert(Run), [{
            "id": "empty", "status": "aborted", "started_at": "2026-12-02T10:15:00+00:00", "t0_epoch_s": 0.0,
            "planned_duration_s": 3600.0, "warmup_s": 180.0, "window_s": 60.0, "out_dir": str(tmp_path),
            "target_kind": "external", "config_json": "{}", "environment_json": "{}"}])
    html = render_report(store, "empty", run_summary(run_id="empty", verdict="INCONCLUSIVE"), tmp_path / "r.html").read_text()
    assert '<div class="verdict-word">INCONCLUSIVE</div>' in html and "aborted" in html
    assert "The summary holds no findings." in html and "No request windows were recorded." in html
    assert "No server process memory was sampled." in html
    assert chart_data(html) == {}


def test_summary_defaults_to_the_one_stored_with_the_run(built_run, tmp_path):
    store = built_run["store"]
    stored = {**summary_dict(), "verdict": "PASS", "verdict_reason": "stored summary", "findings": []}
    with store.engine.begin() as connection:
        connection.execute(update(Run).where(Run.id == RUN_ID).values(summary_json=json.dumps(stored)))
    try:
        html = render_report(store, RUN_ID, None, tmp_path / "r.html").read_text()
    finally:
        with store.engine.begin() as connection:
            connection.execute(update(Run).where(Run.id == RUN_ID).values(summary_json=None))
    assert '<div class="verdict-word">PASS</div>' in html and "stored summary" in html


def test_unknown_run_is_an_error(built_run, tmp_path):
    with pytest.raises(UnknownRunError):
        render_report(built_run["store"], "nope", None, tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def test_report_is_written_atomically_and_readable(rendered):
    path: Path = rendered["path"]
    assert path.name == "report.html" and oct(path.stat().st_mode & 0o777) == "0o644"
    assert not list(path.parent.glob(".report-*"))


def test_what_next_lists_every_unsettled_check_worst_first(rendered):
    html = rendered["html"]
    block = html[html.index('<div class="what-next"'):html.index('<table class="gates">')]
    checks = re.findall(r'<li data-next="([^"]+)">', block)
    unsettled = [f for f in rendered["summary"]["findings"] if f["verdict"] in ("FAIL", "SUSPECT", "INCONCLUSIVE")]
    assert sorted(checks) == sorted(f["check"] for f in unsettled)
    assert checks[:3] == ["leak.rss", "hang", "crashes"]  # the FAILs first, in gate order
    ttft = re.search(r'<li data-next="creep.ttft_p99">(.*?)</li>', block, re.S).group(1)
    assert "run ≥ 9h00m of judged load at this rate to rule out +50 %" in ttft and "&lt;script&gt;" in ttft
    row = re.search(r'data-check="creep.ttft_p99">(.*?)</tr>', html, re.S).group(1)
    assert "Next:" in row and "run ≥ 9h00m" in row
    assert "Next:" not in re.search(r'data-check="leak.vram">(.*?)</tr>', html, re.S).group(1)  # a PASS
