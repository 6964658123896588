"""The history page and the text cells of `soak history`, from real summaries (tests/unit/data)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from soak.analysis.gates import Gates
from soak.analysis.history import Delta, HistoryRun, build_history
from soak.contracts import parse_summary
from soak.report.history import cells, columns, delta_text, render_history

REFERENCE = Path(__file__).parent / "data" / "reference_run_summary.json"
HOSTILE = "<script>alert(1)</script>"


def series() -> list:
    runs = []
    for index, (ttft, vllm) in enumerate(((40.0, "0.6.1"), (60.0, "0.6.2")), start=1):
        data = json.loads(REFERENCE.read_text(encoding="utf-8"))
        data["run_id"], data["latency_ms"]["ttft"]["p99"] = f"r{index}", ttft
        runs.append(HistoryRun(run_id=f"r{index}", started_at=f"2026-12-0{index}T10:00:00+00:00", status="completed",
                               labels={"release": f"1.4.{index}", "note": HOSTILE}, environment={"vllm": vllm},
                               summary=parse_summary(data)))
    return build_history(runs, Gates())


def test_cells_follow_the_columns_and_carry_the_delta():
    rows = series()
    assert len(cells(rows[1])) == len(columns(rows))
    ttft = cells(rows[1])[columns(rows).index("P99 TTFT")]
    assert ttft == {"text": "60.0 ms", "delta": "+50.0 % regressed", "status": "regressed"}
    assert delta_text(Delta(0.002, "fraction", None, "regressed")) == \
        "+0.20 pp regressed"


def test_the_page_is_self_contained_escaped_and_charts_every_figure(tmp_path):
    path = render_history(series(), {"release": HOSTILE}, tmp_path / "history.html")
    html = path.read_text(encoding="utf-8")
    assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=\"http", html)
    charts = json.loads(re.search(r'id="soak-chart-data">(.*?)</script>', html, re.S).group(1))
    assert {"history-figure-0", "history-figure-4"} <= set(charts)  # P99 TTFT … throughput
    assert charts["history-figure-0"]["data"][0]["y"] == [40.0, 60.0]
    assert "vLLM 0.6.1 → 0.6.2" in html and html.count('<tr data-run="') == 2
