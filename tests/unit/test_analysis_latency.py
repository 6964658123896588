"""creep.*: log window percentile trends, one percentile level per series."""

import math

import numpy as np
import pytest

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED
from soak.analysis.gates import Gates
from soak.analysis.inputs import LatencyStats, LatencyWindow
from soak.analysis.latency import check_creep, check_e2e, check_ttft, choose_level
from support.synthetic import bare_run

RUN_S = 24 * 3600.0


def windows_with(count, p99_of, run_s=RUN_S):
    run = bare_run(run_s)
    rows = []
    for w in run.windows:
        p99 = p99_of(w)
        stats = LatencyStats(count=count, p50_ms=p99 / 4, p90_ms=p99 / 2, p95_ms=p99 / 1.5, p99_ms=p99)
        rows.append(LatencyWindow(w.index, w.start_s, w.end_s, ttft=stats, e2e=stats))
    return bare_run(run_s, latency_windows=tuple(rows))


def noisy(seed, creep_frac=0.0):
    rng = np.random.default_rng(seed)
    return lambda w: 800 * (1 + creep_frac) ** (w.mid_s / RUN_S) * math.exp(rng.normal(0, 0.05))


@pytest.mark.parametrize("counts, level, usable", [
    ([2000] * 30, "p99", 30),
    ([500] * 30, "p95", 30),
    ([150] * 30, "p90", 30),
    ([2000] * 20 + [300] * 20, "p95", 40),   # P99 only in half: not "most" windows
    ([2000] * 25 + [300] * 15, "p99", 25),
    ([50] * 30, "p90", 0),
])
def test_choose_level(counts, level, usable):
    assert choose_level(counts, 20) == (level, usable)


def test_flat_latency_passes_at_p99():
    finding = check_ttft(windows_with(5000, noisy(0)), Gates())
    assert finding.verdict == PASS and finding.percentile_used == "p99"
    assert finding.unit == "% over run" and finding.threshold == 25


def test_creep_fails_and_line_is_log_space():
    finding = check_e2e(windows_with(5000, noisy(1, creep_frac=1.0)), Gates())
    assert finding.verdict == FAIL
    assert finding.value == pytest.approx(100 * (2 ** (47 / 48 * 0.95) - 1), abs=12)
    assert finding.trend["space"] == "log"
    start = math.exp(finding.trend["intercept"])
    assert 700 < start < 1100
    assert "P99 E2E latency rises" in finding.evidence


def test_sparse_windows_use_a_lower_percentile():
    finding = check_ttft(windows_with(300, noisy(2, creep_frac=1.0)), Gates())
    assert finding.percentile_used == "p95" and finding.verdict == FAIL
    assert "P95 TTFT" in finding.evidence


def test_too_few_samples_is_inconclusive_and_says_why():
    finding = check_ttft(windows_with(40, noisy(3)), Gates())
    assert finding.verdict == INCONCLUSIVE
    assert "≥ 100" in finding.evidence and "< 20 usable windows" in finding.evidence


def test_no_samples_is_skipped():
    assert check_ttft(bare_run(RUN_S), Gates()).verdict == SKIPPED
    assert check_creep(bare_run(RUN_S), Gates(), "itl", 0.25).verdict == SKIPPED


def test_excluded_windows_are_left_out():
    run = windows_with(5000, lambda w: 10_000.0 if w.excluded else 800.0)
    finding = check_ttft(run, Gates())
    assert finding.verdict == PASS and finding.details["windows_used"] == 48


def test_histogram_stats():
    from hdrh.histogram import HdrHistogram
    histogram = HdrHistogram(1, 60_000, 3)
    for value in range(1, 1001):
        histogram.record_value(value)
    stats = LatencyStats.from_histogram(histogram)
    assert stats.count == 1000
    assert stats.p99_ms == pytest.approx(990, rel=0.01) and stats.p50_ms == pytest.approx(500, rel=0.01)
