"""Rate plans and the arrival clock: the maths of open-loop arrivals, and their seeded determinism."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from soak.load.plan import ArrivalClock, GapSampler, RatePlan, Segment, arrival_rng, plan_arrivals


def test_expected_arrivals_integrate_the_rate_and_time_at_inverts_it():
    plan = RatePlan([Segment(100.0, 10.0), Segment(110.0, 0.0), Segment(120.0, 20.0)])
    assert plan.expected_arrivals(99.0) == 0.0
    assert plan.expected_arrivals(105.0) == pytest.approx(50.0)
    assert plan.expected_arrivals(115.0) == pytest.approx(100.0)  # rate 0: the count stands still
    assert plan.expected_arrivals(125.0) == pytest.approx(200.0)
    assert plan.time_at(50.0) == pytest.approx(105.0)
    assert plan.time_at(100.0) == pytest.approx(120.0)  # skips the pause to where arrivals resume
    assert plan.time_at(150.0) == pytest.approx(122.5)


def test_a_trailing_zero_rate_never_reaches_more_arrivals():
    plan = RatePlan([Segment(0.0, 5.0), Segment(10.0, 0.0)])
    assert plan.time_at(49.0) == pytest.approx(9.8)
    assert math.isinf(plan.time_at(51.0))
    assert math.isinf(RatePlan().time_at(1.0))


def test_extend_only_appends_segments_after_the_last_known_start():
    plan = RatePlan([Segment(0.0, 1.0), Segment(10.0, 2.0)])
    assert not plan.extend([Segment(0.0, 1.0), Segment(10.0, 2.0), Segment(5.0, 9.0)])
    assert plan.extend([Segment(10.0, 2.0), Segment(20.0, 3.0)])
    assert [s.start_t for s in plan.segments] == [0.0, 10.0, 20.0]
    assert plan.expected_arrivals(30.0) == pytest.approx(10 + 20 + 30)


def test_prune_keeps_the_mapping_for_what_is_left():
    plan = RatePlan([Segment(float(i), 1.0 + i % 3) for i in range(100)])
    before = plan.time_at(150.0)
    plan.prune_before(140.0)
    assert len(plan) < 100
    assert plan.time_at(150.0) == before


@given(st.lists(st.tuples(st.floats(0.1, 50.0), st.floats(0.0, 30.0)), min_size=1, max_size=8),
       st.floats(0.0, 0.999))
def test_time_at_is_the_inverse_of_expected_arrivals(steps, fraction):
    segments, start = [], 1_000.0
    for length, rate in steps:
        segments.append(Segment(start, rate))
        start += length
    segments.append(Segment(start, 1.0))
    plan = RatePlan(segments)
    total = plan.expected_arrivals(start)
    target = total * fraction
    assert plan.expected_arrivals(plan.time_at(target)) == pytest.approx(target, abs=1e-6)


def test_seeded_arrivals_repeat_exactly_and_differ_by_seed_and_worker():
    plan = RatePlan([Segment(0.0, 10.0)])
    first = plan_arrivals(RatePlan(plan.segments), seed=42, until_t=60.0)
    again = plan_arrivals(RatePlan(plan.segments), seed=42, until_t=60.0)
    other = plan_arrivals(RatePlan(plan.segments), seed=43, until_t=60.0)
    worker = plan_arrivals(RatePlan(plan.segments), seed=42, until_t=60.0, worker_index=1)
    assert first == again
    assert first != other and first != worker


def test_poisson_arrivals_have_the_planned_rate_and_unit_cv():
    times = plan_arrivals(RatePlan([Segment(0.0, 10.0)]), seed=1, until_t=2_000.0)
    assert abs(len(times) - 20_000) < 4 * math.sqrt(20_000)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("burstiness", [0.5, 2.0])
def test_gamma_gaps_have_the_burstiness_as_their_cv(burstiness):
    times = plan_arrivals(RatePlan([Segment(0.0, 10.0)]), seed=2, until_t=2_000.0, burstiness=burstiness)
    assert abs(len(times) - 20_000) < 12 * math.sqrt(20_000) * burstiness
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert statistics.pstdev(gaps) / statistics.mean(gaps) == pytest.approx(burstiness, rel=0.08)


def test_a_rate_change_takes_effect_exactly_at_its_start():
    plan = RatePlan([Segment(0.0, 50.0), Segment(100.0, 0.0), Segment(200.0, 5.0)])
    times = plan_arrivals(plan, seed=3, until_t=300.0)
    assert not [t for t in times if 100.0 <= t < 200.0]
    fast, slow = sum(1 for t in times if t < 100.0), sum(1 for t in times if t >= 200.0)
    assert abs(fast - 5_000) < 4 * math.sqrt(5_000) and abs(slow - 500) < 4 * math.sqrt(500)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.5, 5.0), st.floats(0.0, 40.0)), min_size=1, max_size=10),
       st.integers(0, 2**31), st.floats(0.5, 1.5))
def test_a_plan_revealed_ahead_of_time_gives_the_same_arrivals_as_the_full_plan(steps, seed, lookahead_s):
    """What the dispatcher sees (segments published shortly before they start) cannot change the arrivals."""
    segments, start = [], 0.0
    for length, rate in steps:
        segments.append(Segment(start, rate))
        start += length
    segments.append(Segment(start, 0.0))
    expected = plan_arrivals(RatePlan(segments), seed=seed, until_t=start)

    revealed = RatePlan()
    clock = ArrivalClock(revealed, GapSampler(arrival_rng(seed, 0, 0)))
    got, now = [], 0.0
    while now < start + 1.0:
        revealed.extend([s for s in segments if s.start_t <= now + lookahead_s])
        while clock.peek() <= now:  # everything due by now is sent, as the dispatcher does when it wakes
            got.append(clock.take())
        now += 0.25
    assert got == pytest.approx(expected, abs=1e-9)
