"""leak.kv: the idle floor after a drain — any residue is a FAIL without statistics."""

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED
from soak.analysis.gates import Gates
from soak.analysis.inputs import ProbeReading
from soak.analysis.kv import check_kv
from support.synthetic import bare_run


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


def test_server_without_gauges_is_inconclusive():
    finding = check_kv(run_with(ProbeReading(600, None, None, None)), Gates())
    assert finding.verdict == INCONCLUSIVE and "exposes neither" in finding.evidence


def test_gate_is_configurable():
    gates = Gates.model_validate({"leak": {"kv": {"max_kv_usage": 0.05}}})
    assert check_kv(run_with(ProbeReading(600, 0.031, 0, 0)), gates).verdict == PASS
