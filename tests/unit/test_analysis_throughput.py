"""throughput.decay."""

import numpy as np
import pytest

from soak.analysis.findings import FAIL, INCONCLUSIVE, PASS, SKIPPED
from soak.analysis.gates import Gates
from soak.analysis.inputs import WindowRequests
from soak.analysis.throughput import check_decay
from support.synthetic import bare_run

RUN_S = 24 * 3600.0


def run_with(tokens_per_request_of, sends=True, run_s=RUN_S, window_s=None):
    rng = np.random.default_rng(0)
    plan = bare_run(run_s, window_s=window_s)
    rows = tuple(WindowRequests(w.index, w.start_s, w.end_s, requests=1000,
                               output_tokens=int(1000 * tokens_per_request_of(w) * rng.normal(1, 0.02)),
                               sends=1000 if sends else None) for w in plan.windows)
    return bare_run(run_s, window_s=window_s, request_windows=rows)


def test_steady_throughput_passes():
    finding = check_decay(run_with(lambda w: 200), Gates())
    assert finding.verdict == PASS and finding.details["measure"] == "tokens per offered request"


def test_decline_fails():
    finding = check_decay(run_with(lambda w: 200 * (1 - 0.3 * w.mid_s / RUN_S)), Gates())
    assert finding.verdict == FAIL and finding.unit == "% decline over run"
    assert finding.value == pytest.approx(30 * 0.95 / 0.85, rel=0.2)  # relative to the median
    assert "Throughput (tokens per offered request) falls" in finding.evidence
    line = finding.trend
    assert line.slope_per_s < 0 and line.intercept == pytest.approx(200 * (1 - 0.3 * 0.05), rel=0.05)


def test_growth_passes_and_tokens_per_s_without_sends():
    finding = check_decay(run_with(lambda w: 200 * (1 + 0.3 * w.mid_s / RUN_S), sends=False), Gates())
    assert finding.verdict == PASS and finding.details["measure"] == "tokens/s"


def test_skipped_and_inconclusive():
    assert check_decay(bare_run(RUN_S), Gates()).verdict == SKIPPED
    assert check_decay(run_with(lambda w: 200, window_s=RUN_S / 10), Gates()).verdict == INCONCLUSIVE


def test_decay_sets_a_detection_limit():
    finding = check_decay(run_with(lambda w: 200), Gates())
    assert finding.detection_limit is not None and 0 <= finding.detection_limit < 10
    assert "this run rules out declines above" in finding.evidence
