"""A finding's typed evidence records turn into exactly the summary.json shape (docs/summary.md)."""

from __future__ import annotations

import json
import math

import numpy as np

from soak.analysis.findings import (
    FAIL,
    Exhaustion,
    Finding,
    PerRequest,
    ProcessGrowth,
    ScenarioGrowth,
    Trend,
)
from soak.contracts import SummaryFinding

MIB = 2**20


def every_field_finding() -> Finding:
    """A leak finding with every evidence field set, some numbers as numpy scalars and one nan, as checks hand them."""
    trend = Trend(np.float64(40 * MIB / 3600), 4500.0 * MIB, 150.0)
    process = ProcessGrowth(
        verdict=FAIL, value=40.0 * MIB, ci=(35.0 * MIB, 45.0 * MIB), detection_limit=45.0 * MIB, mk_p=math.nan,
        points=np.int64(28), step=None, net_growth=None, warmup={"method": "configured", "t_s": 150.0},
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
                     "detection_limit": 45.0 * MIB, "mk_p": None, "points": 28, "step": None, "net_growth": None,
                     "warmup": {"method": "configured", "t_s": 150.0}, "pid": 4102, "name": "EngineCore",
                     "unit": "bytes/h", "floor": 2100.0 * MIB, "trend": EXPECTED_TREND}],
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
