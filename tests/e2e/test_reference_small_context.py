"""`soak start` against a reference server with a 512-token context: soak reads it, and the long scenarios'
prompts fit it (no 400s); summary.json and the report say which context was used and where it came from."""

from __future__ import annotations

import json
from html import unescape
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]


def test_prompts_fit_a_context_smaller_than_the_default(soak_cli, tmp_path):
    result = soak_cli("start", "--duration", "25s", "--warmup", "5s", "--rate", "3", "--scenario", "long_context",
                      "--scenario", "long_tail", "--scenario", "mixed", "--reference-arg=--max-model-len=512",
                      "--out", str(tmp_path), "--json", timeout_s=200)
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["context"] == {"tokens": 512, "source": "GET /v1/models", "stated": 512}
    assert summary["totals"]["requests"] > 20
    assert summary["totals"]["errors"] == 0 and summary["error_messages"] == []
    report = unescape(Path(summary["report_html"]).read_text(encoding="utf-8"))
    assert "Requests were sized for a context of 512 tokens (from GET /v1/models)." in report
