"""leak.rss / leak.vram / leak.fds."""

import numpy as np
import pytest

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED
from soak.analysis.gates import Gates
from soak.analysis.inputs import GpuProcessSeries, ProbeReading, ProcessReading, ProcessSeries, RequestWindow
from soak.analysis.memory import Series, check_fds, check_rss, check_vram, tree_total
from support.synthetic import MIB, bare_run

RUN_S = 6 * 3600.0


def flat_process(pid, name, floor, slope_bytes_per_h=0.0, run_s=RUN_S, seed=0, fds=None):
    rng = np.random.default_rng(seed)
    t_s = np.arange(0.0, run_s, 10.0)
    sawtooth = 0.03 * floor * ((t_s / 60.0) % 1.0)
    rss = floor + sawtooth + rng.normal(0, 0.001 * floor, t_s.size) + slope_bytes_per_h * t_s / 3600
    return ProcessSeries(pid=pid, name=name, t_s=t_s, rss_bytes=rss,
                         fds=None if fds is None else fds(t_s))


def request_windows(run, rate_per_s=5.0):
    return tuple(RequestWindow(w.index, w.start_s, w.end_s, requests=int(rate_per_s * (w.end_s - w.start_s)))
                 for w in run.windows)


def test_leak_fails_with_per_request_and_per_process():
    processes = (flat_process(1, "api", 500 * MIB), flat_process(2, "EngineCore", 1500 * MIB, 200 * MIB, seed=1))
    run = bare_run(RUN_S, processes=processes)
    run = bare_run(RUN_S, processes=processes, request_windows=request_windows(run))
    finding = check_rss(run, Gates())
    assert finding.verdict == FAIL
    assert finding.unit == "bytes/h"
    assert finding.value == pytest.approx(200 * MIB, rel=0.05)
    assert finding.ci[0] < 200 * MIB < finding.ci[1] or finding.ci[0] == pytest.approx(200 * MIB, rel=0.05)
    assert finding.per_request["unit"] == "bytes/request"
    assert finding.per_request["value"] == pytest.approx(200 * MIB / 3600 / 5.0, rel=0.05)
    assert [p["name"] for p in finding.per_process] == ["api", "EngineCore"]
    assert [p["verdict"] for p in finding.per_process] == [PASS, FAIL]
    assert "MiB/h" in finding.evidence and "persists in 2nd half" in finding.evidence
    assert finding.trend["space"] == "linear" and finding.details["source"] == "window floors"


def test_healthy_tree_passes():
    processes = (flat_process(1, "api", 500 * MIB), flat_process(2, "EngineCore", 1500 * MIB, seed=1))
    finding = check_rss(bare_run(RUN_S, processes=processes), Gates())
    assert finding.verdict == PASS
    # 5 % of the 2000 MiB floor over the ~5.3 h judged span outweighs 16 MiB/h here.
    window_s = (RUN_S - 0.05 * RUN_S) / 48
    span_h = 47 * window_s / 3600  # first to last judged window middle
    assert finding.threshold == pytest.approx(max(16 * MIB, 0.05 * 2000 * MIB / span_h), rel=0.01)


def test_leak_in_one_process_is_not_hidden_by_another_shrinking():
    processes = (flat_process(1, "api", 1500 * MIB, -150 * MIB), flat_process(2, "EngineCore", 1500 * MIB, 150 * MIB, seed=1))
    finding = check_rss(bare_run(RUN_S, processes=processes), Gates())
    assert finding.verdict == FAIL
    assert "EngineCore (pid 2)" in finding.evidence
    assert abs(finding.value) < 20 * MIB  # the total itself is flat


def test_too_few_windows_is_inconclusive():
    processes = (flat_process(1, "api", 500 * MIB, run_s=RUN_S),)
    run = bare_run(RUN_S, window_s=RUN_S / 10, processes=processes)
    finding = check_rss(run, Gates())
    assert finding.verdict == INCONCLUSIVE
    assert "< 20" in finding.evidence


def test_no_processes_is_skipped():
    assert check_rss(bare_run(RUN_S), Gates()).verdict == SKIPPED


def test_vram_skipped_without_gpu():
    finding = check_vram(bare_run(RUN_S), Gates())
    assert finding.verdict == SKIPPED and finding.details["gpu_seen"] is False


def test_vram_leak_fails():
    t_s = np.arange(0.0, RUN_S, 10.0)
    used = 60 * 2**30 + 100 * MIB * t_s / 3600 + np.random.default_rng(0).normal(0, MIB, t_s.size)
    run = bare_run(RUN_S, gpu_seen=True, gpu_processes=(GpuProcessSeries(7, t_s, used, "EngineCore"),))
    finding = check_vram(run, Gates())
    assert finding.verdict == FAIL and "VRAM of EngineCore (pid 7)" in finding.evidence


def test_vram_seen_but_unattributed_is_skipped():
    finding = check_vram(bare_run(RUN_S, gpu_seen=True), Gates())
    assert finding.verdict == SKIPPED and finding.details["gpu_seen"] is True


def test_fd_leak():
    leaking = flat_process(1, "api", 500 * MIB, fds=lambda t: 50 + np.floor(t / 600))
    finding = check_fds(bare_run(RUN_S, processes=(leaking,)), Gates())
    assert finding.verdict == FAIL and finding.unit == "fds/h"
    assert finding.value == pytest.approx(6.0, rel=0.1)


def test_constant_fds_pass_and_missing_fds_skip():
    steady = flat_process(1, "api", 500 * MIB, fds=lambda t: np.full(t.size, 64.0))
    assert check_fds(bare_run(RUN_S, processes=(steady,)), Gates()).verdict == PASS
    assert check_fds(bare_run(RUN_S, processes=(flat_process(1, "api", 1.0),)), Gates()).verdict == SKIPPED


def test_probe_readings_replace_floors_when_enough():
    t_probe = np.linspace(1000, RUN_S - 100, 24)
    probes = tuple(ProbeReading(t, 0.0, 0.0, 0.0, True,
                                (ProcessReading(1, "api", 500 * MIB + 50 * MIB * t / 3600),)) for t in t_probe)
    run = bare_run(RUN_S, processes=(flat_process(1, "api", 500 * MIB),), probes=probes, probes_ran=True)
    finding = check_rss(run, Gates())
    assert finding.details["source"] == "idle-probe readings"
    assert finding.verdict == FAIL and finding.value == pytest.approx(50 * MIB, rel=0.01)


def test_tree_total_skips_points_where_a_process_is_missing():
    t_s = np.arange(5.0)
    a = Series("a", 1, "a", t_s, np.array([1.0, 1, 1, 1, 1]))
    b = Series("b", 2, "b", t_s, np.array([2.0, 2, np.nan, 2, 2]))
    total = tree_total([a, b])
    assert np.isnan(total.values[2]) and total.values[0] == 3.0


def test_largest_step_locates_a_step():
    from soak.analysis.memory import largest_step
    t_s = np.arange(48.0)
    values = np.where(t_s < 30, 100.0, 150.0) + np.random.default_rng(0).normal(0, 1, 48)
    step = largest_step(Series("x", 1, "x", t_s, values))
    assert step["t_s"] == 30.0 and step["size"] == pytest.approx(50, abs=2)
    assert largest_step(Series("x", 1, "x", t_s, np.full(48, 3.0))) is None
