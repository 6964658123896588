"""leak.rss / leak.vram / leak.fds."""

import numpy as np
import pytest

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED, SUSPECT, Exhaustion
from soak.analysis.gates import Gates
from soak.analysis.inputs import (
    GpuProcessSeries,
    HostSeries,
    ProbeReading,
    ProcessReading,
    ProcessSeries,
    WindowRequests,
)
from soak.analysis.memory import Series, check_fds, check_rss, check_vram, tree_total
from support.synthetic import MIB, MemoryModel, bare_run, memory_series, scaled_memory_model

RUN_S = 6 * 3600.0
GIB = 2**30


def flat_process(pid, name, floor, slope_bytes_per_h=0.0, run_s=RUN_S, seed=0, fds=None, sample_s=10.0):
    rng = np.random.default_rng(seed)
    t_s = np.arange(0.0, run_s, sample_s)
    sawtooth = 0.03 * floor * ((t_s / 60.0) % 1.0)
    rss = floor + sawtooth + rng.normal(0, 0.001 * floor, t_s.size) + slope_bytes_per_h * t_s / 3600
    return ProcessSeries(pid=pid, name=name, t_s=t_s, rss_bytes=rss,
                         fds=None if fds is None else fds(t_s))


def request_windows(run, rate_per_s=5.0):
    return tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=int(rate_per_s * (w.end_s - w.start_s)))
                 for w in run.windows)


def with_requests(run_s, rate_per_s=5.0, **fields):
    return bare_run(run_s, request_windows=request_windows(bare_run(run_s), rate_per_s), **fields)


def test_leak_fails_with_per_request_and_per_process():
    processes = (flat_process(1, "api", 500 * MIB), flat_process(2, "EngineCore", 1500 * MIB, 200 * MIB, seed=1))
    finding = check_rss(with_requests(RUN_S, processes=processes), Gates())
    assert finding.verdict == FAIL
    assert finding.unit == "bytes/h"
    assert finding.value == pytest.approx(200 * MIB, rel=0.05)
    assert finding.ci[0] < 200 * MIB < finding.ci[1] or finding.ci[0] == pytest.approx(200 * MIB, rel=0.05)
    assert finding.detection_limit == finding.ci[1]
    assert finding.per_request.unit == "bytes/request"
    assert finding.per_request.value == pytest.approx(200 * MIB / 3600 / 5.0, rel=0.05)
    assert [p.name for p in finding.per_process] == ["api", "EngineCore"]
    assert [p.verdict for p in finding.per_process] == [PASS, FAIL]
    assert "MiB/h" in finding.evidence and "persists in 2nd half" in finding.evidence
    assert finding.trend.space == "linear" and finding.details["source"] == "window floors"
    assert finding.exhaustion is None  # no host series: headroom unknown


def test_healthy_tree_passes_with_the_absolute_threshold_and_says_what_it_rules_out():
    processes = (flat_process(1, "api", 500 * MIB), flat_process(2, "EngineCore", 1500 * MIB, seed=1))
    finding = check_rss(bare_run(RUN_S, processes=processes), Gates())
    assert finding.verdict == PASS
    assert finding.threshold == 16 * MIB  # no host series: the cap; nothing scales with the run's length
    assert finding.detection_limit < finding.threshold
    assert "this run rules out rises above" in finding.evidence


def test_threshold_and_time_to_exhaustion_come_from_the_host_headroom():
    processes = (flat_process(1, "api", 1500 * MIB, 100 * MIB),)
    t_s = np.arange(0.0, RUN_S, 30.0)
    host = HostSeries(t_s=t_s, available_bytes=np.linspace(1.5 * GIB, 1 * GIB, t_s.size))
    finding = check_rss(bare_run(RUN_S, processes=processes, host=host, horizon_s=7 * 86400.0), Gates())
    assert finding.verdict == FAIL
    headroom = finding.details["headroom"]
    assert 1 * GIB <= headroom < 1.1 * GIB  # the least available over the judged windows
    assert finding.threshold == pytest.approx(headroom / 168)  # under the 16 MiB/h cap
    assert finding.exhaustion.resource == "host memory"
    assert finding.exhaustion.hours == pytest.approx(headroom / finding.value)
    assert f"host memory runs out in {finding.exhaustion.hours:.0f} h at this slope" in finding.evidence


def test_short_run_with_a_clear_leak_fails():
    # Two hours, 60 MiB/h on a 4 GiB process: the old relative threshold (5 % of the floor over the
    # span, ~115 MiB/h here) let it through; an absolute threshold does not loosen on a short run.
    process = flat_process(1, "EngineCore", 4 * GIB, 60 * MIB, run_s=7200.0, sample_s=2.0)
    finding = check_rss(bare_run(7200.0, processes=(process,)), Gates())
    assert finding.verdict == FAIL
    assert finding.threshold == 16 * MIB


def test_healthy_short_run_is_inconclusive_with_its_detection_limit():
    rng = np.random.default_rng(3)
    model = scaled_memory_model(1800.0, floor_bytes=2 * GIB)
    t_s, rss = memory_series(rng, model, 1800.0, 1.0)
    run = with_requests(1800.0, rate_per_s=10.0, processes=(ProcessSeries(1, "server", t_s, rss),))
    finding = check_rss(run, Gates())
    assert finding.verdict == INCONCLUSIVE
    assert finding.detection_limit > finding.threshold == 16 * MIB
    assert "this run rules out rises above" in finding.evidence and "of this load would rule out 16.0 MiB/h" in finding.evidence


def test_late_single_step_fails():
    rng = np.random.default_rng(5)
    t_s, rss = memory_series(rng, scaled_memory_model(86400.0, floor_bytes=2 * GIB), 86400.0, 10.0)
    rss = rss + 400 * MIB * (t_s >= 14 * 3600)
    finding = check_rss(bare_run(86400.0, processes=(ProcessSeries(1, "EngineCore", t_s, rss),)), Gates())
    assert finding.verdict == FAIL
    step = finding.details["step"]
    assert step["found"] and step["shift"] == pytest.approx(400 * MIB, rel=0.1)
    assert abs(step["t_s"] - 14 * 3600) < 3600
    assert "stepped up" in finding.evidence and "and stayed" in finding.evidence


@pytest.mark.parametrize("seed", range(4))
def test_healthy_warmup_sawtooth_and_ratchets_do_not_fail(seed):
    rng = np.random.default_rng(seed)
    model = MemoryModel(ratchets_per_run=6.0)
    processes = []
    for pid in (1, 2):
        t_s, rss = memory_series(rng, model, 86400.0, 10.0)
        processes.append(ProcessSeries(pid, f"p{pid}", t_s, rss))
    finding = check_rss(bare_run(86400.0, processes=tuple(processes)), Gates())
    assert finding.verdict != FAIL, finding.evidence


def test_sentence_and_figures_describe_the_process_that_decides():
    processes = (flat_process(1, "api", 1500 * MIB, -150 * MIB), flat_process(2, "EngineCore", 1500 * MIB, 150 * MIB, seed=1))
    finding = check_rss(bare_run(RUN_S, processes=processes), Gates())
    assert finding.verdict == FAIL
    assert finding.details["judged_by"] == "EngineCore (pid 2)"
    assert finding.evidence.startswith("RSS of EngineCore (pid 2) rises")
    assert finding.value == pytest.approx(150 * MIB, rel=0.05)  # the process's slope, not the flat total
    assert finding.ci[0] <= finding.value <= finding.ci[1] and finding.detection_limit == finding.ci[1]
    assert finding.trend.slope_per_s * 3600 == pytest.approx(finding.value)
    assert abs(finding.details["tree_total"]["value"]) < 20 * MIB


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


def test_vram_leak_fails_with_gpu_headroom():
    t_s = np.arange(0.0, RUN_S, 10.0)
    used = 60 * GIB + 100 * MIB * t_s / 3600 + np.random.default_rng(0).normal(0, MIB, t_s.size)
    host = HostSeries(t_s=t_s, available_bytes=np.full(t_s.size, 64.0 * GIB), gpu_free_bytes=np.full(t_s.size, 8.0 * GIB))
    run = bare_run(RUN_S, gpu_seen=True, gpu_processes=(GpuProcessSeries(7, t_s, used, "EngineCore"),), host=host)
    finding = check_vram(run, Gates())
    assert finding.verdict == FAIL and "VRAM of EngineCore (pid 7)" in finding.evidence
    assert finding.exhaustion.resource == "GPU memory" and finding.exhaustion.headroom == 8 * GIB
    assert "GPU memory runs out in" in finding.evidence


def test_vram_seen_but_unattributed_is_skipped():
    finding = check_vram(bare_run(RUN_S, gpu_seen=True), Gates())
    assert finding.verdict == SKIPPED and finding.details["gpu_seen"] is True


def test_fd_leak():
    leaking = flat_process(1, "api", 500 * MIB, fds=lambda t: 50 + np.floor(t / 600))
    finding = check_fds(bare_run(RUN_S, processes=(leaking,)), Gates())
    assert finding.verdict == FAIL and finding.unit == "fds/h"
    assert finding.value == pytest.approx(6.0, rel=0.1)
    assert finding.exhaustion is None  # the fd limit is not known


def test_per_request_figures_keep_their_significant_digits():
    # One fd per 500 requests at 5 requests/s: 36 fds/h, 0.002 fds/request.
    leaking = flat_process(1, "api", 500 * MIB, fds=lambda t: 50 + np.floor(t * 5.0 / 500))
    finding = check_fds(with_requests(RUN_S, processes=(leaking,)), Gates())
    assert finding.verdict == FAIL
    assert finding.per_request.value == pytest.approx(0.002, rel=0.05)
    assert "0.002 fds/request" in finding.evidence


def test_constant_fds_pass_and_missing_fds_skip():
    steady = flat_process(1, "api", 500 * MIB, fds=lambda t: np.full(t.size, 64.0))
    assert check_fds(bare_run(RUN_S, processes=(steady,)), Gates()).verdict == PASS
    assert check_fds(bare_run(RUN_S, processes=(flat_process(1, "api", 1.0),)), Gates()).verdict == SKIPPED


def _fd_probes(t_probe, fds_at_rest=40.0):
    return tuple(ProbeReading(t, 0.0, 0.0, 0.0, True, (ProcessReading(1, "api", 500 * MIB, fds=fds_at_rest),))
                 for t in t_probe)


def test_fds_are_judged_at_rest_when_probes_ran():
    # Connections follow the load, which doubles over the run: the floors under load climb, the
    # probe readings (taken with every connection closed) do not.
    connections = flat_process(1, "api", 500 * MIB, fds=lambda t: 40 + np.floor(60 * t / RUN_S) + 10)
    probes = _fd_probes(np.linspace(1200, RUN_S - 100, 24))
    run = bare_run(RUN_S, processes=(connections,), probes=probes, probes_ran=True)
    finding = check_fds(run, Gates())
    assert finding.details["source"] == "idle-probe readings"
    assert finding.verdict == PASS


def test_fds_with_too_few_probe_readings_are_inconclusive_saying_why():
    connections = flat_process(1, "api", 500 * MIB, fds=lambda t: 40 + np.floor(60 * t / RUN_S) + 10)
    run = bare_run(RUN_S, processes=(connections,), probes=_fd_probes([3600.0, 7200.0, 10800.0]), probes_ran=True)
    finding = check_fds(run, Gates())
    assert finding.verdict == INCONCLUSIVE
    assert "3 usable idle-probe readings" in finding.evidence and "at rest" in finding.evidence


def test_probe_readings_replace_floors_when_enough():
    t_probe = np.linspace(1000, RUN_S - 100, 24)
    probes = tuple(ProbeReading(t, 0.0, 0.0, 0.0, True,
                                (ProcessReading(1, "api", 500 * MIB + 50 * MIB * t / 3600),)) for t in t_probe)
    run = bare_run(RUN_S, processes=(flat_process(1, "api", 500 * MIB),), probes=probes, probes_ran=True)
    finding = check_rss(run, Gates())
    assert finding.details["source"] == "idle-probe readings"
    assert finding.verdict == FAIL and finding.value == pytest.approx(50 * MIB, rel=0.01)


def test_leak_finding_attributes_growth_to_the_leaking_scenario():
    rng = np.random.default_rng(11)
    base = bare_run(RUN_S)
    chat, cancel = [], []
    for w in base.windows:
        span = w.end_s - w.start_s
        chat.append(WindowRequests(w.index, w.start_s, w.end_s, requests=int(rng.poisson(rng.uniform(1, 6) * span))))
        cancel.append(WindowRequests(w.index, w.start_s, w.end_s, requests=0,
                                    cancelled=int(rng.poisson(rng.uniform(0.1, 1.0) * span))))
    ends = np.array([w.end_s for w in base.windows])
    cancels = np.concatenate([[0], np.cumsum([w.cancelled for w in cancel])])
    t_s = np.arange(0.0, RUN_S, 10.0)
    # Each cancelled request leaves 2 MiB behind, accumulated at the end of its window.
    held = 2 * MIB * cancels[np.searchsorted(ends, t_s, side="right")]
    process = ProcessSeries(1, "server", t_s, 1 * GIB + held + rng.normal(0, MIB, t_s.size))
    run = bare_run(RUN_S, processes=(process,), scenario_windows={"chat": tuple(chat), "cancel": tuple(cancel)})
    finding = check_rss(run, Gates())
    assert finding.verdict in (FAIL, SUSPECT)
    by_name = {a.scenario: a for a in finding.attribution}
    assert by_name["cancel (cancelled)"].per_request == pytest.approx(2 * MIB, rel=0.1)
    assert by_name["cancel (cancelled)"].unit == "bytes/request"
    assert "per cancelled `cancel` request" in finding.evidence and "other scenarios ≈ 0" in finding.evidence


def test_tree_total_skips_points_where_a_process_is_missing():
    t_s = np.arange(5.0)
    a = Series("a", 1, "a", t_s, np.array([1.0, 1, 1, 1, 1]))
    b = Series("b", 2, "b", t_s, np.array([2.0, 2, np.nan, 2, 2]))
    total = tree_total([a, b])
    assert np.isnan(total.values[2]) and total.values[0] == 3.0


def test_a_shrinking_tree_has_no_time_to_exhaustion():
    processes = (flat_process(1, "api", 1500 * MIB, -100 * MIB),)
    t_s = np.arange(0.0, RUN_S, 30.0)
    host = HostSeries(t_s=t_s, available_bytes=np.full(t_s.size, 8.0 * GIB))
    finding = check_rss(bare_run(RUN_S, processes=processes, host=host), Gates())
    assert finding.verdict == PASS
    assert finding.exhaustion == Exhaustion("host memory", 8 * GIB, None)
    assert "runs out" not in finding.evidence


def test_amounts_keep_significant_digits():
    from soak.analysis.fmt import count_text, hours_text, small_bytes_text
    assert [count_text(v) for v in (0.002, 0.00314, 6.04, 0.0)] == ["0.002", "0.0031", "6.0", "0.0"]
    assert [small_bytes_text(v) for v in (0.31, 12.0, 500.0, 5 * MIB)] == ["0.31 B", "12 B", "500 B", "5.0 MiB"]
    assert [hours_text(v) for v in (31.4, 2.25, 0.5)] == ["31 h", "2.2 h", "30m"]


# ---- warm-up from the data, the least change that counts, net growth in lasting steps ----------------

def sawtooth_process(run_s, floor, sample_s=1.0, seed=0, extra=lambda t: 0 * t):
    """A healthy reference-server-like process: GC sawtooth of 2 % and allocator noise, plus `extra`."""
    rng = np.random.default_rng(seed)
    t_s = np.arange(0.0, run_s, sample_s)
    rss = floor + 0.02 * floor * ((t_s / 7.0) % 1.0) + rng.normal(0, 0.0005 * floor, t_s.size) + extra(t_s)
    return ProcessSeries(1, "server", t_s, rss)


def test_a_one_mib_step_on_a_three_minute_run_does_not_fail():
    # 198 MiB stepping up 1.2 MiB at 1m and staying: the step gate's size has a floor (64 MiB or 2 %)
    # that a short run does not shrink.
    process = sawtooth_process(180.0, 198 * MIB, extra=lambda t: 1.2 * MIB * (t >= 60))
    finding = check_rss(with_requests(180.0, 2.0, processes=(process,)), Gates())
    assert finding.verdict != FAIL, finding.evidence
    assert "stepped up" not in finding.evidence
    assert finding.details["min_change"] == 64 * MIB


def test_a_short_run_with_a_steep_but_small_rise_is_suspect_and_says_how_long_would_tell():
    # 28.5 MiB/h for 4 minutes: about 2 MiB in all. Over the threshold, but no run this short can tell
    # slow wander from a leak.
    process = sawtooth_process(240.0, 60 * MIB, extra=lambda t: 28.5 * MIB * t / 3600)
    finding = check_rss(with_requests(240.0, 1.0, processes=(process,)), Gates())
    assert finding.verdict == SUSPECT, finding.evidence
    assert finding.details["gates"]["material"] is False
    assert "a slope must build before it can FAIL" in finding.evidence
    assert finding.next_step.startswith("run ≥ 4h00m of judged load to tell slow wander from a leak")


def test_a_gross_leak_on_a_short_run_still_fails():
    # 1 MiB a request at 10 requests/s: 35 GiB/h; four minutes are plenty.
    process = sawtooth_process(240.0, 500 * MIB, extra=lambda t: 10 * MIB * t)
    finding = check_rss(with_requests(240.0, 10.0, processes=(process,)), Gates())
    assert finding.verdict == FAIL and finding.details["gates"]["material"] is True


def test_late_steps_that_never_return_fail_with_the_step_sentence():
    rng = np.random.default_rng(8)
    t_s, rss = memory_series(rng, scaled_memory_model(86400.0, floor_bytes=2 * GIB), 86400.0, 10.0)
    rss = rss + 100 * MIB * (t_s >= 12 * 3600 + 300) + 110 * MIB * (t_s >= 18 * 3600 + 120)
    finding = check_rss(bare_run(86400.0, processes=(ProcessSeries(1, "EngineCore", t_s, rss),)), Gates())
    assert finding.verdict == FAIL, finding.evidence
    net = finding.details["net_growth"]
    assert net["is_staircase"] and len(net["stairs"]) == 2
    assert net["stepped"] == pytest.approx(210 * MIB, rel=0.15)
    assert [abs(s["t_s"] - at) < 3600 for s, at in zip(net["stairs"], (12 * 3600, 18 * 3600))] == [True, True]
    assert finding.evidence.startswith("RSS of EngineCore (pid 1) grew +")
    assert "in 2 steps (12h" in finding.evidence and ", 18h" in finding.evidence and "none returned" in finding.evidence
    assert finding.details["net_growth_threshold"] == 128 * MIB


def test_net_growth_threshold_is_a_share_of_a_small_headroom():
    gate = Gates().leak.rss
    assert gate.net_growth_threshold(None) == 128 * MIB
    assert gate.net_growth_threshold(1 * GIB) == pytest.approx(0.05 * GIB)
    assert gate.min_change(10 * GIB) == pytest.approx(0.02 * 10 * GIB)
    assert Gates().leak.vram.min_change(60 * GIB) == 8 * MIB  # NVML is exact: no share of the plateau


@pytest.mark.parametrize("seed", range(3))
def test_a_single_small_plateau_that_stops_passes(seed):
    rng = np.random.default_rng(seed)
    t_s, rss = memory_series(rng, scaled_memory_model(86400.0, floor_bytes=2 * GIB), 86400.0, 10.0)
    rss = rss + 40 * MIB * (t_s >= 9 * 3600)
    finding = check_rss(bare_run(86400.0, processes=(ProcessSeries(1, "EngineCore", t_s, rss),)), Gates())
    assert finding.verdict == PASS, finding.evidence


def test_a_warmup_still_under_way_at_the_end_is_inconclusive_never_fail():
    # Caches still filling: 150 MiB to go with a time constant as long as the run.
    rng = np.random.default_rng(4)
    t_s, rss = memory_series(rng, scaled_memory_model(7200.0, floor_bytes=1 * GIB), 7200.0, 2.0)
    rss = rss - 150 * MIB * np.exp(-t_s / 2400.0)
    finding = check_rss(with_requests(7200.0, processes=(ProcessSeries(1, "server", t_s, rss),)), Gates())
    assert finding.verdict == INCONCLUSIVE, finding.evidence
    assert "still warming up at the end of the run" in finding.evidence
    assert finding.next_step.startswith("run ≥ ") and "longer" in finding.next_step
    cut = finding.details["warmup"]["server (pid 1)"]
    assert cut["still_settling"] is True and cut["t_s"] > 3600


def test_the_warmup_cut_per_series_is_in_the_details_and_a_tail_is_cut_away():
    # A tail that settles by a quarter of the run is cut, so the settled rest is judged and PASSes.
    rng = np.random.default_rng(6)
    t_s, rss = memory_series(rng, scaled_memory_model(86400.0, floor_bytes=2 * GIB), 86400.0, 10.0)
    rss = rss - 120 * MIB * np.exp(-t_s / 9000.0)
    run = bare_run(86400.0, processes=(ProcessSeries(1, "EngineCore", t_s, rss),
                                       flat_process(2, "api", 500 * MIB, run_s=86400.0)))
    finding = check_rss(run, Gates())
    assert finding.verdict == PASS, finding.evidence
    cuts = finding.details["warmup"]
    assert set(cuts) == {"the server tree (2 processes)", "EngineCore (pid 1)", "api (pid 2)"}
    assert cuts["EngineCore (pid 1)"]["method"] == "mser-5" and cuts["EngineCore (pid 1)"]["t_s"] > run.warmup_s
    assert cuts["api (pid 2)"]["method"] == "configured" and cuts["api (pid 2)"]["t_s"] >= run.warmup_s
    entry = next(p for p in finding.per_process if p.name == "EngineCore")
    assert entry.warmup.to_dict() == cuts["EngineCore (pid 1)"]


def test_a_warmup_cut_that_would_leave_too_few_probe_readings_is_not_taken():
    # 24 hourly probe readings: a data-driven cut may take up to half, which would leave fewer than 20.
    t_probe = np.arange(1.0, 25.0) * 3600
    rss = 1 * GIB - 200 * MIB * np.exp(-t_probe / 10800.0) + np.random.default_rng(2).normal(0, MIB, t_probe.size)
    probes = tuple(ProbeReading(t, 0.0, 0.0, 0.0, True, (ProcessReading(1, "server", float(v)),))
                   for t, v in zip(t_probe, rss))
    run = bare_run(86400.0, processes=(flat_process(1, "server", 1 * GIB, run_s=86400.0),), probes=probes,
                   probes_ran=True)
    finding = check_rss(run, Gates())
    assert finding.details["source"] == "idle-probe readings" and finding.details["points"] >= 20
    assert finding.details["warmup"]["server (pid 1)"]["method"] == "configured"
