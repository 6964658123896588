"""The sequential rule's bookkeeping (soak/analysis/early_stop.py): when looks fall, Bonferroni over them,
streaks that a passing look breaks, and the confirmation span; and the run so far as a look sees it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from soak.analysis.early_stop import Look, SequentialStop, StopRule, cut_run, judge_look, planned_window_count
from soak.analysis.gates import Gates
from soak.analysis.inputs import ProcessSeries
from support.synthetic import MIB, RunModel, bare_run, synthetic_run

GATES = Gates()  # min_windows 20, p_value 0.01


def failing(windows: int, *checks: str) -> Look:
    return Look(windows=windows, t_s=100.0 + windows, failed={check: "evidence" for check in checks})


def test_looks_every_two_windows_from_the_minimum_to_before_the_end_share_the_p_value():
    sequence = SequentialStop(GATES, planned_windows=48)
    assert sequence.looks == tuple(range(20, 48, 2)) and len(sequence.looks) == 14
    assert sequence.gates.p_value == 0.01 / 14
    assert SequentialStop(GATES, planned_windows=20).looks == ()


def test_a_run_of_many_windows_looks_about_24_times():
    looks = SequentialStop(GATES, planned_windows=288).looks
    assert looks == tuple(range(20, 288, 12)) and len(looks) == 23


def test_a_look_falls_due_once_and_a_late_tick_takes_the_latest():
    sequence = SequentialStop(GATES, planned_windows=48)
    assert sequence.due(19) is None
    assert sequence.due(20) == 20 and sequence.due(21) is None
    assert sequence.due(27) == 26  # 22 and 24 were passed over: the newest count is judged
    assert sequence.due(27) is None


def test_a_fail_stops_only_once_it_held_for_half_as_many_windows_again():
    sequence = SequentialStop(GATES, planned_windows=48)
    decisions = [sequence.record(failing(windows, "leak.rss")) for windows in (20, 22, 24, 26, 28)]
    assert decisions == [None] * 5
    decision = sequence.record(failing(30, "leak.rss"))
    assert decision is not None and decision.check == "leak.rss" and decision.looks_in_a_row == 6
    assert decision.reason().startswith("stopped early: leak.rss FAIL at 6 looks in a row, the last over 30 windows")


def test_a_passing_look_breaks_the_streak():
    sequence = SequentialStop(GATES, planned_windows=60)
    for windows in (20, 22, 24, 26, 28):
        sequence.record(failing(windows, "leak.rss"))
    assert sequence.record(failing(30)) is None  # nothing failed at this look
    assert all(sequence.record(failing(w, "leak.rss")) is None for w in (32, 34, 36, 38, 40, 42, 44, 46))
    assert sequence.record(failing(48, "leak.rss")) is not None  # 48 ≥ 1.5 × 32


def test_one_look_never_stops_a_run_even_with_no_confirmation_span():
    sequence = SequentialStop(GATES, planned_windows=48, rule=StopRule(confirm_frac=0.0))
    assert sequence.record(failing(20, "hang")) is None
    assert sequence.record(failing(22, "hang")).check == "hang"


def test_the_run_so_far_drops_later_windows_and_samples():
    t_s = np.arange(0.0, 300.0, 1.0)
    run = bare_run(300.0, warmup_s=30.0, window_s=5.0,
                   processes=(ProcessSeries(pid=1, name="server", t_s=t_s, rss_bytes=1e9 + 1e6 * t_s),))
    cut = cut_run(run, 20)
    assert cut.actual_duration_s == 130.0 and cut.stopped_early
    assert len([w for w in cut.windows if w.excluded != "warmup"]) == 20
    assert cut.processes[0].t_s.max() == 129.0 and cut.processes[0].rss_bytes.size == 130
    assert planned_window_count(300.0, 30.0, 5.0) == 54


def test_a_steep_leak_fails_a_look_and_a_flat_series_does_not():
    t_s = np.arange(0.0, 300.0, 1.0)
    rng = np.random.default_rng(1)

    def run_with(slope_per_s: float):
        rss = 1e9 + slope_per_s * t_s + rng.normal(0, 1e5, t_s.size)
        return bare_run(300.0, warmup_s=30.0, window_s=5.0,
                        processes=(ProcessSeries(pid=1, name="server", t_s=t_s, rss_bytes=rss),))

    gates = SequentialStop(GATES, planned_windows=54).gates
    assert "leak.rss" in judge_look(run_with(1e6), gates, 24).failed
    assert judge_look(run_with(0.0), gates, 24).failed == {}


def test_while_the_client_is_late_a_leak_still_fails_a_look_and_creep_does_not():
    model = RunModel(run_s=6 * 3600.0, rate_per_s=4.0, leak_bytes_per_h=800 * MIB, creep_frac=3.0)
    gates = SequentialStop(GATES, planned_windows=48).gates
    on_time = judge_look(synthetic_run(5, model), gates, 40)
    assert {"leak.rss", "creep.ttft_p99"} <= set(on_time.failed) and on_time.client_late is None
    late = judge_look(synthetic_run(5, replace(model, late_frac=0.05)), gates, 40)
    assert "leak.rss" in late.failed and not {"creep.ttft_p99", "creep.e2e_p99", "hang"} & set(late.failed)
    assert late.client_late == "sends > 1 s late 5.00 % > 1.00 %"


def test_a_stop_while_the_client_is_late_says_how_late():
    sequence = SequentialStop(GATES, planned_windows=48)
    for windows in (20, 22, 24, 26, 28):
        sequence.record(Look(windows, 100.0, {"leak.rss": "rises"}, client_late="schedule-lag P99 728.0 ms > 100 ms"))
    decision = sequence.record(Look(30, 130.0, {"leak.rss": "rises"}, client_late="schedule-lag P99 728.0 ms > 100 ms"))
    assert decision.reason().endswith(": rises; the client was late (schedule-lag P99 728.0 ms > 100 ms)")
