"""creep.*: log window percentile trends, one percentile level per series."""

import math

import numpy as np
import pytest

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED
from soak.analysis.gates import Gates
from soak.analysis.inputs import LatencyStats, WindowLatency
from soak.analysis.latency import check_creep, check_e2e, check_ttft, choose_level
from support.records import summary_finding
from support.synthetic import bare_run

RUN_S = 24 * 3600.0


def windows_with(count, p99_of, run_s=RUN_S):
    run = bare_run(run_s)
    rows = []
    for w in run.windows:
        p99 = p99_of(w)
        stats = LatencyStats(count=count, p50_ms=p99 / 4, p90_ms=p99 / 2, p95_ms=p99 / 1.5, p99_ms=p99)
        rows.append(WindowLatency(w.index, w.start_s, w.end_s, ttft=stats, e2e=stats))
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
    assert finding.trend.space == "log"
    start = math.exp(finding.trend.intercept)
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


# --- judged at comparable load -------------------------------------------------------------------

def diurnal_rate(w, phase=math.pi):
    """Offered req/s: ×3 trough to peak over the day; phase π starts while load is falling."""
    return 2.0 * 3.0 ** (0.5 * math.sin(2 * math.pi * w.mid_s / RUN_S + phase))


def loaded_run(p99_of, rate_of, sends=True, run_s=RUN_S, count=5000):
    """Latency windows whose P99 is `p99_of(w)`, with the offered load `rate_of(w)` as sends
    (or, without sends, as the server's in-flight gauge)."""
    from soak.analysis.inputs import ServerSeries, WindowRequests
    run = windows_with(count, p99_of, run_s)
    rows = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=1,
                               sends=round(rate_of(w) * (w.end_s - w.start_s)) if sends else None)
                 for w in run.windows)
    t_s = np.arange(0.0, run_s, 60.0)
    mids = np.array([w.mid_s for w in run.windows])
    running = np.interp(t_s, mids, [rate_of(w) * 4 for w in run.windows])
    return bare_run(run_s, latency_windows=run.latency_windows, request_windows=rows,
                    server=ServerSeries(t_s=t_s, running=running))


def follows_load(seed, rate_of=diurnal_rate, creep_frac=0.0, k=0.5):
    rng = np.random.default_rng(seed)
    return lambda w: (800 * (rate_of(w) / 2.0) ** k * (1 + creep_frac) ** (w.mid_s / RUN_S)
                      * math.exp(rng.normal(0, 0.05)))


@pytest.mark.parametrize("phase", [0.0, math.pi])
def test_latency_that_follows_a_diurnal_load_is_no_creep(phase):
    def rate(w):
        return diurnal_rate(w, phase)
    finding = check_ttft(loaded_run(follows_load(10, rate), rate), Gates())
    assert finding.verdict == PASS, finding.evidence
    assert finding.details["method"] == "trend at equal load"
    assert finding.details["load_elasticity"] == pytest.approx(0.5, abs=0.1)


def test_degradation_at_equal_load_fails_and_names_the_load():
    finding = check_ttft(loaded_run(follows_load(11, creep_frac=0.8), diurnal_rate), Gates())
    assert finding.verdict == FAIL
    assert finding.value == pytest.approx(80 * 47 / 48 * 0.95, abs=20)
    assert "at equal offered rate: 1.2–3.5 req/s" in finding.evidence
    assert "P99 ∝ load^0.5" in finding.evidence


def test_in_flight_gauge_stands_in_for_missing_sends():
    finding = check_ttft(loaded_run(follows_load(12), diurnal_rate, sends=False), Gates())
    assert finding.verdict == PASS and finding.details["load_source"] == "mean in-flight requests"


def test_a_pure_ramp_cannot_be_told_from_creep():
    def ramp(w):
        return 1.0 + 3.0 * w.mid_s / RUN_S
    finding = check_ttft(loaded_run(follows_load(13, ramp), ramp), Gates())
    assert finding.verdict == INCONCLUSIVE
    assert "cannot be told from latency following load" in finding.evidence


def test_flat_load_keeps_the_trend_over_time():
    finding = check_ttft(loaded_run(noisy(14), lambda w: 2.0), Gates())
    assert finding.verdict == PASS and finding.details["method"] == "trend over time"


def test_p99_step_at_hour_14_fails_with_its_size():
    # Seed 1: the trend alone is only SUSPECT (Hamed–Rao reads the step as autocorrelation).
    rng = np.random.default_rng(1)
    step = check_ttft(windows_with(5000, lambda w: 800 * (1.35 if w.mid_s > 14 * 3600 else 1.0)
                                   * math.exp(rng.normal(0, 0.05))), Gates())
    assert step.verdict == FAIL
    assert step.details["step"]["found"] and step.details["step"]["t_s"] == pytest.approx(14 * 3600, abs=1800)
    assert step.value == pytest.approx(35, abs=8)
    assert "stepped up" in step.evidence and "and stayed" in step.evidence


def test_every_creep_finding_has_a_detection_limit():
    passed = check_ttft(windows_with(5000, noisy(16)), Gates())
    assert passed.detection_limit is not None and passed.detection_limit < 25
    assert "this run rules out rises above" in passed.evidence
    at_load = check_ttft(loaded_run(follows_load(17), diurnal_rate), Gates())
    assert at_load.detection_limit is not None and "this run rules out" in at_load.evidence


def test_a_slice_of_the_day_under_a_queue_is_no_creep():
    # A 2 h run on the day's rise: the offered rate grows ~15 % (under the 1.2× spread that counts as
    # varying), a queue near saturation turns that into ~+40 % P99. Judged against the clock alone
    # that was a FAIL; the load moved with time, so the check says it cannot tell.
    run_s = 2 * 3600.0

    def rate(w):
        return 10.0 * (1 + 0.15 * w.mid_s / run_s)

    def p99(w):
        utilisation = 0.7 * rate(w) / 10.0
        return 300 / (1 - utilisation) * math.exp(rng.normal(0, 0.03))
    rng = np.random.default_rng(20)
    finding = check_ttft(loaded_run(p99, rate, run_s=run_s), Gates())
    assert finding.verdict == INCONCLUSIVE, finding.evidence
    assert finding.details["method"] == "trend at equal load"
    assert "moved with time" in finding.evidence


def test_a_load_that_only_scatters_keeps_the_trend_over_time():
    rng = np.random.default_rng(21)
    rates = {}

    def rate(w):
        return rates.setdefault(w.index, rng.poisson(2.0 * (w.end_s - w.start_s)) / (w.end_s - w.start_s))
    finding = check_ttft(loaded_run(noisy(22), rate), Gates())
    assert finding.verdict == PASS and finding.details["method"] == "trend over time"


def test_load_drift_is_told_from_counting_noise():
    from soak.analysis.load_model import LoadSeries
    rng = np.random.default_rng(23)
    t_s = np.arange(48) * 150.0
    flat = rng.poisson(1500, 48).astype(float)
    rising = rng.poisson(1500 * (1 + 0.1 * t_s / t_s[-1])).astype(float)
    assert not LoadSeries(flat / 150, "offered rate", "req/s", flat, t_s).matters()
    drifting = LoadSeries(rising / 150, "offered rate", "req/s", rising, t_s)
    assert drifting.drifts() and drifting.matters()
    assert not LoadSeries(rising / 150, "mean in-flight requests", "in flight").drifts()


def test_a_percentile_still_settling_at_the_end_is_inconclusive_not_fail():
    # P99 climbing towards its level (a batch growing to its steady size) and still climbing at the end.
    rng = np.random.default_rng(30)
    finding = check_ttft(windows_with(5000, lambda w: 800 * math.exp(-0.8 * math.exp(-w.mid_s / (0.3 * RUN_S))
                                                                      + rng.normal(0, 0.02))), Gates())
    assert finding.verdict == INCONCLUSIVE, finding.evidence
    assert "still warming up at the end of the run" in finding.evidence and "longer" in finding.next_step
    assert finding.details["warmup"]["P99 TTFT"]["still_settling"]


def test_a_warm_up_tail_is_cut_from_the_data_and_the_cut_is_in_the_details():
    rng = np.random.default_rng(31)
    finding = check_ttft(windows_with(5000, lambda w: 800 * math.exp(-0.6 * math.exp(-w.mid_s / (0.06 * RUN_S))
                                                                      + rng.normal(0, 0.02))), Gates())
    assert finding.verdict == PASS, finding.evidence
    cut = finding.details["warmup"]["P99 TTFT"]
    assert cut["method"] == "mser-5" and not cut["still_settling"] and cut["t_s"] > 2 * 3600


def test_a_straight_creep_is_not_taken_for_a_warm_up():
    finding = check_e2e(windows_with(5000, noisy(32, creep_frac=1.0)), Gates())
    assert finding.verdict == FAIL and finding.details["warmup"]["P99 E2E latency"]["method"] == "configured"


def test_the_cut_the_data_found_is_drawn_on_the_latency_chart():
    from soak.report.charts import Frame
    from soak.report.context import trends_by_chart
    rng = np.random.default_rng(31)
    finding = check_ttft(windows_with(5000, lambda w: 800 * math.exp(-0.6 * math.exp(-w.mid_s / (0.06 * RUN_S))
                                                                      + rng.normal(0, 0.02))), Gates())
    frame = Frame(time_unit_s=3600.0, time_label="hours since start", end_s=RUN_S)
    lines = trends_by_chart([summary_finding(**finding.to_dict())], frame)["chart-ttft"]
    cut_h = round(finding.details["warmup"]["P99 TTFT"]["t_s"] / 3600, 5)
    assert any(t["name"] == "warm-up end (from the data): P99 TTFT" and t["x"] == [cut_h, cut_h] for t in lines)


def test_a_percentile_still_settling_is_marked_on_its_chart():
    from soak.report.charts import Frame
    from soak.report.context import trends_by_chart
    rng = np.random.default_rng(30)
    finding = check_ttft(windows_with(5000, lambda w: 800 * math.exp(-0.8 * math.exp(-w.mid_s / (0.3 * RUN_S))
                                                                      + rng.normal(0, 0.02))), Gates())
    frame = Frame(time_unit_s=3600.0, time_label="hours since start", end_s=RUN_S)
    (line,) = trends_by_chart([summary_finding(**finding.to_dict())], frame)["chart-ttft"]
    assert line["name"] == "still settling (from the data): P99 TTFT"


def test_a_warm_up_that_leaves_too_few_windows_is_inconclusive_and_says_so():
    # A short run (23 judged windows) whose P99 rises fastest early: the warm-up found from the data ends after
    # ten windows and leaves 13 (< 20). A creep cannot be told from that warm-up: INCONCLUSIVE with the reason,
    # never a trend of too few points ("flat at +nan %").
    run = bare_run(135.0, warmup_s=20.0, window_s=5.0)
    rng = np.random.default_rng(40)
    rows = []
    for w in run.windows:
        x = max(w.mid_s - 20.0, 0.0) / 115.0
        p99 = 6.0 * math.exp(2.0 * min(x, 0.45) / 0.45 + 0.3 * max(x - 0.45, 0.0) + rng.normal(0, 0.03))
        stats = LatencyStats(count=5000, p50_ms=p99 / 4, p90_ms=p99 / 2, p95_ms=p99 / 1.5, p99_ms=p99)
        rows.append(WindowLatency(w.index, w.start_s, w.end_s, ttft=stats, e2e=stats))
    finding = check_ttft(bare_run(135.0, warmup_s=20.0, window_s=5.0, latency_windows=tuple(rows)), Gates())
    assert finding.details["warmup"]["P99 TTFT"]["method"] == "mser-5", finding.details["warmup"]
    assert finding.verdict == INCONCLUSIVE, finding.evidence
    assert "judged windows (< 20 needed)" in finding.evidence and "nan" not in finding.evidence
    assert "longer" in finding.next_step
