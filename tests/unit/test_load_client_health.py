"""Client health: the event-loop lag monitor notices its own lateness, and health messages stay compatible."""

from __future__ import annotations

import time

import gevent
import pytest
from gevent import monkey

from soak.load.health import ClientHealth, LoopLagMonitor

_blocking_sleep = monkey.get_original("time", "sleep")


def wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        gevent.sleep(0.01)


def test_the_monitor_sees_the_loop_held_up():
    """A 300 ms computation on the loop (a blocking call) shows as one tick about 300 ms late."""
    health = ClientHealth()
    monitor = LoopLagMonitor(health, tick_s=0.01).start()
    try:
        wait_for(lambda: health.loop_ticks >= 20)
        assert health.loop_percentile_ms(50) < 50.0  # an idle loop wakes nearly on time
        _blocking_sleep(0.3)  # holds the whole process, as a starved or busy client would
        ticks = health.loop_ticks
        wait_for(lambda: health.loop_ticks > ticks)
    finally:
        monitor.stop()
    assert 250.0 <= health.loop_max_ms < 2000.0
    counters = health.counters(in_flight=0)
    assert counters.loop_lag_max_ms == health.loop_max_ms and counters.loop_ticks == health.loop_ticks


def test_loop_lag_merges_and_travels_between_processes():
    worker = ClientHealth()
    for lag_ms in [0.5] * 99 + [80.0]:
        worker.record_loop_lag(lag_ms)
    master = ClientHealth.from_wire(worker.to_wire())
    master.merge(worker)
    assert master.loop_ticks == 200 and master.loop_max_ms == 80.0
    assert master.loop_percentile_ms(99) == pytest.approx(0.5, rel=0.03)
    assert master.loop_percentile_ms(99.5) == pytest.approx(80.0, rel=0.03)


def test_a_health_message_without_loop_fields_still_reads():
    """An older worker's message (sends and schedule lag only) is read as no loop samples."""
    old = {"sends": 3, "skipped": 0, "late_sends_1s": 0, "lag_max_ms": 1.0, "lag_bins": {"10": 3}}
    health = ClientHealth.from_wire(old)
    assert health.sends == 3 and health.loop_ticks == 0
    assert health.counters(0).loop_lag_p99_ms is None and health.counters(0).loop_lag_max_ms is None
