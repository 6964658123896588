"""baseline.regression via compare_baseline."""

import pytest

from soak.analysis import baseline
from soak.analysis.findings import FAIL, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from support.records import run_summary

NO_LATENCY = {"p50": None, "p95": None, "p99": None, "count": 0}


def summary(ttft_p99=1000.0, e2e_p99=5000.0, error_rate=0.001, tokens=1_000_000, duration_s=3600.0,
            run_id="run-a", findings=()):
    """summary.json's fields that compare reads (as a dict, so a test can change one)."""
    errors = int(error_rate * 10_000)
    return {"run_id": run_id, "duration_s": duration_s,
            "latency_ms": {"ttft": {"p50": 200.0, "p95": 700.0, "p99": ttft_p99, "count": 9000},
                           "itl": NO_LATENCY, "e2e": {"p50": 2000.0, "p95": 4000.0, "p99": e2e_p99, "count": 9000}},
            "totals": {"requests": 10_000, "errors": errors, "error_rate": error_rate, "output_tokens": tokens,
                       "cancelled": 0, "errors_by_class": {"connect": 0, "timeout": 0, "http_4xx": 0, "http_5xx": errors,
                                                           "bad_stream": 0}},
            "findings": list(findings)}


def compare_baseline(current: dict, before: dict, gates: Gates):
    """`compare_baseline` of the two summaries these dicts describe."""
    return baseline.compare_baseline(run_summary(**current), run_summary(**before), gates)


def rows_by_name(rows):
    return {r.name: r for r in rows}


def test_identical_runs_are_within_noise():
    finding, rows = compare_baseline(summary(), summary(run_id="base"), Gates())
    assert finding.verdict == PASS and finding.check == "baseline.regression"
    assert {r.status for r in rows} == {"within noise"}
    assert "ttft.p99" in str([r.name for r in rows])


def test_latency_regression_is_suspect_or_fail():
    finding, rows = compare_baseline(summary(ttft_p99=1300.0), summary(run_id="base"), Gates())
    row = rows_by_name(rows)["latency.ttft.p99"]
    assert row.status == "regressed" and row.delta_pct == pytest.approx(30.0)
    assert row.tolerance == 0.10 and row.current == 1300.0 and row.baseline == 1000.0
    assert finding.verdict == SUSPECT and "latency.ttft.p99" in finding.evidence and "base" in finding.evidence
    strict = Gates.model_validate({"baseline": {"fail_on_regression": True}})
    assert compare_baseline(summary(ttft_p99=1300.0), summary(), strict)[0].verdict == FAIL


def test_improvement_and_throughput_direction():
    _, rows = compare_baseline(summary(ttft_p99=700.0, tokens=800_000), summary(), Gates())
    by_name = rows_by_name(rows)
    assert by_name["latency.ttft.p99"].status == "improved"
    assert by_name["throughput.output_tokens_per_s"].status == "regressed"


def test_error_rate_uses_an_absolute_tolerance():
    _, rows = compare_baseline(summary(error_rate=0.0008), summary(error_rate=0.0), Gates())
    row = rows_by_name(rows)["error_rate"]
    assert row.delta_pct is None and row.status == "within noise"
    _, rows = compare_baseline(summary(error_rate=0.005), summary(error_rate=0.001), Gates())
    assert rows_by_name(rows)["error_rate"].status == "regressed"


def test_nothing_in_common_is_skipped():
    finding, rows = compare_baseline(summary(), {"run_id": "empty"}, Gates())  # no requests: nothing measured
    assert finding.verdict == SKIPPED and rows == []


def test_verdict_changes_are_listed():
    now = summary(findings=[{"check": "leak.rss", "verdict": "FAIL"}])
    before = summary(findings=[{"check": "leak.rss", "verdict": "PASS"}])
    finding, _ = compare_baseline(now, before, Gates())
    assert finding.details["verdict_changes"] == [{"check": "leak.rss", "baseline": "PASS", "current": "FAIL"}]


def test_sample_counts_are_not_compared_as_latency():
    current, before = summary(), summary(run_id="base")
    current["latency_ms"]["ttft"]["count"], before["latency_ms"]["ttft"]["count"] = 50, 5000
    finding, rows = compare_baseline(current, before, Gates())
    assert not any(r.name.endswith(".count") for r in rows)
    assert finding.verdict == PASS and "0 improved" in finding.evidence


def with_goodput(data, share, slo_ms=None):
    return {**data, "goodput": {"slo_ms": slo_ms or {"ttft": 500.0}, "requests": 1000, "good": round(1000 * share),
                                "share": share, "windows": []}}


def test_goodput_is_compared_only_under_the_same_slo():
    finding, rows = compare_baseline(with_goodput(summary(), 0.95), with_goodput(summary(run_id="base"), 0.97), Gates())
    row = rows_by_name(rows)["goodput"]
    assert row.status == "regressed" and row.tolerance_text == "1 pp" and row.unit == "fraction"
    assert finding.verdict == SUSPECT and "goodput" in finding.evidence
    assert rows_by_name(compare_baseline(with_goodput(summary(), 0.965), with_goodput(summary(), 0.97),
                                         Gates())[1])["goodput"].status == "within noise"
    other_slo = with_goodput(summary(run_id="base"), 0.99, {"ttft": 200.0})
    assert "goodput" not in rows_by_name(compare_baseline(with_goodput(summary(), 0.95), other_slo, Gates())[1])
    assert "goodput" not in rows_by_name(compare_baseline(summary(), with_goodput(summary(), 0.97), Gates())[1])
