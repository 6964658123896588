"""soak history's analysis: figures per run, deltas as `soak compare` judges them, verdict and environment changes.

The runs are a real reference run's summary.json (tests/unit/data) with the figures a release series would show.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from soak.analysis import compare_baseline
from soak.analysis.gates import Gates
from soak.analysis.history import (
    HistoryRun,
    VerdictChange,
    build_history,
    environment_changes,
    from_stored,
    select_checks,
)
from soak.contracts import parse_summary
from support.records import stored_run

REFERENCE = Path(__file__).parent / "data" / "reference_run_summary.json"
ENVIRONMENT = {"soak": "0.1.0", "vllm": "0.6.1", "torch": "2.4.0", "driver": "550.54", "gpus": [{"name": "H200"}],
               "model": "llama-3-8b", "serve_args": ["--max-num-seqs=64"], "host": "gpu-1", "config_hash": "abc",
               "server_cmd": "vllm serve llama-3-8b --port 41234"}


def summary(run_id: str, ttft_p99: float, verdict: str = "INCONCLUSIVE", kv_verdict: str = "PASS") -> dict:
    data = json.loads(REFERENCE.read_text(encoding="utf-8"))
    data["run_id"], data["verdict"] = run_id, verdict
    data["latency_ms"]["ttft"]["p99"] = ttft_p99
    next(f for f in data["findings"] if f["check"] == "leak.kv")["verdict"] = kv_verdict
    return data


def goodput(slo_ms: dict[str, float], share: float) -> dict:
    """summary.json's `goodput` of 1000 requests after warm-up."""
    return {"slo_ms": slo_ms, "requests": 1000, "good": round(1000 * share), "share": share, "windows": []}


def run(run_id: str, data: dict | None, **environment: object) -> HistoryRun:
    return HistoryRun(run_id=run_id, started_at=f"2026-12-0{run_id[-1]}T10:00:00+00:00", status="completed",
                      labels={"release": f"1.4.{run_id[-1]}"}, environment={**ENVIRONMENT, **environment},
                      summary=None if data is None else parse_summary(data))


def test_each_row_holds_its_figures_and_the_previous_runs_delta_as_compare_judges_it():
    first, second = summary("r1", 40.0), summary("r2", 50.0)
    rows = build_history([run("r1", first), run("r2", second)], Gates())
    assert [row.run.run_id for row in rows] == ["r1", "r2"]
    assert rows[0].figures["latency.ttft.p99"] == 40.0 and rows[1].figures["latency.ttft.p99"] == 50.0
    assert rows[0].previous is None and rows[0].deltas == {}
    delta = rows[1].deltas["latency.ttft.p99"]
    _, compared = compare_baseline(parse_summary(second), parse_summary(first), Gates())
    expected = next(r for r in compared if r.name == "latency.ttft.p99")
    assert delta.delta_pct == pytest.approx(25.0) == pytest.approx(expected.delta_pct)
    assert delta.status == expected.status == "regressed"
    assert rows[1].deltas["error_rate"].status == "within noise"


def test_a_change_inside_the_tolerance_is_within_noise():
    rows = build_history([run("r1", summary("r1", 40.0)), run("r2", summary("r2", 41.0))], Gates())
    assert rows[1].deltas["latency.ttft.p99"].status == "within noise"


def test_verdict_changes_and_the_chosen_checks_are_reported():
    rows = build_history([run("r1", summary("r1", 40.0)), run("r2", summary("r2", 40.0, kv_verdict="FAIL"))],
                         Gates(), ("leak.kv", "creep"))
    assert list(rows[1].checks) == ["leak.kv", "creep.ttft_p99", "creep.itl_p99", "creep.e2e_p99"]
    assert rows[1].checks["leak.kv"].verdict == "FAIL"
    assert VerdictChange("leak.kv", "PASS", "FAIL") in rows[1].verdict_changes


def test_an_unknown_check_names_the_known_ones():
    with pytest.raises(ValueError, match="no run here has a check named 'leak.nope'.*leak.rss"):
        select_checks([parse_summary(summary("r1", 1.0))], ("leak.nope",))


def test_environment_changes_name_what_changed_and_ignore_the_port():
    changes = environment_changes(ENVIRONMENT, {**ENVIRONMENT, "vllm": "0.6.2", "gpus": [{"name": "H100"}],
                                                "server_cmd": "vllm serve llama-3-8b --port 50001"})
    assert [(c.key, c.before, c.after) for c in changes] == [
        ("vllm", "0.6.1", "0.6.2"), ("gpus", ["H200"], ["H100"])]


def test_a_run_without_summary_is_a_row_and_the_next_compares_with_the_last_finalised():
    rows = build_history([run("r1", summary("r1", 40.0)), run("r2", None, torch="2.5.0"),
                          run("r3", summary("r3", 60.0))], Gates())
    assert rows[1].verdict is None and rows[1].deltas == {} and rows[1].previous == "r1"
    assert [c.key for c in rows[1].environment_changes] == ["torch"]
    assert rows[2].previous == "r1" and rows[2].deltas["latency.ttft.p99"].delta_pct == pytest.approx(50.0)


def test_from_stored_reads_the_run_row_of_the_store():
    data = summary("r1", 40.0)
    stored = stored_run(started_at="2026-12-01T10:00:00+00:00", model="m", labels={"release": "1"},
                        summary_json=json.dumps(data), environment=ENVIRONMENT, config={"target": {"serve_args": ["--a"]}})
    history_run = from_stored(stored)
    assert history_run.summary == parse_summary(data) and history_run.labels == {"release": "1"}
    assert history_run.environment["model"] == "m" and history_run.environment["serve_args"] == ["--a"]
    no_summary = from_stored(dataclasses.replace(stored, summary_json=None))
    assert no_summary.summary is None


def test_goodput_is_a_figure_and_changes_only_between_runs_with_the_same_slo():
    first, second, third = summary("r1", 40.0), summary("r2", 40.0), summary("r3", 40.0)
    first["goodput"] = goodput({"ttft": 500.0}, 0.98)
    second["goodput"] = goodput({"ttft": 500.0}, 0.95)
    third["goodput"] = goodput({"ttft": 200.0}, 0.90)
    rows = build_history([run("r1", first), run("r2", second), run("r3", third), run("r4", summary("r4", 40.0))],
                         Gates())
    assert [row.figures["goodput"] for row in rows] == [0.98, 0.95, 0.90, None]
    assert rows[1].deltas["goodput"].delta == pytest.approx(-0.03) and rows[1].deltas["goodput"].unit == "fraction"
    assert rows[1].deltas["goodput"].status == "regressed" and rows[1].deltas["goodput"].tolerance == "1 pp"
    assert "goodput" not in rows[2].deltas and "goodput" not in rows[3].deltas


def test_the_json_row_is_plain_data_a_figure_delta_with_its_tolerance_a_check_delta_without():
    rows = build_history([run("r1", summary("r1", 40.0)), run("r2", summary("r2", 50.0, kv_verdict="FAIL"), vllm="0.6.2")],
                         Gates(), ("leak.kv",))
    data = json.loads(json.dumps(rows[1].to_dict()))  # only JSON types: a record left in would not serialise
    assert list(data["deltas"]["latency.ttft.p99"]) == ["delta", "unit", "delta_pct", "status", "tolerance"]
    assert data["checks"]["leak.kv"] == {"verdict": "FAIL", "value": rows[1].checks["leak.kv"].value,
                                         "unit": rows[1].checks["leak.kv"].unit}
    assert data["verdict_changes"] == [{"check": "leak.kv", "baseline": "PASS", "current": "FAIL"}]
    assert data["environment_changes"] == [{"key": "vllm", "title": "vLLM", "before": "0.6.1", "after": "0.6.2"}]
