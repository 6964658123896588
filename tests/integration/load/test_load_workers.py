"""Master + local worker processes: the rate splits, seeds differ, records and counters reach the master."""

from __future__ import annotations

import pytest
from loadtools import make_config, run_load

from soak.load.plan import RatePlan, plan_arrivals


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_workers_share_the_rate_and_report_to_the_master(mock_server):
    model = mock_server.model(ttft_ms=50, itl_ms=10, tokens=10)
    config = make_config(duration_s=8, warmup_s=1, rate_rps=20, seed=13, workers=2, idle_probe_every_s=3,
                         idle_probe_for_s=0.3, drain_timeout_s=3)
    run = run_load(config, mock_server.url, model)

    final = run.handle.counters()  # after stop: each worker's last word
    assert mock_server.stats(model)["requests"] == final.sends == len(run.records)  # all records reached the master
    intended = [r.intended_t for r in run.records]
    assert len(set(intended)) == len(intended)  # distinct seeds per worker: no duplicated schedule
    planned_s = run.handle.phase_plan.end_t - run.handle.phase_plan.begin_t
    assert 0.6 * 20 * planned_s < final.sends + final.skipped < 1.4 * 20 * planned_s
    assert final.workers == 2 and final.lag_p99_ms < 50 and final.in_flight == 0
    assert run.probes and run.probes[0][:3] == (0, True, 0)  # the probe drained both workers
    assert all(r.error_class is None for r in run.records)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_bursty_arrivals_over_workers_are_dealt_from_the_masters_one_clock(mock_server):
    model = mock_server.model(ttft_ms=20, itl_ms=5, tokens=5)
    config = make_config(duration_s=6, rate_rps=20, seed=17, workers=2, burstiness=2.0)
    run = run_load(config, mock_server.url, model)

    phase_plan = run.handle.phase_plan
    plan = RatePlan(phase_plan.segments(run.t0 - 1.0, phase_plan.end_t + 1.0))
    planned = plan_arrivals(plan, seed=17, until_t=phase_plan.end_t, burstiness=2.0)
    assert sorted(r.intended_t for r in run.records) == pytest.approx(planned, abs=1e-6)
    assert mock_server.stats(model)["requests"] == len(planned)
