"""A whole `soak start` against a lax server with a 1,024-token context (llama.cpp-like): its
400s are grouped by message, and its 200s to malformed requests are named validation gaps — in summary.json,
report.html, soak.log and the CLI's output."""

from __future__ import annotations

import json
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]

MOCK = Path(__file__).resolve().parents[1] / "integration" / "load" / "mockserver.py"
CONTEXT_400 = "HTTP 400: the request exceeds the available context size (1024 tokens)"


@pytest.fixture
def lax_server():
    process = subprocess.Popen([sys.executable, str(MOCK), "--max-model-len", "1024", "--lenient", "--ttft-ms", "1",
                                "--itl-ms", "0.2"], stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert line.startswith("MOCK_READY "), line
    yield line.split()[1]
    process.kill()
    process.wait(timeout=10)


def test_error_bodies_are_grouped_and_validation_gaps_named(soak_cli, lax_server, tmp_path):
    # --max-context above what the server states: long_context's prompts overflow, as soak's 2,048 did against a real llama.cpp.
    result = soak_cli("start", "--target", lax_server, "--duration", "30s", "--warmup", "5s", "--rate", "4",
                      "--scenario", "bad_input", "--scenario", "long_context", "--max-context", "4096",
                      "--out", str(tmp_path), timeout_s=150)
    assert result.returncode in (1, 3), result.stderr
    [run_dir] = [path for path in tmp_path.iterdir() if path.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))

    assert summary["context"] == {"tokens": 4096, "source": "--max-context", "stated": 1024}
    [group] = summary["error_messages"]
    assert (group["message"], group["status_code"], group["scenarios"]) == (CONTEXT_400, 400, ["long_context"])
    assert group["count"] == summary["totals"]["errors"] > 0
    gaps = {gap["expectation"]: gap for gap in summary["validation_gaps"]}
    assert {"malformed JSON: a 4xx", "unknown model: a 4xx", "empty messages: a 4xx"} <= set(gaps)
    assert all(gap["scenario"] == "bad_input" and gap["status_code"] == 200 for gap in gaps.values())

    report = unescape((run_dir / "report.html").read_text(encoding="utf-8"))
    assert f"{group['count']} × {CONTEXT_400}" in report
    assert "answered 200 where a refusal was expected" in report and "empty messages: a 4xx" in report

    log = (run_dir / "soak.log").read_text(encoding="utf-8")
    assert f"{group['count']} × {CONTEXT_400}" in log
    assert "WARNING soak.run.ledger: validation gap: bad_input expected empty messages: a 4xx" in log
    assert "context length 4096 tokens, from --max-context (the server states 1024)" in log
    assert f"error: {group['count']} × {CONTEXT_400}" in result.stderr
    assert "validation gap:" in result.stderr
