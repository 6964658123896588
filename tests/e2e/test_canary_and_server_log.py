"""The golden-output canary and the server-log scan, end to end: `soak start` as a real subprocess against the
reference server, managed (with planted faults) and external (through --target and --server-log)."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

SHORT_RUN = ["start", "--duration", "36s", "--warmup", "6s", "--window", "5s", "--sample-every", "2s", "--json"]
READY = re.compile(r"^SOAK_REFSERVER_READY (http://\S+)$")


def _summary(result) -> dict:
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    return json.loads(result.stdout)


def _findings(summary: dict) -> dict[str, dict]:
    return {finding["check"]: finding for finding in summary["findings"]}


def _events(out, kinds: tuple[str, ...]) -> list[tuple[float, str, dict]]:
    db = sqlite3.connect(out / "soak.db")
    rows = db.execute(f"select t_s, kind, data_json from events where kind in ({','.join('?' * len(kinds))}) "
                      "order by t_s", kinds).fetchall()
    db.close()
    return [(t_s, kind, json.loads(data) if data else {}) for t_s, kind, data in rows]


def test_a_corrupted_answer_and_a_fatal_log_line_fail_their_checks(tmp_path, soak_cli):
    result = soak_cli(*SHORT_RUN, "--rate", "2", "--canary-every", "3s", "--idle-probe-every", "12s",
                      "--idle-probe-for", "2s", "--out", str(tmp_path), "--reference-fault", "corrupt-after=30",
                      "--reference-fault", "log-engine-dead-after=10s", timeout_s=240)
    summary = _summary(result)
    findings = _findings(summary)
    assert summary["verdict"] == "FAIL"  # the canary's answers are the server's, however late the client
    canary = findings["canary"]
    assert canary["verdict"] == "FAIL" and "differ from the reference" in canary["evidence"], canary
    assert canary["details"]["first_mismatch"]["expected"] != canary["details"]["first_mismatch"]["got"]
    log_errors = findings["server.log_errors"]
    assert log_errors["verdict"] == "FAIL" and "engine_dead" in log_errors["evidence"], log_errors
    assert log_errors["details"]["path"].endswith("server.log")
    _assert_no_canary_sent_inside_a_probe(tmp_path)


def _assert_no_canary_sent_inside_a_probe(out) -> None:
    events = _events(out, ("probe_start", "probe_end", "canary", "canary_mismatch"))
    probes = list(zip([t for t, k, _ in events if k == "probe_start"], [t for t, k, _ in events if k == "probe_end"],
                      strict=False))
    assert probes, "the run had no idle probe"
    sends = [t - data["elapsed_s"] for t, kind, data in events if kind.startswith("canary")]
    assert len(sends) >= 5
    assert not [s for s in sends for start, end in probes if start < s < end], (sends, probes)


@pytest.fixture
def external_refserver(tmp_path):
    """A reference server soak does not start, its stderr (its log) in a file that already holds an old error."""
    log_path = tmp_path / "external.log"
    log_path.write_text("Traceback (most recent call last):\nRuntimeError: CUDA error: from before the run\n")
    with open(log_path, "a") as log_file:
        process = subprocess.Popen([sys.executable, "-m", "soak.refserver", "--port", "0"], stdout=subprocess.PIPE,
                                   stderr=log_file, text=True)
    try:
        match = READY.match(process.stdout.readline().strip())
        assert match, "the reference server did not start"
        yield match.group(1), log_path
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_an_unchanged_answer_and_a_clean_log_pass_and_canaries_are_no_load(tmp_path, soak_cli, external_refserver):
    url, log_path = external_refserver
    result = soak_cli(*SHORT_RUN, "--target", url, "--server-log", str(log_path), "--rate", "0.05",
                      "--canary-every", "2s", "--no-idle-probes", "--out", str(tmp_path / "runs"), timeout_s=240)
    findings = _findings(_summary(result))
    assert findings["canary"]["verdict"] == "PASS", findings["canary"]
    # The log's old lines were written before the run: followed from the run's start, the log is clean.
    assert findings["server.log_errors"]["verdict"] == "PASS", findings["server.log_errors"]
    canaries = _events(tmp_path / "runs", ("canary",))
    assert len(canaries) >= 10
    assert json.loads(result.stdout)["totals"]["requests"] < len(canaries) / 2  # canaries are not offered load


def test_an_external_server_without_a_log_skips_the_check(tmp_path, soak_cli, external_refserver):
    url, _ = external_refserver
    result = soak_cli(*SHORT_RUN[:2], "20s", *SHORT_RUN[3:], "--target", url, "--rate", "1", "--canary-every", "0",
                      "--no-idle-probes", "--out", str(tmp_path / "runs"), timeout_s=240)
    findings = _findings(_summary(result))
    assert findings["server.log_errors"]["verdict"] == "SKIPPED"
    assert "--server-log FILE" in findings["server.log_errors"]["evidence"]
    assert findings["canary"]["verdict"] == "SKIPPED"
