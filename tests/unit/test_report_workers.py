"""The report says who sent the load and, in its banner, each load worker lost mid-run."""

from __future__ import annotations

from soak.report.outcomes import outcomes
from support.records import run_summary

LOST = {"index": 1, "host": "load-2", "pid": 4242, "why": "its heartbeat stopped", "t_s": 3725.4, "unseen_s": 4.21,
        "on_loss": "redistributed"}


def test_a_run_without_workers_says_nothing_of_them():
    section = outcomes(run_summary(validation_gaps=[], error_messages=[]))
    assert section["workers"] is None and section["banner"] == []


def test_the_workers_and_each_loss_are_told():
    section = outcomes(run_summary(workers={"joined": 3, "remote": 2, "lost": [LOST, {**LOST, "index": 2, "pid": 7,
                                                                            "on_loss": "run_ended", "unseen_s": None}]}))
    assert section["workers"] == "The load came from 3 load workers (2 of them soak worker processes on other hosts)."
    assert section["banner"] == [
        "Load worker 1 (load-2, pid 4242) was lost at 1:02:05 (its heartbeat stopped): its share of the rate moved "
        "to the remaining workers; windows over its 4.2 s silence are left out of trends.",
        "Load worker 2 (load-2, pid 7) was lost at 1:02:05 (its heartbeat stopped): no worker remained, so the run "
        "ended."]


def test_local_workers_are_named_as_such():
    assert outcomes(run_summary(workers={"joined": 2, "remote": 0, "lost": []}))["workers"] == (
        "The load came from 2 load workers (local processes).")
