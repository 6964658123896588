"""Phases in absolute time: warm-up, steady, ramp, wave, burst, and the segments the shape publishes."""

from __future__ import annotations

from pathlib import Path

import pytest

from soak.config import LoadSettings, PhaseSpec, RunConfig
from soak.errors import ConfigError
from soak.load.plan import RatePlan
from soak.load.shape import PhasePlan, build_phases

T0 = 1_800_000_000.0


def config(duration_s=100.0, warmup_s=10.0, **load):
    return RunConfig(duration_s=duration_s, warmup_s=warmup_s, window_s=5.0, out_dir=Path("/tmp/x"), db_url="sqlite://",
                     load=LoadSettings(**load))


def phase_plan_of(cfg, begin_t=T0):
    return PhasePlan(build_phases(cfg, T0), T0, begin_t, T0 + cfg.duration_s)


def test_no_phases_is_steady_at_the_rate_after_a_warm_up_at_the_same_rate():
    phases = build_phases(config(rate_rps=4.0), T0)
    assert [(p.name, p.index, p.start_t - T0, p.end_t - T0, p.rate_rps) for p in phases] == [
        ("warmup", None, 0, 10, 4.0), ("steady", 0, 10, 100, 4.0)]


def test_warm_up_runs_at_the_first_phases_starting_rate_and_the_last_phase_lasts_to_the_end():
    phases = build_phases(config(rate_rps=1.0, phases=[PhaseSpec(kind="ramp", rate_rps=2, to_rate_rps=8, duration_s=20),
                                                       PhaseSpec(kind="steady", rate_rps=3, duration_s=5)]), T0)
    assert [(p.name, p.rate_rps, p.start_t - T0, p.end_t - T0) for p in phases] == [
        ("warmup", 2, 0, 10), ("ramp", 2, 10, 30), ("steady", 3, 30, 100)]


def test_phases_past_the_end_of_the_run_are_dropped():
    phases = build_phases(config(duration_s=30, phases=[PhaseSpec(kind="steady", duration_s=25),
                                                        PhaseSpec(kind="steady", rate_rps=9)]), T0)
    assert [p.end_t - T0 for p in phases] == [10, 30]


@pytest.mark.parametrize("spec, message", [
    (PhaseSpec(kind="ramp", duration_s=5), "to_rate"),
    (PhaseSpec(kind="wave"), "period"),
    (PhaseSpec(kind="burst", period_s=10, burst_s=20), "shorter"),
])
def test_incomplete_phases_are_config_errors(spec, message):
    with pytest.raises(ConfigError, match=message):
        build_phases(config(phases=[spec]), T0)


def test_only_the_last_phase_may_lack_a_duration():
    with pytest.raises(ConfigError, match="needs a duration"):
        build_phases(config(phases=[PhaseSpec(kind="steady"), PhaseSpec(kind="steady")]), T0)


def test_ramp_segments_step_each_second_at_the_midpoint_rate_then_hold():
    phases = phase_plan_of(config(warmup_s=0, phases=[PhaseSpec(kind="ramp", rate_rps=0, to_rate_rps=10, duration_s=10)]))
    segments = phases.segments(T0, T0 + 12)
    assert [(s.start_t - T0, s.rate_rps) for s in segments[:3]] == [(0, 0.5), (1, 1.5), (2, 2.5)]
    assert (segments[-1].start_t - T0, segments[-1].rate_rps) == (10, 10)
    assert RatePlan(segments).expected_arrivals(T0 + 10) == pytest.approx(50.0)  # the integral of the ramp


def test_wave_averages_to_its_rate_over_a_period_and_swings_by_the_amplitude():
    phases = phase_plan_of(config(warmup_s=0, phases=[PhaseSpec(kind="wave", rate_rps=10, period_s=64, amplitude=0.5)]))
    plan = RatePlan(phases.segments(T0, T0 + 64))
    assert plan.expected_arrivals(T0 + 64) == pytest.approx(640.0, rel=1e-6)
    rates = [s.rate_rps for s in plan.segments]
    assert max(rates) == pytest.approx(15, abs=0.1) and min(rates) == pytest.approx(5, abs=0.1)


def test_burst_multiplies_the_rate_for_burst_s_every_period():
    phases = phase_plan_of(config(warmup_s=0, phases=[PhaseSpec(kind="burst", rate_rps=2, factor=5, burst_s=3,
                                                             period_s=10)]))
    segments = phases.segments(T0 + 5, T0 + 24)
    assert [(s.start_t - T0, s.rate_rps) for s in segments] == [(3, 2), (10, 10), (13, 2), (20, 10), (23, 2)]


def test_the_published_window_holds_the_segment_in_force_and_those_starting_soon():
    phases = phase_plan_of(config(rate_rps=3, warmup_s=10, phases=[PhaseSpec(kind="steady", rate_rps=3, duration_s=20),
                                                                PhaseSpec(kind="steady", rate_rps=7)]))
    assert [(s.start_t - T0, s.rate_rps) for s in phases.segments(T0 + 29, T0 + 30.5)] == [(10, 3), (30, 7)]
    assert [(s.start_t - T0, s.rate_rps) for s in phases.segments(T0 + 99, T0 + 100.5)] == [(30, 7), (100, 0)]


def test_nothing_is_planned_before_the_load_can_begin():
    phases = phase_plan_of(config(rate_rps=5), begin_t=T0 + 0.7)
    assert [(s.start_t - T0, s.rate_rps) for s in phases.segments(T0, T0 + 1.5)] == [(0, 0), (pytest.approx(0.7), 5)]
