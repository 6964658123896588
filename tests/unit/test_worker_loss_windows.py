"""A lost load worker's silence leaves the windows it overlaps out of trends, like an outage."""

from __future__ import annotations

from soak.analysis.loader import build_windows, worker_loss_spans
from soak.contracts import Event
from support.records import stored_event, stored_run

RUN = stored_run(warmup_s=10.0, window_s=10.0)


def lost(t_s: float, unseen_s: float | None) -> Event:
    return stored_event(t_s, "worker_lost", {"unseen_s": unseen_s})


def test_the_silence_runs_from_the_last_status_to_the_loss():
    events = [lost(34.0, 5.5), stored_event(40.0, "phase"), lost(61.0, None)]
    assert worker_loss_spans(events) == [(28.5, 34.0), (61.0, 61.0)]


def test_windows_over_the_silence_are_left_out_and_the_rest_are_judged():
    windows = build_windows(RUN, 80.0, [lost(38.0, 5.5)])  # silent from 32.5 s: inside window 2, [30, 40)
    excluded = {w.index: w.excluded for w in windows}
    assert excluded == {-1: "warmup", 0: None, 1: None, 2: "worker_lost", 3: None, 4: None, 5: None, 6: None}


def test_a_silence_across_a_window_edge_leaves_both_out():
    windows = build_windows(RUN, 50.0, [lost(32.0, 4.0)])  # silent over [28, 32): windows 1 and 2
    assert [w.index for w in windows if w.excluded == "worker_lost"] == [1, 2]
