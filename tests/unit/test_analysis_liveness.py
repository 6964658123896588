"""hang and crashes."""

import numpy as np

from soak.analysis.findings import FAIL, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event, ProbeReading, ServerSeries
from soak.analysis.liveness import check_crashes, check_hang, find_stalls
from soak.contracts import EventKind
from support.synthetic import bare_run

RUN_S = 2 * 3600.0


def server(stuck_from_s=None, stuck_for_s=0.0, running=3.0, health=None):
    t_s = np.arange(0.0, RUN_S, 5.0)
    step = np.full(t_s.size, 100.0)
    if stuck_from_s is not None:
        step[(t_s > stuck_from_s) & (t_s <= stuck_from_s + stuck_for_s)] = 0.0
    return ServerSeries(t_s=t_s, running=np.full(t_s.size, running), generation_tokens_total=np.cumsum(step),
                        health_ok=health(t_s) if health else np.ones(t_s.size))


def test_find_stalls_measures_flat_spans():
    stalls, longest_s = find_stalls(server(1000.0, 120.0), 60.0)
    assert len(stalls) == 1 and stalls[0].length_s == 120.0 and longest_s == 120.0


def test_idle_server_is_not_hung():
    stalls, _ = find_stalls(server(1000.0, 600.0, running=0.0), 60.0)
    assert stalls == []


def test_nan_scrape_breaks_a_stall():
    s = server(1000.0, 120.0)
    s.running[(s.t_s > 1050) & (s.t_s < 1060)] = np.nan
    assert find_stalls(s, 60.0)[0] == []


def test_counter_reset_is_not_a_stall():
    s = server()
    s.generation_tokens_total[700:] -= s.generation_tokens_total[700]  # restart: counter drops to 0
    assert find_stalls(s, 60.0)[0] == []


def test_hang_fails_on_stall():
    finding = check_hang(bare_run(RUN_S, server=server(3000.0, 300.0)), Gates())
    assert finding.verdict == FAIL and finding.value == 300.0 and finding.threshold == 60.0
    assert "no token was generated for 300 s" in finding.evidence


def test_hang_fails_on_a_drain_timeout_or_an_undrained_probe():
    timeout = Event(500.0, EventKind.PROBE_DRAIN_TIMEOUT, "idle probe 0: 3 still in flight after 60s")
    finding = check_hang(bare_run(RUN_S, server=server(), events=(timeout,)), Gates())
    assert finding.verdict == FAIL and "1 probe drain(s) timed out" in finding.evidence
    drain = bare_run(RUN_S, probes=(ProbeReading(500.0, 0.2, 3, 0, drained=False),), probes_ran=True)
    finding = check_hang(drain, Gates())
    assert finding.verdict == FAIL and "did not drain" in finding.evidence


def test_kinds_nothing_emits_are_ignored():
    # No canary exists yet, and no stage records server exits: such events must not decide a verdict.
    events = (Event(0.0, "server_start"), Event(100.0, "canary_timeout", "no token in 30 s"),
              Event(200.0, "server_exit", "", {"exit_code": -9}))
    run = bare_run(RUN_S, server=server(), events=events)
    assert check_hang(run, Gates()).verdict == PASS
    assert check_crashes(run, Gates()).verdict == PASS


def test_hang_pass_and_skip():
    assert check_hang(bare_run(RUN_S, server=server()), Gates()).verdict == PASS
    assert check_hang(bare_run(RUN_S), Gates()).verdict == SKIPPED
    probes_only = bare_run(RUN_S, probes=(ProbeReading(500.0, 0.0, 0, 0),), probes_ran=True)
    assert check_hang(probes_only, Gates()).verdict == PASS


def test_short_run_uses_a_shorter_hang_limit():
    finding = check_hang(bare_run(300.0, server=server(100.0, 20.0)), Gates())
    assert finding.threshold == 15.0 and finding.verdict == FAIL


def test_crash_fails_with_exit_code_and_log_tail():
    events = (Event(0.0, EventKind.SERVER_START),
              Event(4000.0, EventKind.CRASH, "EngineCore died",
                    {"exit_code": -9, "log_tail": "a\nCUDA error: illegal address"}),
              Event(4030.0, EventKind.RESTART, "restarted"))
    finding = check_crashes(bare_run(RUN_S, events=events), Gates())
    assert finding.verdict == FAIL and finding.value == 1
    assert "exit code -9" in finding.evidence and "illegal address" in finding.evidence


def test_a_crash_after_the_run_is_not_counted():
    events = (Event(0.0, EventKind.SERVER_START), Event(RUN_S + 5, EventKind.CRASH, "", {"exit_code": 0}))
    assert check_crashes(bare_run(RUN_S, events=events), Gates()).verdict == PASS


def test_restart_alone_counts():
    finding = check_crashes(bare_run(RUN_S, events=(Event(50.0, "restart"),)), Gates())
    assert finding.verdict == FAIL


def test_health_gap_without_exit_is_suspect():
    s = server(health=lambda t: np.where((t > 1000) & (t < 1200), 0.0, 1.0))
    finding = check_crashes(bare_run(RUN_S, server=s), Gates())
    assert finding.verdict == SUSPECT and "/health failed" in finding.evidence


def test_external_target_without_observations_is_skipped():
    assert check_crashes(bare_run(RUN_S, server_managed=False), Gates()).verdict == SKIPPED
    assert check_crashes(bare_run(RUN_S), Gates()).verdict == SKIPPED  # nothing recorded at all
    started = bare_run(RUN_S, events=(Event(0.0, "server_start"),))
    assert check_crashes(started, Gates()).verdict == PASS


def _probe_events(index=0, start_s=3000.0, timeout_s=3060.0):
    return (Event(start_s, EventKind.PROBE_START, f"idle probe {index}: arrivals stopped", {"index": index}),
            Event(timeout_s, EventKind.PROBE_DRAIN_TIMEOUT, f"idle probe {index}: 2 still in flight after 60s",
                  {"index": index, "drain_s": 60.0, "in_flight": 2}))


def test_a_drain_timeout_while_the_token_counter_rose_is_a_slow_request_not_a_hang():
    undrained = ProbeReading(3075.0, 0.01, 1, 0, drained=False)
    run = bare_run(RUN_S, server=server(), events=_probe_events(), probes=(undrained,), probes_ran=True)
    finding = check_hang(run, Gates())
    assert finding.verdict == PASS, finding.evidence
    assert "timed out while tokens kept flowing" in finding.evidence
    assert finding.details["streaming_drains"] == [{"t_s": 3060.0, "index": 0}]


def test_a_drain_timeout_while_the_client_received_chunks_is_not_a_hang():
    streaming = Event(3100.0, EventKind.PROBE_DRAIN_STREAMING, "chunks during the drain", {"index": 0, "chunks": 40})
    run = bare_run(RUN_S, events=(*_probe_events(), streaming), probes_ran=True)  # no server gauges at all
    assert check_hang(run, Gates()).verdict == PASS


def test_a_drain_timeout_with_the_counter_frozen_while_requests_run_is_a_hang():
    frozen = server(2994.0, 50.0)  # no new token from 2995 s to 3040 s: shorter than the 60 s stall limit
    run = bare_run(RUN_S, server=frozen, events=_probe_events(timeout_s=3040.0), probes_ran=True)
    finding = check_hang(run, Gates())
    assert finding.verdict == FAIL and "1 probe drain(s) timed out" in finding.evidence
    assert finding.details["stalls"] == []  # the timeout alone fails it


def _sglang_event(tokens_at_finish=True):
    return Event(1.0, EventKind.SERVER_DIALECT, "server dialect sglang", {
        "dialect": "sglang", "server": "SGLang", "not_measured": [], "tokens_at_finish": tokens_at_finish})


def _slow_windows(p99_ms):
    from soak.analysis.inputs import LatencyStats, WindowLatency

    e2e = LatencyStats(count=50, p50_ms=p99_ms / 2, p90_ms=p99_ms * 0.9, p95_ms=p99_ms * 0.95, p99_ms=p99_ms)
    return tuple(WindowLatency(index=i, start_s=i * 150.0, end_s=(i + 1) * 150.0, e2e=e2e) for i in range(40))


def test_a_counter_that_moves_at_finish_may_stay_still_for_as_long_as_a_request_streams():
    # SGLang counts generated tokens when a request finishes: 100 s of 90-s requests streaming is not a hang.
    run = bare_run(RUN_S, server=server(3000.0, 100.0), events=(_sglang_event(),), latency_windows=_slow_windows(90_000))
    finding = check_hang(run, Gates())
    assert finding.verdict == PASS and finding.threshold == 150.0, finding.evidence
    # The same still counter from a server that counts token by token is a hang.
    run = bare_run(RUN_S, server=server(3000.0, 100.0), events=(_sglang_event(False),),
                   latency_windows=_slow_windows(90_000))
    assert check_hang(run, Gates()).verdict == FAIL
