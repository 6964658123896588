"""The verdict algebra (docs/gates.md, "The overall verdict and `required`", "When the client is late")."""

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from soak.analysis import overall_verdict
from soak.analysis.findings import (
    CHECK_NAMES,
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
from soak.analysis.saturation import CLIENT_REACH, RERUN_STEP, client_sensitive, scope_to_client

LATE = "schedule-lag P99 728.0 ms > 100 ms"
GATES_DOC = Path(__file__).resolve().parents[2] / "docs" / "gates.md"


def findings(overrides=None, gpu_seen=True, probes_ran=True, slo_set=False):
    overrides = overrides or {}
    out = []
    for check in CHECK_ORDER:
        details = {}
        if check == "leak.vram":
            details["gpu_seen"] = gpu_seen
        if check == "leak.kv":
            details["probes_ran"] = probes_ran
        if check.startswith("goodput."):
            details["slo_set"] = slo_set
        verdict = overrides.get(check, PASS)
        if check == "client.saturation" and verdict == INVALID:
            details["late_by"] = LATE
        out.append(Finding(check, verdict, evidence=f"{check} evidence", details=details,
                           next_step=None if verdict == PASS else f"settle {check}"))
    return out


def by_check(items):
    return {f.check: f for f in items}


def test_all_pass():
    verdict, reason = overall_verdict(findings(), Gates())
    assert verdict == PASS and reason == "all 10 required checks PASS"


def test_a_server_side_fail_stays_fail_when_the_client_was_late():
    verdict, reason = overall_verdict(findings({"client.saturation": INVALID, "leak.rss": FAIL}), Gates())
    assert verdict == FAIL
    assert reason.startswith("leak.rss FAIL: leak.rss evidence; the client was late (" + LATE + ")")
    assert ("creep.ttft_p99, creep.itl_p99, creep.e2e_p99, hang, throughput.decay, goodput.decay, goodput.floor "
            "not judged") in reason


def test_a_fail_the_late_client_can_explain_is_invalid():
    verdict, reason = overall_verdict(findings({"client.saturation": INVALID, "creep.ttft_p99": FAIL,
                                                "throughput.decay": FAIL}), Gates())
    assert verdict == INVALID and reason.startswith("client.saturation INVALID: client.saturation evidence")
    assert ("(+7 more INVALID: creep.ttft_p99, creep.itl_p99, creep.e2e_p99, hang, throughput.decay, goodput.decay, "
            "goodput.floor)") in reason


def test_an_invalid_run_names_its_required_suspects():
    verdict, reason = overall_verdict(findings({"client.saturation": INVALID, "leak.rss": SUSPECT}), Gates())
    assert verdict == INVALID and reason.endswith("; also SUSPECT: leak.rss")


def test_scoping_marks_distorted_checks_and_keeps_what_they_measured():
    scoped = by_check(scope_to_client(findings({"client.saturation": INVALID, "creep.e2e_p99": FAIL,
                                                "hang": SKIPPED, "leak.rss": FAIL})))
    e2e = scoped["creep.e2e_p99"]
    assert e2e.verdict == INVALID and e2e.details["measured"]["verdict"] == "FAIL"
    assert e2e.evidence.startswith(f"Not judged: the client was late ({LATE}), and latency is timed by the client")
    assert e2e.evidence.endswith("What it measured (FAIL): creep.e2e_p99 evidence")
    assert e2e.next_step == RERUN_STEP and e2e.details["measured"]["next_step"] == "settle creep.e2e_p99"
    assert scoped["hang"].verdict == SKIPPED  # nothing judged, nothing to distrust
    assert scoped["leak.rss"].verdict == FAIL and scoped["leak.rss"].evidence == "leak.rss evidence"
    assert scope_to_client(list(scoped.values())) == list(scoped.values())  # scoping twice changes nothing


def test_a_hang_on_the_servers_own_gauges_stays_fail_behind_a_late_client():
    overrides = {"client.saturation": INVALID, "hang": FAIL}
    on_gauges = findings(overrides)
    next(f for f in on_gauges if f.check == "hang").details["stalls"] = [{"start_s": 100.0, "end_s": 190.0}]
    verdict, reason = overall_verdict(on_gauges, Gates())
    assert verdict == FAIL and reason.startswith("hang FAIL: hang evidence; the client was late (")
    drains_only = findings(overrides)  # probe drains timed out: timed by the client, not judged
    next(f for f in drains_only if f.check == "hang").details.update(stalls=[], timeouts=[{"t_s": 100.0}])
    assert by_check(scope_to_client(drains_only))["hang"].verdict == INVALID
    assert overall_verdict(drains_only, Gates())[0] == INVALID


def test_a_suspect_or_passing_client_leaves_every_check_alone():
    for client in (PASS, SUSPECT, SKIPPED):
        original = findings({"client.saturation": client, "creep.ttft_p99": FAIL})
        assert scope_to_client(original) == original
    assert overall_verdict(findings({"client.saturation": SUSPECT, "creep.ttft_p99": FAIL}), Gates())[0] == FAIL


def test_fail_names_the_check_and_counts_others():
    verdict, reason = overall_verdict(findings({"leak.rss": FAIL, "hang": FAIL}), Gates())
    assert verdict == FAIL
    assert reason == "leak.rss FAIL: leak.rss evidence (+1 more FAIL: hang)"


def test_fail_of_an_optional_check_still_fails():
    assert overall_verdict(findings({"leak.fds": FAIL}), Gates())[0] == FAIL


def test_a_required_suspect_is_not_a_pass():
    verdict, reason = overall_verdict(findings({"leak.rss": SUSPECT, "creep.e2e_p99": SUSPECT}), Gates())
    assert verdict == SUSPECT
    assert reason == ("leak.rss SUSPECT: leak.rss evidence — next: settle leak.rss "
                      "(+1 more SUSPECT: creep.e2e_p99)")


def test_a_suspect_client_is_a_suspect_run():
    verdict, reason = overall_verdict(findings({"client.saturation": SUSPECT}), Gates())
    assert verdict == SUSPECT and reason.startswith("client.saturation SUSPECT")


def test_suspect_outranks_inconclusive_and_survives_an_early_stop():
    overrides = {"creep.ttft_p99": INCONCLUSIVE, "errors.rise": SUSPECT}
    assert overall_verdict(findings(overrides), Gates())[0] == SUSPECT
    verdict, reason = overall_verdict(findings(overrides), Gates(), stopped_early=True)
    assert verdict == SUSPECT and reason.endswith("; the run was stopped early")
    missing = [f for f in findings({"leak.rss": SUSPECT}) if f.check != "crashes"]
    assert overall_verdict(missing, Gates())[0] == SUSPECT


def test_required_inconclusive_or_skipped():
    assert overall_verdict(findings({"creep.ttft_p99": INCONCLUSIVE}), Gates())[0] == INCONCLUSIVE
    verdict, reason = overall_verdict(findings({"errors.budget": SKIPPED}), Gates())
    assert verdict == INCONCLUSIVE and reason.startswith("errors.budget SKIPPED")


def test_optional_skipped_inconclusive_and_suspect_still_pass():
    verdict, reason = overall_verdict(findings({"leak.fds": SKIPPED, "creep.itl_p99": INCONCLUSIVE,
                                                "errors.bursts": SUSPECT, "server.log_errors": SUSPECT}), Gates())
    assert verdict == PASS
    assert reason == "all 10 required checks PASS; SUSPECT (not required): errors.bursts, server.log_errors"


def test_required_follows_the_gates_file():
    bursts_required = Gates.model_validate({"required": [*Gates().required, "errors.bursts"]})
    assert overall_verdict(findings({"errors.bursts": SUSPECT}), bursts_required)[0] == SUSPECT
    # fail_on_bursts makes the check itself FAIL, which fails the run whether required or not
    assert overall_verdict(findings({"errors.bursts": FAIL}), Gates())[0] == FAIL
    only_rss = Gates.model_validate({"required": ["leak.rss"]})
    assert overall_verdict(findings({"hang": SKIPPED, "creep.e2e_p99": SUSPECT}), only_rss)[0] == PASS


def test_goodput_is_required_only_with_an_slo():
    assert overall_verdict(findings({"goodput.floor": SKIPPED}), Gates())[0] == PASS
    verdict, reason = overall_verdict(findings({"goodput.floor": SUSPECT}, slo_set=True), Gates())
    assert verdict == SUSPECT and reason.startswith("goodput.floor SUSPECT")


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
    verdict, reason = overall_verdict(findings({"client.saturation": INVALID, "leak.rss": FAIL}), Gates(),
                                      stopped_early=True)
    assert verdict == FAIL and "the client was late" in reason and reason.endswith("; the run was stopped early")


def test_missing_required_check():
    partial = [f for f in findings() if f.check != "crashes"]
    verdict, reason = overall_verdict(partial, Gates())
    assert verdict == INCONCLUSIVE and "crashes" in reason


def test_reason_is_one_line_and_bounded():
    long = [Finding("leak.rss", FAIL, evidence="x\n" * 500)]
    reason = overall_verdict(long, Gates())[1]
    assert "\n" not in reason and len(reason) < 300
    suspect = [Finding("leak.rss", SUSPECT, evidence="x " * 500, next_step="y " * 500)]
    reason = overall_verdict(suspect, Gates.model_validate({"required": ["leak.rss"]}))[1]
    assert "\n" not in reason and len(reason) < 450


def test_every_check_is_classified_by_the_client_reach():
    assert set(CHECK_NAMES) - {"client.saturation"} <= set(CLIENT_REACH)
    sensitive = {check for check in CLIENT_REACH if client_sensitive(check)}
    assert sensitive == {"creep.ttft_p99", "creep.itl_p99", "creep.e2e_p99", "hang", "throughput.decay",
                         "goodput.decay", "goodput.floor", "baseline.regression"}


def test_docs_state_the_client_reach_of_every_check():
    rows = re.findall(r"^\| `([\w.]+)` \| (yes|no) \| (.+?) \|$", GATES_DOC.read_text(encoding="utf-8"), re.M)
    documented = {check: (answer == "yes", why) for check, answer, why in rows}
    assert documented == {check: (reach.distorted, reach.why) for check, reach in CLIENT_REACH.items()}


# -- the algebra over every combination -------------------------------------------------------------------
checks_verdicts = st.lists(st.sampled_from([v for v in VERDICTS if v != INVALID]), min_size=len(CHECK_ORDER),
                           max_size=len(CHECK_ORDER))
required_lists = st.lists(st.sampled_from(CHECK_ORDER), unique=True, max_size=len(CHECK_ORDER))


def expected(overrides, required, client_invalid, stopped):
    """The verdict as docs/gates.md states it, worked out independently of the code."""
    trusted = {c: v for c, v in overrides.items() if not (client_invalid and client_sensitive(c) and v != SKIPPED)}
    if FAIL in trusted.values():
        return FAIL
    if client_invalid:
        return INVALID
    if any(overrides[c] == SUSPECT for c in required):
        return SUSPECT
    if any(overrides[c] in (INCONCLUSIVE, SKIPPED) for c in required) or stopped:
        return INCONCLUSIVE
    return PASS


@settings(max_examples=400, deadline=None)  # a busy machine must not fail the algebra
@given(verdicts=checks_verdicts, required=required_lists, client_invalid=st.booleans(), stopped=st.booleans())
def test_algebra_properties(verdicts, required, client_invalid, stopped):
    overrides = dict(zip(CHECK_ORDER, verdicts))
    if client_invalid:
        overrides["client.saturation"] = INVALID
    gates = Gates.model_validate({"required": required})
    result, reason = overall_verdict(findings(overrides, slo_set=True), gates, stopped_early=stopped, gpu_seen=True,
                                     probes_ran=True)
    assert result == expected(overrides, required, client_invalid, stopped), reason
    if result == PASS:  # never a PASS a required check has not earned
        assert all(overrides[c] == PASS for c in required)
        assert not stopped and FAIL not in overrides.values() and not client_invalid
