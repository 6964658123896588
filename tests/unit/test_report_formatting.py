"""Human units at the report's edge."""

from __future__ import annotations

import pytest

from soak.report.formatting import (
    MISSING,
    format_bytes,
    format_elapsed,
    format_hours,
    format_number,
    format_percent,
    format_utc,
    format_value,
    quantity_texts,
)
from soak.report.sections import exhaustion_lines
from support.records import summary_finding

pytestmark = pytest.mark.timeout(30)
MIB = 2**20


@pytest.mark.parametrize(("value", "unit", "expected"), [
    (40 * MIB, "bytes/h", "40.0 MiB/h"),
    (40 * MIB, "bytes_per_h", "40.0 MiB/h"),
    (1843.2, "bytes/request", "1.80 KiB/request"),
    (3 * 2**30, "bytes", "3.00 GiB"),
    (0.012, "fraction of KV cache", "1.20 % of KV cache"),
    (0.5, "ratio", "50.0 %"),
    (0.42, "%", "0.42 %"),
    (0.25, "s", "250 ms"),
    (12.0, "s", "12.0 s"),
    (41.0, "% over run", "41.0 % over run"),
    (2.0, "fds/h", "2.00 fds/h"),
    (None, "bytes/h", "—"),
])
def test_quantity_value(value, unit, expected):
    assert quantity_texts(value, unit)["value"] == expected


def test_ci_and_threshold_share_the_value_unit():
    texts = quantity_texts(40 * MIB, "bytes/h", [35 * MIB, 45 * MIB], 16 * MIB)
    assert texts == {"value": "40.0 MiB/h", "ci": "95 % CI 35.0 … 45.0 MiB/h", "threshold": "16.0 MiB/h",
                     "detection_limit": ""}
    assert quantity_texts(1.0, "ms", [float("nan"), 2.0])["ci"] == ""


@pytest.mark.parametrize(("value", "expected"), [
    (0, "0"), (1234567.0, "1,234,567"), (123.4, "123"), (12.34, "12.3"), (1.234, "1.23"), (0.001234, "0.00123"),
    (float("nan"), "—"), (None, "—"), (True, "—"),
])
def test_format_number(value, expected):
    assert format_number(value) == expected


def test_times_and_misc():
    assert format_elapsed(3723.4) == "1:02:03" and format_elapsed(90 * 3600) == "90:00:00"
    assert format_utc("2026-12-02T11:15:00+01:00") == "2026-12-02 10:15:00 UTC"
    assert format_utc("2026-12-02T10:15:00Z") == "2026-12-02 10:15:00 UTC"
    assert format_utc("yesterday") == "yesterday" and format_utc(None) == "—"
    assert format_bytes(512) == "512 B" and format_percent(0.0042) == "0.42 %"
    assert format_value(["a", "b"]) == "a, b" and format_value({}) == "—" and format_value({"k": 1}) == "k 1"
    # No Python reprs and no JSON in visible text: booleans in words, None as a dash, nested values flattened.
    assert format_value({"on": True, "none": None, "list": [{"pid": 7, "rss": 1.5}]}) == "on yes, none —, list pid 7, rss 1.50"


@pytest.mark.parametrize("hours, expected", [(0.5, "30m"), (2.25, "2.2 h"), (31.4, "31 h"), (300.0, "12 days"),
                                             (None, MISSING)])
def test_format_hours(hours, expected):
    assert format_hours(hours) == expected


def test_the_banner_projects_only_found_leaks_soonest_first():
    def leak(check, verdict, resource, hours):
        return summary_finding(check=check, verdict=verdict,
                               exhaustion={"resource": resource, "headroom": 1.0, "hours": hours})

    findings = [leak("leak.rss", "SUSPECT", "host memory", 60.0), leak("leak.vram", "FAIL", "GPU memory", 5.0),
                leak("leak.fds", "PASS", "fds", 3.0), leak("leak.kv", "INCONCLUSIVE", "KV", 1.0),
                leak("leak.rss", "FAIL", "host memory", None), summary_finding(check="hang", verdict="FAIL")]
    assert exhaustion_lines(findings) == ["GPU memory runs out in 5.0 h at this slope (leak.vram)",
                                          "host memory runs out in 60 h at this slope (leak.rss)"]


def test_the_detection_limit_shares_the_value_unit():
    texts = quantity_texts(1 * MIB, "bytes/h", [-2 * MIB, 3 * MIB], 16 * MIB, 3 * MIB)
    assert texts["detection_limit"] == "3.00 MiB/h"
    assert quantity_texts(1.0, "ms")["detection_limit"] == ""


def test_short_times_rates_and_shares():
    from soak.report.formatting import format_rate, format_seconds, format_share

    assert [format_seconds(x) for x in (0.0015, 4.31, 12.2, 125.0)] == ["2 ms", "4.3 s", "12 s", "2m5s"]
    assert [format_rate(x) for x in (2.0, 2.5, 1 / 3)] == ["2 req/s", "2.5 req/s", "0.333 req/s"]
    assert format_share(0.0) == "0 %" and format_share(0.5) == "50.0 %"


def test_the_threshold_keeps_its_own_size_and_a_wide_ci_does_not_pick_the_unit():
    mib, gib = 2**20, 2**30
    fast = quantity_texts(3.1 * gib, "bytes/h", [2.4 * gib, 3.9 * gib], 16 * mib, 3.9 * gib)
    assert (fast["value"], fast["threshold"], fast["detection_limit"]) == ("3.10 GiB/h", "16.0 MiB/h", "3.90 GiB/h")
    flat = quantity_texts(0.0, "bytes/h", [-1.2 * gib, 33.5 * mib], 16 * mib, 33.5 * mib)
    assert (flat["value"], flat["ci"], flat["threshold"]) == ("0 MiB/h", "95 % CI -1,229 … 33.5 MiB/h", "16.0 MiB/h")


def test_a_leaks_growth_per_scenario_reads_as_lines():
    from soak.contracts import SummaryScenarioGrowth
    from soak.report.sections import attribution_lines

    lines = attribution_lines([SummaryScenarioGrowth(scenario="cancel (cancelled)", per_request=1.08 * 2**20,
                                                     ci=[0.72 * 2**20, 1.44 * 2**20], unit="bytes/request", share=0.9)])
    assert lines == ["cancel (cancelled): 1.08 MiB/request (95 % CI 0.72 … 1.44 MiB/request)"]
