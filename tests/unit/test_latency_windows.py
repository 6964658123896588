import gc
import weakref
from dataclasses import dataclass

import pytest
from hdrh.histogram import HdrHistogram

from soak.store.histograms import decode_histogram
from soak.telemetry.latency import LatencyWindows, window_bounds, window_index


@dataclass
class Rec:
    scenario: str
    intended_t: float
    e2e_ms: float
    ttft_ms: float | None = 10.0
    itl_ms: tuple = (1.0, 2.0)
    queue_ms: float = 0.0
    lag_ms: float = 0.5
    output_tokens: int | None = 3
    prompt_tokens: int | None = 5
    error_class: str | None = None
    expected_error: bool = False


def test_window_index_and_bounds():
    assert window_index(5, warmup_s=10, window_s=20) == -1
    assert window_index(10, 10, 20) == 0
    assert window_index(49.9, 10, 20) == 1
    assert window_bounds(1, 10, 20) == (30, 50)
    assert window_bounds(-1, 10, 20) == (0, 10)


def test_windows_merge_scenarios_and_keep_exact_percentiles():
    windows = LatencyWindows(t0_epoch_s=1000.0, warmup_s=0.0, window_s=10.0)
    for i in range(1, 1001):
        windows.add(Rec("a" if i % 2 else "b", 1000.0 + 1.0, e2e_ms=float(i)))
    latency, requests = windows.flush_windows(now_s=5.0)
    e2e_all = next(r for r in latency if r.scenario == "*" and r.metric == "e2e")
    assert e2e_all.count == 1000
    assert e2e_all.p50_ms == pytest.approx(500, rel=0.002)
    assert e2e_all.p99_ms == pytest.approx(990, rel=0.002)
    merged = decode_histogram(e2e_all.hist)
    assert merged.get_total_count() == 1000
    requests_all = next(r for r in requests if r.scenario == "*")
    assert requests_all.requests == 1000 and requests_all.ok == 1000
    assert {r.scenario for r in requests} == {"a", "b", "*"}


def test_errors_are_counted_by_class_and_not_timed_as_successes():
    windows = LatencyWindows(0.0, 0.0, 10.0)
    windows.add(Rec("s", 1.0, e2e_ms=30000.0, ttft_ms=None, error_class="timeout"))
    windows.add(Rec("s", 1.0, e2e_ms=5.0, error_class="http_4xx", expected_error=True))
    windows.add(Rec("s", 1.0, e2e_ms=5.0, error_class="cancelled"))
    windows.add(Rec("s", 1.0, e2e_ms=50.0, lag_ms=1500.0))
    latency, requests = windows.flush_windows(now_s=1.0)
    counts = next(r for r in requests if r.scenario == "*")
    assert counts.err_timeout == 1 and counts.expected_errors == 1 and counts.cancelled == 1
    assert counts.ok == 1 and counts.late_sends_1s == 1
    e2e = next(r for r in latency if r.scenario == "*" and r.metric == "e2e")
    assert e2e.count == 1 and e2e.max_ms == pytest.approx(50, rel=0.01)


def test_only_changed_windows_are_flushed_and_old_ones_forgotten():
    windows = LatencyWindows(0.0, 0.0, 10.0, keep_open_s=5.0)
    windows.add(Rec("s", 1.0, e2e_ms=5.0))
    assert windows.flush_windows(now_s=2.0)[1]
    assert windows.flush_windows(now_s=3.0) == ([], [])
    windows.flush_windows(now_s=100.0)
    windows.add(Rec("s", 1.0, e2e_ms=7.0))  # too late: its window was written for good
    assert windows.flush_windows(now_s=100.0) == ([], [])
    assert windows.dropped_late == 1


def test_forgotten_windows_free_their_histograms_without_the_cyclic_collector():
    # hdrh's encoder points back at its histogram; left as a cycle, closed windows' count arrays wait for a
    # rare full collection and the harness's RSS climbs by ~100 MiB per million requests.
    windows = LatencyWindows(0.0, warmup_s=0.0, window_s=10.0, keep_open_s=0.0)
    gc.collect()
    gc.disable()
    try:
        for second in range(60):
            windows.add(Rec("a" if second % 2 else "b", float(second), e2e_ms=5.0 + second))
            windows.flush_windows(now_s=float(second + 1))
        windows.progress()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found = [obj for obj in gc.garbage if isinstance(obj, HdrHistogram)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert found == []
    assert len(windows._cells) <= 2  # the windows still open


def test_decoded_histograms_are_freed_by_reference_counting_and_read_back_exactly():
    windows = LatencyWindows(0.0, 0.0, 10.0)
    for i in range(1, 201):
        windows.add(Rec("s", 1.0, e2e_ms=float(i)))
    latency, _ = windows.flush_windows(now_s=1.0)
    text = next(r for r in latency if r.scenario == "*" and r.metric == "e2e").hist
    decoded = decode_histogram(text)
    assert decoded.get_total_count() == 200
    assert decoded.get_value_at_percentile(50) == HdrHistogram.decode(text).get_value_at_percentile(50)
    assert decoded.encode() == HdrHistogram.decode(text).encode()
    alive = weakref.ref(decoded)
    gc.disable()
    try:
        del decoded
        assert alive() is None
    finally:
        gc.enable()


def test_bulk_recording_lands_where_hdrh_puts_each_value():
    """record_many_ms (numpy, for a request's inter-token gaps) fills the same counts as record_ms one by one."""
    import numpy as np

    from soak.store.histograms import new_histogram
    from soak.telemetry.latency import record_many_ms, record_ms

    rng = np.random.default_rng(7)
    values = [0.0004, 0.001, 0.5, 1.0, 1.024, 2.047, 2.048, 19.999, 20.0, 1e6, 4e6, *rng.lognormal(2.0, 2.0, 2000)]
    one_by_one, bulk = new_histogram(), new_histogram()
    for value in values:
        record_ms(one_by_one, value)
    record_many_ms(bulk, [*values, float("nan")])
    assert list(bulk.counts) == list(one_by_one.counts)
    assert bulk.get_total_count() == one_by_one.get_total_count() == len(values)
    assert (bulk.get_max_value(), bulk.get_min_value()) == (one_by_one.get_max_value(), one_by_one.get_min_value())


def test_a_cell_is_made_once_per_window_and_scenario_not_per_request(monkeypatch):
    import soak.telemetry.latency as latency

    made, real_cell = [], latency._Cell

    def counted_cell():
        made.append(real_cell())
        return made[-1]

    monkeypatch.setattr(latency, "_Cell", counted_cell)
    windows = LatencyWindows(t0_epoch_s=1000.0, warmup_s=0.0, window_s=10.0)
    made.clear()  # the live figures' own cell
    for i in range(200):
        windows.add(Rec("a" if i % 2 else "b", 1001.0 + (i % 18), e2e_ms=5.0))
    assert len(made) == 4  # (window 0, a), (0, b), (1, a), (1, b): each cell five 92 KiB histograms


def test_with_an_slo_each_request_row_counts_the_requests_that_met_it():
    from soak.slo import SloTargets

    windows = LatencyWindows(0.0, 0.0, 10.0, slo=SloTargets(ttft_ms=50.0, e2e_ms=500.0))
    windows.add(Rec("a", 1.0, e2e_ms=100.0))  # good
    windows.add(Rec("a", 2.0, e2e_ms=600.0))  # too slow end to end
    windows.add(Rec("b", 3.0, e2e_ms=100.0, ttft_ms=60.0))  # first token too late
    windows.add(Rec("b", 4.0, e2e_ms=100.0, error_class="http_5xx"))  # failed: never good
    windows.add(Rec("b", 5.0, e2e_ms=100.0))  # good
    windows.add(Rec("b", 15.0, e2e_ms=100.0))  # good, next window
    _, rows = windows.flush_windows(now_s=5.0)
    met = {(r.window_index, r.scenario): r.slo_met for r in rows}
    assert met == {(0, "a"): 1, (0, "b"): 1, (0, "*"): 2, (1, "b"): 1, (1, "*"): 1}


def test_without_an_slo_the_count_is_null_not_zero():
    windows = LatencyWindows(0.0, 0.0, 10.0)
    windows.add(Rec("a", 1.0, e2e_ms=100.0))
    _, rows = windows.flush_windows(now_s=5.0)
    assert {r.slo_met for r in rows} == {None}
