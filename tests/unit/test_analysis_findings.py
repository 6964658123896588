"""A finding's typed evidence records turn into exactly the summary.json shape (docs/summary.md)."""

from __future__ import annotations

import json
import math

import numpy as np

from soak.analysis import analyse
from soak.analysis.findings import (
    FAIL,
    Exhaustion,
    Finding,
    PerRequest,
    ProcessGrowth,
    ScenarioGrowth,
    Trend,
)
from soak.analysis.gates import Gates
from soak.analysis.inputs import HostSeries, ProcessSeries, WindowRequests
from soak.analysis.memory import check_rss
from soak.analysis.step_records import Stair, Staircase, StepResult
from soak.analysis.warmup import WarmupCut
from soak.contracts import SummaryFinding
from support.synthetic import RunModel, bare_run, memory_series, scaled_memory_model, synthetic_run, with_changes

MIB = 2**20
GIB = 2**30
DAY_S = 86400.0


def every_field_finding() -> Finding:
    """A leak finding with every evidence field set, some numbers as numpy scalars and one nan, as checks hand them."""
    trend = Trend(np.float64(40 * MIB / 3600), 4500.0 * MIB, 150.0)
    step = StepResult(t_s=7200.0, index=40, before=2100.0 * MIB, after=2500.0 * MIB, shift=400.0 * MIB,
                      p_value=1e-9, min_shift=64.0 * MIB, gates={"size": True, "significant": True, "lasts": True})
    stairs = Staircase(first=2100.0 * MIB, last=2310.0 * MIB, within=2.0 * MIB, min_step=64.0 * MIB,
                       stairs=(Stair(3600.0, 20, 2100.0 * MIB, 2200.0 * MIB), Stair(5400.0, 30, 2200.0 * MIB, 2310.0 * MIB)),
                       levels_vs_line=0.1)
    process = ProcessGrowth(
        verdict=FAIL, value=40.0 * MIB, ci=(35.0 * MIB, 45.0 * MIB), detection_limit=45.0 * MIB, mk_p=math.nan,
        points=np.int64(28), step=step, net_growth=stairs, warmup=WarmupCut(t_s=150.0, index=5, floor_s=150.0),
        pid=4102, name="EngineCore", unit="bytes/h", floor=2100.0 * MIB, trend=trend)
    return Finding(
        check="leak.rss", verdict="FAIL", value=40.0 * MIB, unit="bytes/h", ci=(35.0 * MIB, 45.0 * MIB),
        threshold=16.0 * MIB, evidence="RSS rises", per_process=[process],
        per_request=PerRequest(1843.2, (1600.0, 2000.0), "bytes/request"), percentile_used="p99",
        trend=trend, detection_limit=45.0 * MIB, exhaustion=Exhaustion("host memory", 1240.0 * MIB, 31.0),
        attribution=[ScenarioGrowth("chat", 1800.0, (1500.0, 2100.0), "bytes/request", 0.9),
                     ScenarioGrowth("time", 0.5, (-1.0, 2.0), "bytes/s", 0.1)],
        next_step="see the memory chart", details={"source": "window floors", "points": 28})


EXPECTED_TREND = {"slope_per_s": 40 * MIB / 3600, "intercept": 4500.0 * MIB, "t0_s": 150.0, "space": "linear"}
EXPECTED = {
    "check": "leak.rss", "verdict": "FAIL", "value": 40.0 * MIB, "unit": "bytes/h", "ci": [35.0 * MIB, 45.0 * MIB],
    "threshold": 16.0 * MIB, "evidence": "RSS rises",
    "per_process": [{"verdict": "FAIL", "value": 40.0 * MIB, "ci": [35.0 * MIB, 45.0 * MIB],
                     "detection_limit": 45.0 * MIB, "mk_p": None, "points": 28,
                     "step": {"t_s": 7200.0, "before": 2100.0 * MIB, "after": 2500.0 * MIB, "shift": 400.0 * MIB,
                              "p_value": 1e-9, "min_shift": 64.0 * MIB, "found": True,
                              "gates": {"size": True, "significant": True, "lasts": True}},
                     "net_growth": {"first": 2100.0 * MIB, "last": 2310.0 * MIB, "net": 210.0 * MIB,
                                    "stepped": 210.0 * MIB, "within": 2.0 * MIB, "min_step": 64.0 * MIB,
                                    "levels_vs_line": 0.1, "is_staircase": True,
                                    "stairs": [{"t_s": 3600.0, "before": 2100.0 * MIB, "after": 2200.0 * MIB,
                                                "shift": 100.0 * MIB},
                                               {"t_s": 5400.0, "before": 2200.0 * MIB, "after": 2310.0 * MIB,
                                                "shift": 110.0 * MIB}]},
                     "warmup": {"t_s": 150.0, "index": 5, "still_settling": False, "method": "configured",
                                "floor_s": 150.0},
                     "pid": 4102, "name": "EngineCore", "unit": "bytes/h", "floor": 2100.0 * MIB,
                     "trend": EXPECTED_TREND}],
    "per_request": {"value": 1843.2, "ci": [1600.0, 2000.0], "unit": "bytes/request"},
    "percentile_used": "p99", "trend": EXPECTED_TREND, "detection_limit": 45.0 * MIB,
    "exhaustion": {"resource": "host memory", "headroom": 1240.0 * MIB, "hours": 31.0},
    "attribution": [
        {"scenario": "chat", "per_request": 1800.0, "ci": [1500.0, 2100.0], "unit": "bytes/request", "share": 0.9},
        {"scenario": "time", "per_request": 0.5, "ci": [-1.0, 2.0], "unit": "bytes/s", "share": 0.1}],
    "next_step": "see the memory chart", "details": {"source": "window floors", "points": 28},
}


def test_every_evidence_field_gives_the_frozen_summary_json():
    out = every_field_finding().to_dict()
    assert json.dumps(out) == json.dumps(EXPECTED)  # same keys, same order, numpy and nan made plain
    assert SummaryFinding.model_validate(out).model_dump(mode="json") == EXPECTED


def test_a_trend_names_its_series_only_when_set():
    assert Trend(1.0, 2.0, 0.0, "log").as_dict() == {"slope_per_s": 1.0, "intercept": 2.0, "t0_s": 0.0, "space": "log"}
    assert Trend(1.0, 2.0, 0.0, series="kv_usage").as_dict()["series"] == "kv_usage"


def test_unset_evidence_fields_stay_out():
    assert list(Finding(check="hang", verdict="PASS").to_dict()) == [
        "check", "verdict", "value", "unit", "ci", "threshold", "evidence"]


def leaking_findings() -> list[Finding]:
    """Findings of real checks on seeded synthetic runs: every check of a run that leaks and creeps and of a healthy
    one without idle probes (leak.kv judges the KV floor), a leak with a late step, one in lasting steps with a
    host's headroom, one the attribution ties to cancelled requests."""
    base = RunModel(run_s=6 * 3600.0, rate_per_s=4.0, probe_every_s=1200.0)
    faults = with_changes(base, leak_bytes_per_h=400 * MIB, creep_frac=1.0, kv_residue=0.02)
    return [*analyse(synthetic_run(2, faults), Gates()), *analyse(synthetic_run(3, with_changes(base, probe_every_s=0)), Gates()),
            _stepped_leak(), _staircase_leak(), _cancel_leak()]


def _memory(seed: int) -> tuple[np.ndarray, np.ndarray]:
    return memory_series(np.random.default_rng(seed), scaled_memory_model(DAY_S, floor_bytes=2 * GIB), DAY_S, 10.0)


def _stepped_leak() -> Finding:
    t_s, rss = _memory(5)
    api = 500 * MIB + np.random.default_rng(6).normal(0, MIB, t_s.size)
    processes = (ProcessSeries(1, "EngineCore", t_s, rss + 400 * MIB * (t_s >= 14 * 3600)), ProcessSeries(2, "api", t_s, api))
    return check_rss(bare_run(DAY_S, processes=processes), Gates())


def _staircase_leak() -> Finding:
    t_s, rss = _memory(8)
    rss = rss + 100 * MIB * (t_s >= 12 * 3600 + 300) + 110 * MIB * (t_s >= 18 * 3600 + 120)
    host = HostSeries(t_s=t_s, available_bytes=np.linspace(6 * GIB, 5 * GIB, t_s.size))
    return check_rss(bare_run(DAY_S, processes=(ProcessSeries(1, "EngineCore", t_s, rss),), host=host), Gates())


def _cancel_leak() -> Finding:
    rng, run_s = np.random.default_rng(11), 6 * 3600.0
    windows = bare_run(run_s).windows
    chat = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=int(rng.poisson(3 * (w.end_s - w.start_s))))
                 for w in windows)
    cancel = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=0,
                                 cancelled=int(rng.poisson(rng.uniform(0.1, 1.0) * (w.end_s - w.start_s))))
                   for w in windows)
    ends = np.array([w.end_s for w in windows])
    cancels = np.concatenate([[0], np.cumsum([w.cancelled for w in cancel])])
    t_s = np.arange(0.0, run_s, 10.0)
    rss = 1 * GIB + 2 * MIB * cancels[np.searchsorted(ends, t_s, side="right")] + rng.normal(0, MIB, t_s.size)
    host = HostSeries(t_s=t_s, available_bytes=np.full(t_s.size, 8.0 * GIB))
    return check_rss(bare_run(run_s, processes=(ProcessSeries(1, "server", t_s, rss),), host=host,
                              scenario_windows={"chat": chat, "cancel": cancel}), Gates())


def test_summary_json_writes_each_real_finding_as_its_to_dict_byte_for_byte():
    documents = [finding.to_dict() for finding in leaking_findings()]
    for document in documents:  # the run's path: Finding.to_dict() → SummaryFinding → summary.json
        assert json.dumps(SummaryFinding.model_validate(document).model_dump(mode="json")) == json.dumps(document)
    processes = [process for document in documents for process in document.get("per_process", [])]
    assert all(any(process[key] for process in processes) for key in ("step", "net_growth", "warmup", "trend"))
    assert all(any(key in document for document in documents) for key in ("exhaustion", "attribution", "per_request"))
    assert any(document["verdict"] == "SKIPPED" for document in documents)
    assert any("series" in document.get("trend", {}) for document in documents)
