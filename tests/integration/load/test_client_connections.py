"""A streamed answer hands its connection back to the pool, whether its end came with `[DONE]` or after it."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from loadtools import run_tasks

SSE_SERVER = Path(__file__).resolve().parents[2] / "support" / "sse_server.py"
TOKENS = 16


@pytest.fixture(params=["0", "2"], ids=["whole answer in one write", "a write per token"])
def sse_url(request):
    process = subprocess.Popen([sys.executable, str(SSE_SERVER), "--ttft-ms", "0", "--itl-ms", request.param,
                                "--tokens", str(TOKENS)], stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert line.startswith("SSE_READY "), line
    yield line.split()[1]
    process.kill()
    process.wait(timeout=10)


def test_streams_one_after_another_share_one_connection(sse_url):
    records = run_tasks(sse_url, "chat_short", "bench", per_task=12)
    assert len(records) == 12
    assert all(record.error_class is None and record.output_tokens == TOKENS for record in records)
    assert all(len(record.itl_ms) == TOKENS - 1 for record in records)
    with urllib.request.urlopen(sse_url + "/stats", timeout=10) as response:
        stats = json.loads(response.read())
    assert stats["requests"] == 12
    assert stats["stream_connections"] == 1  # each answer went back to the pool and carried the next
