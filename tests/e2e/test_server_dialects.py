"""`soak start` against the reference server speaking each server's /metrics dialect (vLLM, SGLang, TGI,
llama.cpp): the dialect is detected (or forced with --server-kind), its gauges are read into server_samples, what
the server lacks is named rather than left INCONCLUSIVE; and a server soak did not start, on this host, has its
process found by its port and sampled without --server-pid."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import query

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

READY = re.compile(r"^SOAK_REFSERVER_READY (http://\S+)$")
SHORT_RUN = ("start", "--duration", "30s", "--warmup", "6s", "--window", "4s", "--sample-every", "1s", "--rate", "2",
             "--scenario", "chat_short", "--idle-probe-every", "10s", "--idle-probe-for", "1s", "--canary-every", "0",
             "--json")
# dialect → (KV usage exposed, preemption counter exposed)
EXPOSES = {"vllm": (True, True), "sglang": (True, True), "tgi": (True, False), "llamacpp": (False, False)}


def _summary(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    return json.loads(result.stdout)


def _events(out: Path, kind: str) -> list[dict]:
    return [json.loads(data) for (data,) in query(out, f"select data_json from events where kind = '{kind}'")]


@pytest.mark.parametrize("dialect", sorted(EXPOSES))
def test_each_dialect_is_detected_and_its_gauges_are_read(tmp_path, soak_cli, dialect):
    forced = ("--server-kind", dialect) if dialect == "tgi" else ()  # TGI's /v1/models does not name it
    result = soak_cli(*SHORT_RUN, "--reference-arg", f"--dialect={dialect}", *forced, "--out", str(tmp_path),
                      timeout_s=240)
    summary = _summary(result)
    assert summary["target"]["dialect"] == dialect
    assert f"reading /metrics as {dialect} (" in result.stderr  # said at start
    detected, final = _events(tmp_path, "server_dialect")  # at detection, and at the end with what was never seen
    assert detected["source"] == final["source"] == ("--server-kind" if forced else "the first /metrics scrape")
    kv_exposed, preemptions_exposed = EXPOSES[dialect]
    [(rows, running, waiting, kv, preemptions, tokens)] = query(tmp_path, (
        "select count(*), count(running), count(waiting), count(kv_usage), count(preemptions_total), "
        "max(generation_tokens_total) from server_samples where scrape_ok"))
    assert rows >= 10 and running == rows and waiting == rows and tokens > 0
    assert (kv == rows) if kv_exposed else (kv == 0)
    assert (preemptions == rows) if preemptions_exposed else (preemptions == 0)
    findings = {f["check"]: f for f in summary["findings"]}
    assert findings["leak.kv"]["verdict"] == "PASS", findings["leak.kv"]
    assert findings["hang"]["verdict"] == "PASS", findings["hang"]
    if not kv_exposed:
        assert "exposes no KV-cache usage gauge; idle probes read running requests only" in findings["leak.kv"]["evidence"]
        assert any(line.startswith("KV-cache usage") for line in summary["target"]["not_measured"])


@pytest.fixture
def external_refserver():
    """A reference server soak does not start, listening on 127.0.0.1; yields (URL, PID)."""
    process = subprocess.Popen([sys.executable, "-m", "soak.refserver", "--port", "0", "--dialect", "llamacpp"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        match = READY.match(process.stdout.readline().strip())
        assert match, "the reference server did not start"
        yield match.group(1), process.pid
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_a_local_server_soak_did_not_start_is_found_by_its_port_and_sampled(tmp_path, soak_cli, external_refserver):
    url, pid = external_refserver
    result = soak_cli(*SHORT_RUN, "--target", url, "--out", str(tmp_path), timeout_s=240)
    summary = _summary(result)
    [event] = _events(tmp_path, "server_processes")
    assert event["pids"] == [pid] and event["how"].startswith("listening on port")
    assert f"sampling server process(es) {pid}" in result.stderr
    [(samples, rss, fds)] = query(tmp_path, "select count(*), min(rss_bytes), min(fds) from process_samples "
                                             f"where role = 'server' and pid = {pid}")
    assert samples >= 10 and rss > 10_000_000 and fds > 0
    findings = {f["check"]: f for f in summary["findings"]}
    assert findings["leak.rss"]["verdict"] != "SKIPPED", findings["leak.rss"]
    assert summary["target"]["dialect"] == "llamacpp"
