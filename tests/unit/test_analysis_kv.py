"""leak.kv: the idle floor after a drain — any residue is a FAIL without statistics; without probes,
the trend and step of each window's KV floor."""

from dataclasses import replace

import numpy as np
import pytest

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED, SUSPECT
from soak.analysis.gates import Gates
from soak.analysis.inputs import ProbeReading, ServerSeries
from soak.analysis.kv import check_kv
from support.synthetic import bare_run, kv_usage_series


def run_with(*probes, probes_ran=True):
    return bare_run(3600.0, probes=tuple(probes), probes_ran=probes_ran)


def test_no_probes_is_skipped():
    finding = check_kv(run_with(probes_ran=False), Gates())
    assert finding.verdict == SKIPPED and finding.details["probes_ran"] is False


def test_clean_drains_pass():
    finding = check_kv(run_with(ProbeReading(600, 0.0, 0, 0), ProbeReading(1200, 0.0005, 0, 0)), Gates())
    assert finding.verdict == PASS and finding.value == 0.0005
    assert "All 2 drained" in finding.evidence


def test_kv_residue_fails_with_the_reading():
    finding = check_kv(run_with(ProbeReading(600, 0.0, 0, 0), ProbeReading(1800, 0.031, 0, 0)), Gates())
    assert finding.verdict == FAIL
    assert "KV usage 3.10 %" in finding.evidence and "30m" in finding.evidence
    assert finding.value == 0.031 and finding.threshold == 0.001


def test_running_residue_fails_without_kv_gauge():
    finding = check_kv(run_with(ProbeReading(600, None, 2, 0)), Gates())
    assert finding.verdict == FAIL and "running 2" in finding.evidence


def test_undrained_probes_with_requests_running_are_not_judged_here():
    finding = check_kv(run_with(ProbeReading(600, 0.5, 3, 0, drained=False)), Gates())
    assert finding.verdict == INCONCLUSIVE and "timed out" in finding.evidence


def test_kv_held_while_nothing_runs_fails_even_when_the_queue_never_drained():
    # Leaked blocks starve the pool: requests wait forever, so the drain times out with nothing running.
    finding = check_kv(run_with(ProbeReading(600, 0.99, 0, 26, drained=False)), Gates())
    assert finding.verdict == FAIL and "queued behind the held blocks" in finding.evidence


def test_server_without_gauges_is_skipped_naming_them():
    # Never INCONCLUSIVE for a gauge the server does not have: that would block a PASS forever.
    finding = check_kv(run_with(ProbeReading(600, None, None, None)), Gates())
    assert finding.verdict == SKIPPED
    assert "exposes neither a KV-cache usage gauge nor a running-requests gauge" in finding.evidence


def test_llamacpp_without_a_kv_gauge_is_judged_from_running_requests():
    from soak.analysis.inputs import Event
    from soak.contracts import EventKind

    dialect = Event(1.0, EventKind.SERVER_DIALECT, "server dialect llamacpp", {
        "dialect": "llamacpp", "server": "llama.cpp llama-server", "not_measured": ["KV-cache usage"]})
    run = bare_run(3600.0, probes=(ProbeReading(600, None, 0, 0), ProbeReading(1200, None, 0, 0)), probes_ran=True,
                   events=(dialect,))
    finding = check_kv(run, Gates())
    assert finding.verdict == PASS
    assert "llama.cpp llama-server exposes no KV-cache usage gauge; idle probes read running requests only" \
        in finding.evidence


def test_gate_is_configurable():
    gates = Gates.model_validate({"leak": {"kv": {"max_kv_usage": 0.05}}})
    assert check_kv(run_with(ProbeReading(600, 0.031, 0, 0)), gates).verdict == PASS


# ---- without probes: the KV floor of each window -----------------------------------------------------

def floor_run(leak_per_h=0.0, onset_s=6 * 3600.0, step=0.0, step_at_s=14 * 3600.0, run_s=86400.0, seed=0):
    """A steady load without probes; each running request holds 1/64 of the cache, plus the planted leak."""
    t_s, running, kv_usage = kv_usage_series(np.random.default_rng(seed), run_s, 10.0, 2.0)
    kv_usage = kv_usage + leak_per_h * np.clip(t_s - onset_s, 0, None) / 3600 + step * (t_s >= step_at_s)
    return bare_run(run_s, server=ServerSeries(t_s=t_s, running=running, kv_usage=np.clip(kv_usage, 0, 1)))


def test_without_probes_a_late_floor_climb_fails():
    # The KV floor starts climbing after 6 h of 24 h at 1.5 %/h: the seed's late KV leak without probes.
    finding = check_kv(floor_run(leak_per_h=0.015), Gates())
    assert finding.verdict == FAIL
    assert finding.details["probes_ran"] is False and finding.details["source"] == "window floors of KV usage"
    assert finding.unit == "fraction of KV cache/h" and finding.value > finding.threshold
    assert finding.threshold == pytest.approx((1 - finding.details["start_floor"]) / 168)
    assert "KV-usage floor" in finding.evidence


def test_without_probes_a_late_lasting_step_of_the_floor_fails():
    finding = check_kv(floor_run(step=0.15), Gates())
    assert finding.verdict == FAIL and finding.details["step"]["found"]
    assert "stepped up" in finding.evidence


def test_without_probes_a_small_step_of_the_floor_on_a_short_run_does_not_fail():
    # Under load the floor follows the load: a run whose requests grow longer lifts it a little and for good.
    # A step under `floor_min_step` cannot FAIL, however short the run (the step it takes to count stays put).
    finding = check_kv(short_floor_run(step=0.03), Gates())
    assert finding.verdict != FAIL, finding.evidence
    assert "stepped up" not in finding.evidence
    assert check_kv(short_floor_run(step=0.03), Gates.model_validate({"leak": {"kv": {"floor_min_step": 0}}})
                    ).verdict == FAIL  # what it was before the floor: a step that shrank with the run's length
    assert check_kv(short_floor_run(step=0.15), Gates()).verdict == FAIL


def short_floor_run(step: float, seed: int = 0):
    """Three minutes at a sample a second, 5 s windows, the floor lifted by `step` for good after 90 s."""
    t_s = np.arange(0.0, 180.0, 1.0)
    running = np.random.default_rng(seed).poisson(2.0, t_s.size).astype(float)
    kv_usage = np.clip(running / 64 + step * (t_s >= 90.0), 0, 1)
    return bare_run(180.0, 20.0, 5.0, server=ServerSeries(t_s=t_s, running=running, kv_usage=kv_usage))


def test_without_probes_a_floor_raised_by_a_slowing_server_is_suspect_not_fail():
    # A server that slows holds more requests at once: from 2 to 12 running on average, each holding 1/64 of the
    # cache, so every window's quietest moment holds more blocks. No block leaked; window floors cannot tell.
    t_s = np.arange(0.0, 7200.0, 10.0)
    running = np.random.default_rng(3).poisson(2.0 + 10.0 * t_s / t_s[-1]).astype(float)
    slowing = bare_run(7200.0, server=ServerSeries(t_s=t_s, running=running, kv_usage=np.clip(running / 64, 0, 1)))
    assert check_kv(replace(slowing, server=replace(slowing.server, running=None)), Gates()).verdict == FAIL
    finding = check_kv(slowing, Gates())
    assert finding.verdict == SUSPECT and "requests the server held running rose with it" in finding.evidence
    assert finding.details["running"]["late_median"] - finding.details["running"]["early_median"] >= 5
    assert "idle probes" in finding.next_step


def test_without_probes_a_healthy_floor_passes_with_its_detection_limit():
    finding = check_kv(floor_run(), Gates())
    assert finding.verdict == PASS
    assert finding.detection_limit < finding.threshold
    assert "rules out rises above" in finding.evidence
    assert finding.details["probes_ran"] is False  # so verdict.py does not require leak.kv


def test_without_probes_or_kv_gauge_is_skipped_and_too_few_windows_inconclusive():
    assert check_kv(bare_run(3600.0, server=ServerSeries(t_s=np.arange(0.0, 3600, 5))), Gates()).verdict == SKIPPED
    short = floor_run(run_s=3600.0)
    finding = check_kv(bare_run(3600.0, window_s=600.0, server=short.server), Gates())
    assert finding.verdict == INCONCLUSIVE and "< 20" in finding.evidence


def test_floor_threshold_is_configurable():
    gates = Gates.model_validate({"leak": {"kv": {"floor_slope_per_h": 0.05}}})
    finding = check_kv(floor_run(leak_per_h=0.015), gates)
    assert finding.threshold == 0.05 and finding.verdict != FAIL


def test_without_probes_the_floor_warmup_is_found_from_the_data():
    # Prefix caching fills over the first hours: the floor settles 25 % higher with a 2-hour time constant.
    run = floor_run()
    t_s = run.server.t_s
    warming = np.clip(run.server.kv_usage - 0.25 * np.exp(-t_s / 7200.0) + 0.25, 0, 1)
    finding = check_kv(bare_run(86400.0, server=ServerSeries(t_s=t_s, running=run.server.running, kv_usage=warming)),
                       Gates())
    assert finding.verdict == PASS, finding.evidence
    cut = finding.details["warmup"]
    assert cut["method"] == "mser-5" and cut["t_s"] > run.warmup_s and not cut["still_settling"]


def test_without_probes_a_floor_still_settling_at_the_end_is_inconclusive():
    run = floor_run(run_s=7200.0)
    t_s = run.server.t_s
    warming = np.clip(run.server.kv_usage + 0.3 - 0.3 * np.exp(-t_s / 3600.0), 0, 1)
    finding = check_kv(bare_run(7200.0, server=ServerSeries(t_s=t_s, running=run.server.running, kv_usage=warming)),
                       Gates())
    assert finding.verdict == INCONCLUSIVE, finding.evidence
    assert "still warming up at the end of the run" in finding.evidence and finding.details["warmup"]["still_settling"]
    assert finding.next_step.startswith("run ≥ ")
