"""creep.server_itl: a replica behind a router judged on the ITL its own /metrics measured (sum and count)."""

import numpy as np
import pytest

from soak.analysis import analyse
from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData, ServerSeries, WindowInfo
from soak.analysis.server_latency import check_server_itl, window_mean_s

WINDOW_S, WINDOWS, WARMUP_S = 60.0, 60, 300.0
TOKENS_PER_S = 40.0


def _run(mean_itl_s, observe_only=True, noise=0.03, restart_at_s=None, seed=3):
    """A replica's run: 1 Hz scrapes whose ITL sum grows by each second's tokens times that second's mean ITL."""
    rng = np.random.default_rng(seed)
    t_s = np.arange(0.0, WINDOW_S * WINDOWS + 1)
    per_second = mean_itl_s(t_s) * np.exp(rng.normal(0, noise, t_s.size))
    count = np.cumsum(np.full(t_s.size, TOKENS_PER_S))
    total = np.cumsum(per_second * TOKENS_PER_S)
    if restart_at_s is not None:  # the counters start again from zero
        after = t_s >= restart_at_s
        count[after] -= count[after][0]
        total[after] -= total[after][0]
    windows = tuple(WindowInfo(i, i * WINDOW_S, (i + 1) * WINDOW_S, "warmup" if i * WINDOW_S < WARMUP_S else None)
                    for i in range(WINDOWS))
    server = ServerSeries(t_s=t_s, running=np.ones(t_s.size), itl_sum_s=total, itl_count=count)
    return RunData(planned_duration_s=WINDOW_S * WINDOWS, actual_duration_s=WINDOW_S * WINDOWS, warmup_s=WARMUP_S,
                   window_s=WINDOW_S, windows=windows, server=server, observe_only=observe_only)


def flat(t_s):
    return np.full(t_s.size, 0.020)


def creeping(t_s):  # twice as slow an hour
    return 0.020 * (1 + t_s / 3600.0)


def test_a_replica_that_slows_fails_and_one_that_does_not_passes():
    slow = check_server_itl(_run(creeping), Gates())
    assert slow.verdict == FAIL and slow.evidence.startswith("Mean ITL at the server"), slow.evidence
    steady = check_server_itl(_run(flat), Gates())
    assert steady.verdict == PASS, steady.evidence


def test_a_window_mean_is_the_change_of_the_sum_over_the_change_of_the_count():
    run = _run(flat, noise=0.0)
    assert window_mean_s(run.server, run.windows[10]) == pytest.approx(0.020)


def test_a_restart_leaves_its_window_out_instead_of_reading_a_negative_mean():
    run = _run(flat, restart_at_s=30 * WINDOW_S + 20)
    assert window_mean_s(run.server, run.windows[30]) is None
    assert window_mean_s(run.server, run.windows[31]) is not None
    assert check_server_itl(run, Gates()).verdict == PASS


def test_a_run_with_its_own_load_or_a_server_without_the_histogram_skips_it():
    assert check_server_itl(_run(creeping, observe_only=False), Gates()).verdict == SKIPPED
    run = _run(flat)
    bare = RunData(**{**run.__dict__, "server": ServerSeries(t_s=run.server.t_s, running=run.server.running)})
    finding = check_server_itl(bare, Gates())
    assert finding.verdict == SKIPPED and "no inter-token latency histogram" in finding.evidence


def test_too_few_tokens_is_inconclusive():
    run = _run(flat)
    idle = ServerSeries(t_s=run.server.t_s, itl_sum_s=run.server.itl_sum_s / 100, itl_count=run.server.itl_count / 100)
    finding = check_server_itl(RunData(**{**run.__dict__, "server": idle}), Gates())
    assert finding.verdict == INCONCLUSIVE and "tokens at this server" in finding.evidence


def test_an_observed_replica_that_slows_fails_the_run_with_the_check_named():
    findings = {f.check: f for f in analyse(_run(creeping))}
    assert findings["creep.server_itl"].verdict == FAIL
    assert findings["creep.itl_p99"].verdict == SKIPPED  # the router's run timed the requests
