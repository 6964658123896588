"""RequestRecord, client-health counters and hook calling."""

from __future__ import annotations

import pytest

from soak.load.health import ClientHealth
from soak.load.hooks import HookCaller, LoadHooks
from soak.load.records import RequestRecord


def record(**overrides):
    fields = dict(scenario="chat_short", kind="chat", intended_t=100.0, sent_t=100.002, first_token_t=100.1,
                  finish_t=100.5, ttft_ms=100.0, e2e_ms=500.0, itl_ms=(10.0, 12.0), queue_ms=0.0, lag_ms=2.0,
                  output_tokens=3, prompt_tokens=20)
    return RequestRecord(**{**fields, **overrides})


def test_errors_cancels_and_expected_errors():
    assert not record().is_error
    assert record(error_class="bad_stream").is_error
    assert not record(error_class="cancelled").is_error
    assert not record(error_class="http_4xx", expected_error=True).is_error
    assert record().itl_mean_ms == pytest.approx(11.0)
    assert record(itl_ms=()).itl_mean_ms is None


def test_records_survive_the_wire_between_processes():
    original = record(error_class="http_5xx", status_code=503, error_message="HTTP 503: overloaded")
    wire = original.to_wire()
    assert isinstance(wire["itl_ms"], list)
    assert RequestRecord.from_wire(wire) == original


def test_lag_percentiles_late_sends_and_merging():
    health = ClientHealth()
    for lag_ms in [1.0] * 98 + [20.0, 1500.0]:
        health.record_lag(lag_ms)
    health.sends, health.skipped = 100, 7
    assert health.lag_percentile_ms(50) == pytest.approx(1.0, rel=0.03)
    assert health.lag_percentile_ms(99) == pytest.approx(20.0, rel=0.03)
    assert health.late_sends_1s == 1 and health.lag_max_ms == 1500.0
    other = ClientHealth.from_wire(health.to_wire())
    other.merge(health)
    counters = other.counters(in_flight=3)
    assert counters.sends == 200 and counters.skipped == 14 and counters.late_sends_1s == 2
    assert counters.lag_p99_ms == pytest.approx(20.0, rel=0.03) and counters.in_flight == 3
    assert ClientHealth().counters(0).lag_p99_ms is None


def test_hooks_get_event_data_as_a_dict_and_failures_are_contained(caplog):
    seen = []
    HookCaller(LoadHooks(on_event=lambda kind, message, data: seen.append((kind, data)))).event(
        "phase", "m", {"phase_kind": "x"})
    assert seen == [("phase", {"phase_kind": "x"})]

    def broken(_record):
        raise RuntimeError("consumer down")

    HookCaller(LoadHooks(on_request=broken, on_idle_probe=lambda i, d: 1 / 0)).request(record())
    HookCaller(LoadHooks(on_idle_probe=lambda i, d: 1 / 0)).idle_probe(0, True)
    assert "consumer down" in caplog.text
