"""Locust's per-second request counters stay bounded over a long run (they grow forever in Locust itself)."""

import time
import types

import gevent
import pytest
from locust import User
from locust.env import Environment

from soak.load.locust_stats import KEEP_S, keep_stats_bounded, trim_per_second_counts

T0 = 1_800_000_000


class _Idle(User):
    abstract = False


@pytest.fixture()
def environment_with_clock(monkeypatch):
    """A real Locust environment and local runner whose statistics read a clock the test moves."""
    import locust.stats

    clock = types.SimpleNamespace(now=float(T0))
    monkeypatch.setattr(locust.stats, "time", types.SimpleNamespace(time=lambda: clock.now))
    environment = Environment(user_classes=[_Idle])
    runner = environment.create_local_runner()
    yield environment, clock
    runner.quit()


def fire(environment, name, failed=False):
    environment.events.request.fire(request_type="chat", name=name, response_time=12.0, response_length=100,
                                    exception=Exception("timeout") if failed else None, context={})


def test_three_hours_of_seconds_are_trimmed_to_the_last_minute(environment_with_clock):
    environment, clock = environment_with_clock
    for second in range(3 * 3600):
        clock.now = T0 + second + 0.5
        fire(environment, "chat_short", failed=second % 10 == 0)
        fire(environment, "long_tail")
    stats = environment.stats
    assert len(stats.total.num_reqs_per_sec) == 3 * 3600  # what Locust alone keeps
    rps_before = stats.total.current_rps
    removed = trim_per_second_counts(stats, clock.now)
    assert removed > 3 * 3 * 3600  # total and both entries, requests and failures
    for entry in (stats.total, *stats.entries.values()):
        assert len(entry.num_reqs_per_sec) <= KEEP_S + 1
        assert all(second >= int(clock.now) - KEEP_S for second in entry.num_fail_per_sec)
    assert stats.total.current_rps == pytest.approx(rps_before)
    assert stats.total.num_requests == 2 * 3 * 3600  # totals are not per-second counts: untouched


def test_the_trimming_greenlet_trims_against_the_wall_clock_until_killed(environment_with_clock):
    environment, clock = environment_with_clock
    ten_minutes_ago = int(time.time()) - 600
    for second in range(600):
        clock.now = ten_minutes_ago + second
        fire(environment, "chat_short")
    assert len(environment.stats.total.num_reqs_per_sec) == 600
    trimmer = keep_stats_bounded(environment, every_s=0.01)
    try:
        with gevent.Timeout(5):
            while len(environment.stats.total.num_reqs_per_sec) > KEEP_S + 1:
                gevent.sleep(0.01)
    finally:
        trimmer.kill()
    assert trimmer.dead
    assert min(environment.stats.total.num_reqs_per_sec) >= int(time.time()) - KEEP_S - 1
