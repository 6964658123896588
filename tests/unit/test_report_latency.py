"""Latency tables: merged HDR histograms give the percentiles of all values; stored percentiles are the fallback."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from soak.report.latency import decode, latency_tables, merge, overall_stats, window_percentile_ms, window_stats
from soak.report.reading import LatencyWindow

pytestmark = pytest.mark.timeout(60)


def hist_of(values_ms, highest_us: int = 3_600_000_000) -> HdrHistogram:
    hist = HdrHistogram(1, highest_us, 3)
    for value in values_ms:
        hist.record_value(max(int(value * 1000), 1))
    return hist


def window(index: int, values_ms, scenario: str = "*", metric: str = "ttft", with_hist: bool = True
           ) -> LatencyWindow:
    hist = hist_of(values_ms)
    return LatencyWindow(window_index=index, scenario=scenario, metric=metric, start_s=60.0 * index,
                         end_s=60.0 * (index + 1), count=len(values_ms),
                         **{f"p{p}_ms": hist.get_value_at_percentile(p) / 1000 for p in (50, 95, 99)},
                         hist=hist.encode().decode() if with_hist else None)


def test_merge_equals_one_histogram_of_all_values():
    rng = np.random.default_rng(1)
    parts = [rng.lognormal(5, 1, 500) for _ in range(6)]
    merged = merge(hist_of(part) for part in parts)
    direct = hist_of(np.concatenate(parts))
    for pct in (50, 95, 99, 99.9):
        assert merged.get_value_at_percentile(pct) == direct.get_value_at_percentile(pct)
    assert merged.get_total_count() == 3000


def test_merge_widens_to_the_largest_histogram():
    small = hist_of([5.0], highest_us=60_000_000)
    big = hist_of([50_000.0], highest_us=3_600_000_000)
    assert merge([small, big]).get_max_value() >= 50_000_000


def test_overall_after_warm_up_and_first_last_windows():
    rng = np.random.default_rng(2)
    values = {i: rng.lognormal(4 + 0.1 * i, 0.3, 300) for i in range(-1, 5)}
    rows = [window(i, v) for i, v in values.items()]
    table = latency_tables(rows)[0]
    ttft = table.rows[0]
    direct = hist_of(np.concatenate([values[i] for i in range(5)]))  # warm-up window −1 left out
    assert ttft.overall.p99 == direct.get_value_at_percentile(99) / 1000
    assert ttft.overall.count == 1500 and not ttft.overall.approx
    assert ttft.first.p50 == hist_of(values[0]).get_value_at_percentile(50) / 1000
    assert ttft.last.p50 == hist_of(values[4]).get_value_at_percentile(50) / 1000


def test_missing_histogram_falls_back_to_stored_and_marks_overall_approximate():
    rows = [window(0, [10.0] * 100, with_hist=False), window(1, [30.0] * 300)]
    stats = overall_stats(rows)
    assert stats.approx and stats.count == 400
    assert stats.p50 == pytest.approx((10.0 * 100 + 30.0 * 300) / 400, rel=1e-3)
    assert window_stats(rows[0]).p50 == pytest.approx(10.0, rel=1e-3)


def test_corrupt_histogram_is_treated_as_missing():
    assert decode("not-a-histogram") is None and decode(None) is None


def test_window_percentile_prefers_stored_then_histogram():
    row = window(0, [20.0] * 50)
    assert window_percentile_ms(replace(row, p99_ms=7.0), 99) == 7.0
    assert window_percentile_ms(replace(row, p99_ms=None), 99) == pytest.approx(20.0, rel=1e-3)
    assert window_percentile_ms(replace(row, p99_ms=None, hist=None), 99) is None


def test_tables_per_scenario_all_first():
    rows = [window(0, [5.0], scenario=s, metric=m) for s in ("zeta", "*", "alpha") for m in ("ttft", "e2e", "lag")]
    tables = latency_tables(rows)
    assert [t.scenario for t in tables] == ["*", "alpha", "zeta"]
    assert [r.metric for r in tables[0].rows] == ["ttft", "e2e"]  # no ITL stored; lag is not a table row
    assert tables[0].label == "all scenarios"


def test_only_warm_up_windows_give_no_table():
    assert latency_tables([window(-1, [5.0])]) == []
