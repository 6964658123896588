"""Model time, seeded event schedules and the time-driven fault maths, on a fake clock."""

import random

import pytest

from soak.refserver.clock import EventSchedule, ModelClock, ramp
from soak.refserver.faults import parse_faults
from soak.refserver.injector import FaultInjector


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _clock(scale: float) -> tuple[ModelClock, FakeTime]:
    fake = FakeTime()
    return ModelClock(scale, now=fake), fake


def test_model_time_is_uptime_times_scale():
    clock, fake = _clock(60.0)
    fake.now += 2.5
    assert clock.wall_s() == 2.5 and clock.model_s() == 150.0
    assert clock.wall_of_model(3600) == 60.0
    clock.start()
    assert clock.model_s() == 0.0


def test_time_scale_must_be_positive():
    with pytest.raises(ValueError):
        ModelClock(0)


def test_ramp_moves_linearly_then_holds():
    assert ramp(0.0, 1.0, 0, 3600) == 0.0
    assert ramp(0.0, 1.0, 900, 3600) == 0.25
    assert ramp(0.2, 0.0, 1800, 3600) == pytest.approx(0.1)
    assert ramp(0.0, 1.0, 7200, 3600) == 1.0
    assert ramp(0.0, 1.0, 5, 0) == 1.0


def _schedule(rate_per_hour: float, scale: float, seed: int = 1, length_s: float = 2.0):
    clock, fake = _clock(scale)
    return EventSchedule(rate_per_hour, clock, random.Random(seed), lambda rng: length_s), fake


def test_schedule_is_seeded_and_scaled():
    fast, _ = _schedule(10, 3600)
    slow, _ = _schedule(10, 1)
    starts_fast = [w.start_s for w in fast.upcoming(0, 5)]
    starts_slow = [w.start_s for w in slow.upcoming(0, 5)]
    assert starts_slow == pytest.approx([s * 3600 for s in starts_fast])  # same model times
    again, _ = _schedule(10, 3600)
    assert [w.start_s for w in again.upcoming(0, 5)] == starts_fast


def test_schedule_rate_is_per_model_hour():
    schedule, _ = _schedule(rate_per_hour=30, scale=1, seed=3)
    events = schedule.upcoming(0, 3000)
    per_hour = len(events) / (events[-1].start_s / 3600)
    assert per_hour == pytest.approx(30, rel=0.1)


def test_schedule_active_covers_wall_length():
    schedule, _ = _schedule(rate_per_hour=1, scale=3600, length_s=0.05)  # one per wall second
    first, second = schedule.upcoming(0, 2)
    assert second.start_s > first.end_s + 0.01
    assert schedule.active(first.start_s - 0.01) is None
    assert schedule.active(first.start_s + 0.04) == first
    assert schedule.active(first.end_s + 0.01) is None
    assert schedule.windows_until(first.start_s) == [first]


def _injector(*faults: str, scale: float = 1.0, horizon_s: float = 3600.0):
    clock, fake = _clock(scale)
    return FaultInjector(parse_faults(list(faults)), clock, seed=0, horizon_s=horizon_s), fake


def test_error_rise_probability_uses_model_time():
    injector, fake = _injector("error-rise=0.1:0.5", scale=60, horizon_s=3600)
    assert injector.error_probability() == pytest.approx(0.1)
    fake.now += 30  # 30 min of model time: halfway
    assert injector.error_probability() == pytest.approx(0.3)
    fake.now += 60
    assert injector.error_probability() == pytest.approx(0.5)


def test_error_rise_draws_are_seeded():
    def failures():
        injector, fake = _injector("error-rise=0.5:0.5")
        return [injector.request_error() is not None for _ in range(200)]

    first = failures()
    assert first == failures() and 60 < sum(first) < 140


def test_latency_creep_grows_per_model_hour():
    injector, fake = _injector("latency-creep=20", scale=10)
    assert injector.step_delay_s(0.01) == 0.0
    fake.now += 360 * 2  # 2 model hours
    assert injector.step_delay_s(0.01) == pytest.approx(0.01 * 0.4)


def test_hang_after_is_model_time():
    injector, fake = _injector("hang-after=10m", scale=60)
    fake.now += 9.9
    assert not injector.hang_reached()
    fake.now += 0.2
    assert injector.hang_reached()


def test_error_bursts_fail_every_request_inside_a_burst():
    injector, fake = _injector("error-bursts=0.2:1s", scale=3600)  # one per 5 wall seconds on average
    bursts = injector.describe()["error_bursts"]
    (start_s, end_s), (next_start_s, _) = next((a, b) for a, b in zip(bursts, bursts[1:]) if b[0] > a[1])
    fake.now = 100.0 + start_s + 0.5
    assert all(injector.request_error() for _ in range(20))
    fake.now = 100.0 + (end_s + next_start_s) / 2
    assert injector.request_error() is None


def test_stall_is_served_once_for_what_remains():
    injector, fake = _injector("stalls=1:2s", scale=3600)
    start_s, end_s = injector.describe()["stalls"][0]
    fake.now = 100.0 + start_s + 0.5
    assert injector.stall_due_s() == pytest.approx(1.5)
    assert injector.stall_due_s() == 0.0  # already taken


def test_stall_lengths_default_to_one_to_three_seconds():
    injector, _ = _injector("stalls=5", scale=3600)
    lengths = [end - start for start, end in injector.describe()["stalls"]]
    assert lengths and all(1.0 <= length <= 3.0 for length in lengths)
