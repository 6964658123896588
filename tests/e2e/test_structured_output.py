"""A whole `soak start` of the structured scenario against a reference server whose guided decoding breaks after
4 s (`invalid-output-after`): the broken answers are their own error class and `errors.invalid_output` FAILs the
run quoting the first one."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_structured_answers_that_break_fail_the_run_with_the_first_quoted(soak_cli, tmp_path):
    result = soak_cli("start", "--duration", "9s", "--warmup", "2s", "--window", "2s", "--sample-every", "1s",
                      "--rate", "4", "--scenario", "structured", "--idle-probe-every", "0",
                      "--reference-fault", "invalid-output-after=4s", "--out", str(tmp_path), "--json",
                      timeout_s=90)
    assert result.returncode == 1, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    finding = next(f for f in summary["findings"] if f["check"] == "errors.invalid_output")
    assert finding["verdict"] == "FAIL" and finding["value"] == summary["totals"]["errors_by_class"]["invalid_output"]
    first = finding["details"]["first_answer"]
    assert first["message"].startswith("invalid JSON (") and "; answer: '{" in first["message"]
    assert "first: invalid JSON" in finding["evidence"]
    # the answers before the fault were valid
    assert 0 < finding["value"] < summary["totals"]["requests"]
    assert "errors.invalid_output: FAIL" in result.stderr
