"""Real Locust runs against the mock server: open-loop arrivals, timing, concurrency cap, phases, probes, stop."""

from __future__ import annotations

import statistics
import time

import gevent
import pytest
from loadtools import make_config, run_load, wait_for

from soak.config import PhaseSpec
from soak.errors import ConfigError
from soak.load import start_load
from soak.load.plan import RatePlan, plan_arrivals


def planned_times(run, seed: int) -> list[float]:
    """The arrivals the run's phases and seed plan, computed independently of the dispatcher."""
    phase_plan = run.handle.phase_plan
    plan = RatePlan(phase_plan.segments(run.t0 - 1.0, phase_plan.end_t + 1.0))
    return plan_arrivals(plan, seed=seed, until_t=phase_plan.end_t)


@pytest.mark.timeout(60)
def test_poisson_arrivals_are_the_seeded_plan_the_server_saw_each_and_timings_follow_its_delays(mock_server):
    model = mock_server.model(ttft_ms=100, itl_ms=10, tokens=41)  # 0.1 s + 40 × 10 ms = 0.5 s per request
    run = run_load(make_config(duration_s=10, rate_rps=10, seed=7), mock_server.url, model)

    planned = planned_times(run, seed=7)
    assert sorted(r.intended_t for r in run.records) == pytest.approx(planned, abs=1e-6)
    assert mock_server.stats(model)["requests"] == len(planned) == run.counters.sends
    assert 60 <= len(planned) <= 140  # 10 req/s for ~10 s, ±4σ
    gaps = [b - a for a, b in zip(planned, planned[1:])]
    assert 0.6 < statistics.pstdev(gaps) / statistics.mean(gaps) < 1.5  # Poisson: CV ≈ 1
    assert all(r.error_class is None for r in run.records)

    ttft = statistics.median(r.ttft_ms for r in run.records)
    e2e = statistics.median(r.e2e_ms for r in run.records)
    itl = statistics.median(gap for r in run.records for gap in r.itl_ms)
    assert 100 <= ttft <= 115
    assert 500 <= e2e <= 520
    assert 8 <= itl <= 12
    assert all(r.ttft_ms < r.e2e_ms and len(r.itl_ms) == 40 and r.output_tokens == 41 for r in run.records)
    assert run.counters.lag_p99_ms < 50 and run.counters.late_sends_1s == 0


@pytest.mark.timeout(60)
def test_a_server_stall_does_not_reduce_the_send_rate(mock_server):
    t0 = time.time()
    stall_until = t0 + 4.0
    model = mock_server.model(ttft_ms=20, itl_ms=5, tokens=5, stall_until=stall_until)
    run = run_load(make_config(duration_s=6, rate_rps=20, seed=3), mock_server.url, model, t0=t0)

    during_stall = [r for r in run.records if r.intended_t < stall_until - 0.2]
    assert len(during_stall) >= 40  # ~3.6 s at 20 req/s: sent although nothing came back
    assert all(r.sent_t - r.intended_t < 0.1 for r in during_stall)
    assert all(r.finish_t >= stall_until for r in during_stall)  # E2E includes the stall
    stats = mock_server.stats(model)
    assert stats["requests"] == run.counters.sends == len(run.records)
    assert sum(1 for a in stats["arrivals"] if a < stall_until) >= len(during_stall)
    assert stats["max_active"] >= 40  # open loop: in flight piled up instead of the rate dropping


@pytest.mark.timeout(60)
def test_max_concurrency_queues_sends_and_records_the_wait(mock_server):
    model = mock_server.model(ttft_ms=50, itl_ms=10, tokens=26)  # 0.3 s; a cap of 2 serves ~6.7 req/s
    run = run_load(make_config(duration_s=3, rate_rps=20, seed=5, max_concurrency=2), mock_server.url, model,
                   drain_timeout_s=0.5)

    assert mock_server.stats(model)["max_active"] <= 2
    finished = [r for r in run.records if r.error_class is None]
    assert max(r.queue_ms for r in finished) > 300
    assert all(r.e2e_ms >= r.queue_ms + 290 for r in finished)  # queue time still counts in latency
    assert all(r.lag_ms < 50 for r in finished)  # lag excludes the queue
    cancelled = [r for r in run.records if r.error_class == "cancelled"]
    assert cancelled and not any(r.is_error for r in cancelled)
    assert len(run.records) == run.handle.counters().sends


@pytest.mark.timeout(60)
def test_phases_change_the_rate_exactly_and_emit_events(mock_server):
    model = mock_server.model(ttft_ms=10, itl_ms=2, tokens=3)
    phases = [PhaseSpec(kind="steady", rate_rps=5, duration_s=2),
              PhaseSpec(kind="ramp", rate_rps=5, to_rate_rps=40, duration_s=2),
              PhaseSpec(kind="burst", rate_rps=10, factor=4, burst_s=0.5, period_s=1)]
    run = run_load(make_config(duration_s=7, warmup_s=1, rate_rps=5, phases=phases, seed=11), mock_server.url, model)

    assert sorted(r.intended_t for r in run.records) == pytest.approx(planned_times(run, seed=11), abs=1e-6)
    phase_events = run.events_of("phase")
    assert [(e["name"], e["index"]) for e in phase_events] == [
        ("warmup", None), ("steady", 0), ("ramp", 1), ("burst", 2)]
    assert [e["start_t"] - run.t0 for e in phase_events] == pytest.approx([0, 1, 3, 5])
    assert [e["t"] - run.t0 for e in run.events_of("warmup_end")] == pytest.approx([1])
    times = [r.intended_t - run.t0 for r in run.records]
    steady = sum(1 for t in times if 1 <= t < 3)
    burst = sum(1 for t in times if 5 <= t < 7)
    assert steady < burst  # 5 req/s for 2 s (10) vs 25 req/s on average for 2 s (50)


@pytest.mark.timeout(60)
def test_idle_probe_stops_arrivals_drains_and_calls_the_hook(mock_server):
    model = mock_server.model(ttft_ms=50, itl_ms=10, tokens=26)
    config = make_config(duration_s=6, warmup_s=1, rate_rps=20, seed=2, idle_probe_every_s=2, idle_probe_for_s=0.5,
                         drain_timeout_s=3)
    run = run_load(config, mock_server.url, model)

    assert run.probes and run.probes[0][:3] == (0, True, 0)  # index, drained, in flight at the hook
    start = run.events_of("probe_start")[0]
    drained = run.events_of("probe_drained")[0]
    end = run.events_of("probe_end")[0]
    assert start["t"] == pytest.approx(run.t0 + 3)
    assert 0 < drained["drain_s"] < 1.0
    assert run.probes[0][3] - start["t"] >= drained["drain_s"] + 0.5  # the hold came before the hook
    end_t = start["t"] + end["duration_s"]
    assert not [r for r in run.records if start["t"] <= r.intended_t < end_t]
    assert run.counters.skipped > 0


@pytest.mark.timeout(60)
def test_idle_probe_reports_a_drain_that_times_out(mock_server):
    model = mock_server.model(ttft_ms=50, itl_ms=20, tokens=200)  # 4 s requests
    config = make_config(duration_s=3, warmup_s=0.5, rate_rps=10, seed=4, idle_probe_every_s=1, idle_probe_for_s=0.2,
                         drain_timeout_s=0.5)
    run = run_load(config, mock_server.url, model, drain_timeout_s=0.2)

    timeout = run.events_of("probe_drain_timeout")[0]
    assert timeout["in_flight"] > 0 and timeout["drain_s"] == pytest.approx(0.5, abs=0.1)
    assert run.probes[0][:2] == (0, False)
    assert all(r.error_class == "cancelled" and r.error_message == "cancelled at stop" for r in run.records)


@pytest.mark.timeout(60)
def test_pause_skips_planned_arrivals_until_resume(mock_server):
    model = mock_server.model(ttft_ms=10, itl_ms=2, tokens=3)
    marks = {}

    def outage(run):
        gevent.sleep(max(run.t0 + 1.0 - time.time(), 0))
        marks["paused"] = time.time()
        run.handle.pause()
        gevent.sleep(1.0)
        marks["resumed"] = time.time()
        run.handle.resume()

    run = run_load(make_config(duration_s=3, rate_rps=30, seed=6), mock_server.url, model, during=outage)
    assert [k for k, _, _ in run.events if k.startswith("load_")] == ["load_paused", "load_resumed"]
    assert not [r for r in run.records if marks["paused"] + 0.01 <= r.intended_t < marks["resumed"]]
    assert run.counters.skipped >= 10  # ~30 planned in the second of outage
    assert mock_server.stats(model)["requests"] == run.counters.sends


@pytest.mark.timeout(60)
def test_stop_lets_requests_finish_then_cancels_the_rest(mock_server):
    short = mock_server.model(ttft_ms=20, itl_ms=10, tokens=5)
    run = run_load(make_config(duration_s=1.5, rate_rps=10, seed=9), mock_server.url, short)
    assert run.records and all(r.error_class is None for r in run.records)  # the drain let them finish

    long = mock_server.model(ttft_ms=20, itl_ms=50, tokens=200)  # 10 s
    run = run_load(make_config(duration_s=1.5, rate_rps=10, seed=9), mock_server.url, long, drain_timeout_s=0.3)
    assert run.records and all(r.error_class == "cancelled" and not r.is_error for r in run.records)
    assert wait_for(lambda: mock_server.stats(long)["disconnects"] == len(run.records), 5.0)


@pytest.mark.timeout(60)
def test_api_key_is_sent_as_bearer_and_never_recorded(mock_server, monkeypatch):
    monkeypatch.setenv("SOAK_TEST_API_KEY", "sk-test-secret")
    model = mock_server.model(mode="http400", ttft_ms=5)
    config = make_config(duration_s=1, rate_rps=10, seed=1)
    config = config.model_copy(update={"target": config.target.model_copy(update={"api_key_env": "SOAK_TEST_API_KEY"})})
    run = run_load(config, mock_server.url, model)
    assert mock_server.stats(model)["auth"] == ["Bearer sk-test-secret"]
    assert run.records and not any("sk-test-secret" in repr(r) for r in run.records)


@pytest.mark.timeout(60)
def test_hostile_responses_never_stop_the_dispatcher(mock_server):
    model = mock_server.model(mode="invalid_json", ttft_ms=5, itl_ms=2, tokens=6)
    run = run_load(make_config(duration_s=2, rate_rps=20, seed=12), mock_server.url, model)
    assert run.records and {r.error_class for r in run.records} == {"bad_stream"}
    assert mock_server.stats(model)["requests"] == run.counters.sends == len(run.records)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("load, message", [
    ({"scenarios": ["nope"]}, "unknown scenario 'nope': built-in scenarios are .*chat_short"),
    ({"phases": [PhaseSpec(kind="wave", rate_rps=2)]}, "needs period_s"),
    ({"scenarios": ["dataset"]}, "needs --dataset"),
])
def test_start_load_refuses_bad_settings_before_any_request(mock_server, load, message):
    model = mock_server.model()
    with pytest.raises(ConfigError, match=message):
        start_load(make_config(duration_s=2, **load), base_url=mock_server.url, model=model, t0=time.time())
    assert mock_server.stats(model)["requests"] == 0
