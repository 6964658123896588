"""next_step: every unsettled check says what would settle it or where to look; a PASS says nothing."""

from __future__ import annotations

import dataclasses
import re

import pytest

from soak.analysis import analyse
from soak.analysis.findings import FAIL, INCONCLUSIVE, INVALID, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.next_steps import length_text, requests_for_budget
from support.synthetic import MIB, RunModel, plan_windows, synthetic_run, with_changes

BASE = RunModel(run_s=6 * 3600.0, rate_per_s=4.0, probe_every_s=1200.0)


def by_check(findings):
    return {f.check: f for f in findings}


@pytest.fixture(scope="module")
def leaking():
    return by_check(analyse(synthetic_run(3, with_changes(BASE, leak_bytes_per_h=400 * MIB)), Gates()))


@pytest.fixture(scope="module")
def short():
    """Twenty minutes judged in 2-minute windows: too few windows for any trend."""
    run = synthetic_run(2, RunModel(run_s=1200.0, rate_per_s=2.0, probe_every_s=0.0))
    windows = plan_windows(run.actual_duration_s, run.warmup_s, 120.0)
    run = dataclasses.replace(run, windows=windows, window_s=120.0)
    return run, by_check(analyse(run, Gates()))


def test_every_unsettled_finding_has_a_next_step_and_no_settled_one_does(leaking, short):
    for findings in (leaking, short[1]):
        for finding in findings.values():
            if finding.verdict in (FAIL, SUSPECT, INCONCLUSIVE, INVALID):
                assert finding.next_step, finding.check
                assert "None" not in finding.next_step and "{" not in finding.next_step
            else:
                assert finding.verdict in (PASS, SKIPPED) and finding.next_step is None, finding.check
            assert ("next_step" in finding.to_dict()) == bool(finding.next_step)


def test_a_found_leak_points_at_its_chart(leaking):
    rss = leaking["leak.rss"]
    assert rss.verdict == FAIL
    assert "memory chart" in rss.next_step


def test_too_few_windows_names_a_length_that_would_give_enough(short):
    run, findings = short
    step = findings["errors.rise"].next_step
    assert findings["errors.rise"].verdict == INCONCLUSIVE
    match = re.search(r"only (\d+) windows to trend \(20 needed\): run ≥ (\S+) with --window (\S+)", step)
    assert match, step
    assert int(match.group(1)) == len(run.judged_windows())
    # The length asked for, at this window, holds at least 20 windows after the warm-up.
    asked_s = _seconds(match.group(2))
    assert (asked_s - run.warmup_s) / run.window_s >= 20


def test_a_trend_short_of_a_verdict_says_how_long_a_run_would_settle_it():
    """12 MiB/h under a 16 MiB/h threshold, seed 2: the 6 h run cannot rule the threshold out, and says how long
    a run could (longer than this one judged)."""
    run = synthetic_run(2, with_changes(BASE, leak_bytes_per_h=12 * MIB))
    rss = by_check(analyse(run, Gates()))["leak.rss"]
    assert rss.verdict in (INCONCLUSIVE, SUSPECT)
    match = re.fullmatch(r"run ≥ (\S+) of judged load \(after warm-up, probes and outages\) at this rate "
                         r"to rule out 16\.0 MiB/h", rss.next_step)
    assert match, rss.next_step
    judged_s = sum(w.end_s - w.start_s for w in run.judged_windows())
    assert _seconds(match.group(1)) > judged_s


def test_the_budget_step_counts_the_requests_that_would_show_the_rate_within_budget():
    needed = requests_for_budget(0, 300, 0.01, 0.95)
    assert needed is not None and needed > 300
    from soak.analysis.error_checks import wilson_interval

    assert wilson_interval(0, needed, 0.95)[1] <= 0.01 < wilson_interval(0, needed - 40, 0.95)[1]
    assert requests_for_budget(3, 300, 0.01, 0.95) is None  # 1 %: no length shows it under 1 %


def test_lengths_round_up():
    assert [length_text(s) for s in (41.0, 129.0, 601.0, 9 * 3600 + 1.0)] == ["50s", "2m10s", "11m", "9h01m"]


def test_no_kv_gauge_asks_for_one(short):
    run, _ = short
    bare = dataclasses.replace(run, server=dataclasses.replace(run.server, kv_usage=None), probes=())
    kv = by_check(analyse(bare, Gates()))["leak.kv"]
    if kv.verdict == INCONCLUSIVE:
        assert "--metrics-url" in kv.next_step
    else:
        assert kv.verdict == SKIPPED and kv.next_step is None


def _seconds(text: str) -> float:
    parts = re.findall(r"(\d+)([hms])", text)
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
