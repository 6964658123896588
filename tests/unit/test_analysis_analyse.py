"""analyse() end to end on synthetic runs, the summary.json shape, and the layer's purity."""

import json
import subprocess
import sys

import pytest

from soak.analysis import CHECK_ORDER, analyse, overall_verdict
from soak.analysis.findings import FAIL, INCONCLUSIVE, INVALID, PASS, SKIPPED, SUSPECT, Finding
from soak.analysis.gates import Gates
from support.synthetic import MIB, RunModel, synthetic_run, with_changes

# A 6 h run keeps these tests quick while leaving 48 windows of ~7 min.
BASE = RunModel(run_s=6 * 3600.0, rate_per_s=4.0, probe_every_s=1200.0)


def by_check(findings):
    return {f.check: f for f in findings}


@pytest.fixture(scope="module")
def healthy():
    return analyse(synthetic_run(1, BASE), Gates())


def test_one_finding_per_check_in_order(healthy):
    assert [f.check for f in healthy] == list(CHECK_ORDER)


def test_healthy_run_passes(healthy):
    verdict, reason = overall_verdict(healthy, Gates(), stopped_early=False)
    assert verdict == PASS, reason
    # The synthetic run has neither a server log, canary answers, an SLO, validated answers nor GPU health readings,
    # and sends its own load (the server's own ITL is judged behind a router): those checks say so.
    own_data = {"server.log_errors", "canary", "goodput.decay", "goodput.floor", "errors.invalid_output", "gpu.xid",
                "gpu.ecc", "creep.server_itl"}
    # fds are judged only at rest, and 17 idle probes are fewer than a trend needs (min_windows):
    # leak.fds is not required, so it says so without holding the run back.
    assert by_check(healthy)["leak.fds"].verdict == INCONCLUSIVE
    assert "judged only at rest" in by_check(healthy)["leak.fds"].evidence
    assert all(f.verdict in (PASS, SUSPECT) for f in healthy if f.check not in own_data | {"leak.fds"}), \
        [(f.check, f.verdict, f.evidence) for f in healthy]
    assert {f.verdict for f in healthy if f.check in own_data} == {SKIPPED}


def test_summary_json_shape(healthy):
    for finding in healthy:
        data = finding.to_dict()
        assert list(data)[:7] == ["check", "verdict", "value", "unit", "ci", "threshold", "evidence"]
        json.dumps(data, allow_nan=False)
    leak = by_check(healthy)["leak.rss"].to_dict()
    assert {"per_process", "per_request", "trend"} <= set(leak)
    assert isinstance(leak["ci"], list) and len(leak["ci"]) == 2
    assert by_check(healthy)["creep.ttft_p99"].to_dict()["percentile_used"] == "p99"


@pytest.mark.parametrize("fault, check", [
    (dict(leak_bytes_per_h=400 * MIB), "leak.rss"),
    (dict(vram_leak_bytes_per_h=400 * MIB), "leak.vram"),
    (dict(kv_residue=0.02), "leak.kv"),
    (dict(creep_frac=1.0), "creep.ttft_p99"),
    (dict(error_rise_abs=0.03), "errors.rise"),
    (dict(hang_at_s=10_000.0), "hang"),
    (dict(crash_at_s=12_000.0), "crashes"),
])
def test_planted_fault_fails_its_check(fault, check):
    findings = by_check(analyse(synthetic_run(2, with_changes(BASE, **fault)), Gates()))
    assert findings[check].verdict == FAIL, findings[check].evidence
    verdict, reason = overall_verdict(list(findings.values()), Gates())
    assert verdict == FAIL and check in reason


def test_saturated_client_invalidates():
    findings = analyse(synthetic_run(3, with_changes(BASE, late_frac=0.05)), Gates())
    assert by_check(findings)["client.saturation"].verdict == INVALID
    # what a late client times or offers is not judged; the server's own memory is
    creep = by_check(findings)["creep.ttft_p99"]
    assert creep.verdict == INVALID and creep.evidence.startswith("Not judged: the client was late (sends > 1 s late")
    assert creep.details["measured"]["verdict"] in ("PASS", "SUSPECT", "INCONCLUSIVE")
    assert by_check(findings)["leak.rss"].verdict != INVALID
    assert overall_verdict(findings, Gates())[0] == INVALID


def test_a_leak_behind_a_saturated_client_still_fails():
    findings = analyse(synthetic_run(3, with_changes(BASE, late_frac=0.05, leak_bytes_per_h=400 * MIB)), Gates())
    assert by_check(findings)["leak.rss"].verdict == FAIL
    verdict, reason = overall_verdict(findings, Gates())
    assert verdict == FAIL and reason.startswith("leak.rss FAIL") and "the client was late (sends > 1 s late" in reason


def test_run_without_gpu_or_probes():
    findings = by_check(analyse(synthetic_run(4, with_changes(BASE, gpu=False, probe_every_s=0.0)), Gates()))
    assert findings["leak.vram"].verdict == SKIPPED
    # Without probes leak.kv judges the floor of the KV gauge between requests, and is not required.
    assert findings["leak.kv"].verdict == PASS and findings["leak.kv"].details["probes_ran"] is False
    assert overall_verdict(list(findings.values()), Gates())[0] == PASS


def test_empty_run_skips_rather_than_passes():
    from support.synthetic import bare_run
    findings = analyse(bare_run(3600.0), Gates())
    assert {f.verdict for f in findings} == {SKIPPED}
    assert overall_verdict(findings, Gates())[0] == INCONCLUSIVE


def test_a_crashing_check_becomes_inconclusive(monkeypatch):
    from soak.analysis import checks

    def broken(run, gates):
        raise ValueError("boom")

    monkeypatch.setitem(checks.CHECKS, "hang", broken)
    findings = by_check(analyse(synthetic_run(5, BASE), Gates()))
    assert findings["hang"].verdict == INCONCLUSIVE and "boom" in findings["hang"].evidence


def test_finding_rejects_unknown_verdict():
    with pytest.raises(ValueError):
        Finding("leak.rss", "MAYBE")


def test_analysis_imports_no_other_stage():
    code = ("import sys, soak.analysis;"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'locust', 'gevent', 'jinja2')"
            " or (m.startswith('soak.') and m.split('.')[1] not in ('analysis', 'contracts', 'errors', 'units'))];"
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_to_dict_makes_numpy_and_nan_json_safe():
    import numpy as np
    finding = Finding("leak.rss", PASS, value=np.float64("nan"), ci=(np.float64(1.0), float("inf")),
                      threshold=np.int64(3), details={"arr": np.arange(3), "flag": np.bool_(True),
                                                      "nested": {"x": (np.float32(0.5), None)}})
    data = finding.to_dict()
    assert data["value"] is None and data["ci"] == [1.0, None] and data["threshold"] == 3
    assert data["details"] == {"arr": [0, 1, 2], "flag": True, "nested": {"x": [0.5, None]}}
    json.dumps(data, allow_nan=False)
