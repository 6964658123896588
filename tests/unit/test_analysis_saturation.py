"""client.saturation: INVALID when the client, not the server, was the bottleneck."""

import numpy as np

from soak.analysis.findings import INVALID, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.inputs import ClientSeries, WindowRequests
from soak.analysis.saturation import check_saturation
from support.synthetic import bare_run

RUN_S = 3600.0


def client(sends=10_000, late=0, lag_p99_ms=2.0, cpu=8.0):
    t_s = np.arange(0.0, RUN_S, 10.0)
    return ClientSeries(t_s=t_s, cpu_percent=np.full(t_s.size, cpu), sends=sends, late_sends_1s=late,
                        lag_p99_ms=lag_p99_ms)


def verdict(**kwargs):
    return check_saturation(bare_run(RUN_S, client=client(**kwargs)), Gates())


def test_healthy_client_passes():
    finding = verdict()
    assert finding.verdict == PASS and finding.value == 2.0 and finding.unit == "ms"
    assert "kept its schedule" in finding.evidence


def test_late_sends_invalidate():
    finding = verdict(late=101)
    assert finding.verdict == INVALID and "> 1 s late" in finding.evidence
    assert verdict(late=100).verdict == PASS  # exactly 1 % is still within


def test_lag_thresholds():
    assert verdict(lag_p99_ms=150.0).verdict == INVALID
    assert verdict(lag_p99_ms=100.0).verdict == SUSPECT
    assert verdict(lag_p99_ms=10.5).verdict == SUSPECT
    assert verdict(lag_p99_ms=10.0).verdict == PASS


def test_busy_client_cpu_is_suspect():
    finding = verdict(cpu=95.0)
    assert finding.verdict == SUSPECT and "client CPU" in finding.evidence


def test_no_measurements_is_skipped():
    assert check_saturation(bare_run(RUN_S), Gates()).verdict == SKIPPED


def test_falls_back_to_window_counts():
    plan = bare_run(RUN_S)
    rows = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=100, sends=100, late_sends_1s=5,
                               lag_p99_ms=3.0) for w in plan.windows)
    finding = check_saturation(bare_run(RUN_S, request_windows=rows), Gates())
    assert finding.verdict == INVALID and finding.details["late_frac"] == 0.05
    assert finding.details["lag_p99_estimated"] is True


def loop_client(loop_p99_ms, lag_p99_ms=2.0, cpu=8.0):
    t_s = np.arange(0.0, RUN_S, 10.0)
    return ClientSeries(t_s=t_s, cpu_percent=np.full(t_s.size, cpu), sends=10_000, late_sends_1s=0,
                        lag_p99_ms=lag_p99_ms, loop_lag_p99_ms=loop_p99_ms, loop_lag_max_ms=loop_p99_ms * 2)


def test_a_late_event_loop_is_never_a_pass_though_sends_left_on_time():
    """Receive-side lateness: sends on time (lag 2 ms) but the loop woke 73 ms late at P99."""
    finding = check_saturation(bare_run(RUN_S, client=loop_client(73.0)), Gates())
    assert finding.verdict == SUSPECT and "event-loop lag P99 73.0 ms > 10 ms" in finding.evidence
    assert (finding.value, finding.threshold, finding.unit) == (73.0, 10.0, "ms")
    assert finding.details["loop_lag_p99_ms"] == 73.0
    invalid = check_saturation(bare_run(RUN_S, client=loop_client(250.0)), Gates())
    assert invalid.verdict == INVALID and (invalid.value, invalid.threshold) == (250.0, 100.0)
    assert "event-loop lag P99 250.0 ms > 100 ms" in invalid.evidence
    healthy = check_saturation(bare_run(RUN_S, client=loop_client(0.8)), Gates())
    assert healthy.verdict == PASS and "event-loop lag P99 0.8 ms" in healthy.evidence


def test_value_threshold_and_sentence_agree():
    """The row shows the figure and the limit the sentence names: a SUSPECT is held to the suspect limit."""
    finding = verdict(lag_p99_ms=36.2)
    assert finding.verdict == SUSPECT
    assert (finding.value, finding.threshold) == (36.2, 10.0)
    assert f"{finding.value:.1f} ms > {finding.threshold:g} ms" in finding.evidence
    passing = verdict(lag_p99_ms=4.0)
    assert (passing.value, passing.threshold) == (4.0, 10.0) and "4.0 ms ≤ 10 ms" in passing.evidence
    late = verdict(late=500)
    assert late.verdict == INVALID and late.unit == "fraction" and late.value == 0.05 and late.threshold == 0.01


def test_start_up_and_stop_samples_stay_out_of_the_client_cpu():
    """Start-up (importing, starting the load) and the drain after the planned end burn CPU once; the figure
    judges the steady state."""
    t_s = np.arange(0.0, RUN_S + 30.0, 10.0)
    cpu = np.full(t_s.size, 6.0)
    cpu[:2] = 99.0  # the sampler's first reading and the load's start-up
    cpu[t_s > RUN_S] = 99.0  # the drain and stop
    series = ClientSeries(t_s=t_s, cpu_percent=cpu, sends=10_000, late_sends_1s=0, lag_p99_ms=2.0)
    finding = check_saturation(bare_run(RUN_S, client=series), Gates())
    assert finding.verdict == PASS and finding.details["cpu_p95_percent"] == 6.0
    busy = ClientSeries(t_s=t_s, cpu_percent=np.full(t_s.size, 95.0), sends=10_000, late_sends_1s=0, lag_p99_ms=2.0)
    assert check_saturation(bare_run(RUN_S, client=busy), Gates()).verdict == SUSPECT
