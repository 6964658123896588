"""client.saturation: INVALID when the client, not the server, was the bottleneck."""

import numpy as np

from soak.analysis.findings import INVALID, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.inputs import ClientSeries, RequestWindow
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
    rows = tuple(RequestWindow(w.index, w.start_s, w.end_s, requests=100, sends=100, late_sends_1s=5,
                               lag_p99_ms=3.0) for w in plan.windows)
    finding = check_saturation(bare_run(RUN_S, request_windows=rows), Gates())
    assert finding.verdict == INVALID and finding.details["late_frac"] == 0.05
    assert finding.details["lag_p99_estimated"] is True
