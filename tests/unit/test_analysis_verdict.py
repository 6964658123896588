"""The verdict algebra (docs/gates.md, "The overall verdict and `required`")."""

from hypothesis import given
from hypothesis import strategies as st

from soak.analysis import overall_verdict
from soak.analysis.findings import (
    CHECK_ORDER,
    FAIL,
    INCONCLUSIVE,
    INVALID,
    PASS,
    SKIPPED,
    SUSPECT,
    VERDICTS,
    Finding,
)
from soak.analysis.gates import Gates


def findings(overrides=None, gpu_seen=True, probes_ran=True):
    overrides = overrides or {}
    out = []
    for check in CHECK_ORDER:
        details = {}
        if check == "leak.vram":
            details["gpu_seen"] = gpu_seen
        if check == "leak.kv":
            details["probes_ran"] = probes_ran
        out.append(Finding(check, overrides.get(check, PASS), evidence=f"{check} evidence", details=details))
    return out


def test_all_pass():
    verdict, reason = overall_verdict(findings(), Gates())
    assert verdict == PASS and "all 10 required checks PASS" in reason


def test_invalid_beats_fail():
    verdict, reason = overall_verdict(findings({"client.saturation": INVALID, "leak.rss": FAIL}), Gates())
    assert verdict == INVALID and reason.startswith("client.saturation INVALID: ")


def test_fail_names_the_check_and_counts_others():
    verdict, reason = overall_verdict(findings({"leak.rss": FAIL, "hang": FAIL}), Gates())
    assert verdict == FAIL
    assert reason == "leak.rss FAIL: leak.rss evidence (+1 more FAIL: hang)"


def test_fail_of_an_optional_check_still_fails():
    assert overall_verdict(findings({"leak.fds": FAIL}), Gates())[0] == FAIL


def test_required_inconclusive_or_skipped():
    assert overall_verdict(findings({"creep.ttft_p99": INCONCLUSIVE}), Gates())[0] == INCONCLUSIVE
    verdict, reason = overall_verdict(findings({"errors.budget": SKIPPED}), Gates())
    assert verdict == INCONCLUSIVE and reason.startswith("errors.budget SKIPPED")


def test_optional_skipped_and_suspect_still_pass():
    verdict, reason = overall_verdict(findings({"leak.fds": SKIPPED, "creep.itl_p99": INCONCLUSIVE,
                                                "errors.bursts": SUSPECT, "leak.rss": SUSPECT}), Gates())
    assert verdict == PASS and "SUSPECT: leak.rss, errors.bursts" in reason


def test_vram_and_kv_required_only_when_applicable():
    no_gpu = findings({"leak.vram": SKIPPED}, gpu_seen=False)
    assert overall_verdict(no_gpu, Gates())[0] == PASS
    assert overall_verdict(findings({"leak.vram": SKIPPED}, gpu_seen=True), Gates())[0] == INCONCLUSIVE
    no_probes = findings({"leak.kv": SKIPPED}, probes_ran=False)
    assert overall_verdict(no_probes, Gates())[0] == PASS
    assert overall_verdict(findings({"leak.kv": SKIPPED}), Gates(), probes_ran=True)[0] == INCONCLUSIVE
    assert overall_verdict(findings({"leak.kv": SKIPPED}), Gates(), probes_ran=False)[0] == PASS


def test_stopped_early():
    verdict, reason = overall_verdict(findings(), Gates(), stopped_early=True)
    assert verdict == INCONCLUSIVE and "stopped early" in reason
    assert overall_verdict(findings({"hang": FAIL}), Gates(), stopped_early=True)[0] == FAIL


def test_missing_required_check():
    partial = [f for f in findings() if f.check != "crashes"]
    verdict, reason = overall_verdict(partial, Gates())
    assert verdict == INCONCLUSIVE and "crashes" in reason


def test_custom_required_list():
    gates = Gates.model_validate({"required": ["leak.rss"]})
    assert overall_verdict(findings({"hang": SKIPPED}), gates)[0] == PASS


def test_reason_is_one_line_and_bounded():
    long = [Finding("leak.rss", FAIL, evidence="x\n" * 500)]
    reason = overall_verdict(long, Gates())[1]
    assert "\n" not in reason and len(reason) < 300


finding_verdicts = st.lists(st.sampled_from([v for v in VERDICTS if v != INVALID]), min_size=14, max_size=14)


@given(verdicts=finding_verdicts, invalid=st.booleans(), stopped=st.booleans())
def test_algebra_properties(verdicts, invalid, stopped):
    overrides = dict(zip(CHECK_ORDER, verdicts))
    if invalid:
        overrides["client.saturation"] = INVALID
    result, _ = overall_verdict(findings(overrides), Gates(), stopped_early=stopped)
    values = set(overrides.values())
    if INVALID in values:
        assert result == INVALID
    elif FAIL in values:
        assert result == FAIL
    else:
        assert result in (PASS, INCONCLUSIVE)
        required = set(Gates().required)
        open_required = any(overrides[c] in (INCONCLUSIVE, SKIPPED) for c in required)
        assert (result == INCONCLUSIVE) == (open_required or stopped)
