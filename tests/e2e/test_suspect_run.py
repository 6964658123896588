"""A run whose only required check is SUSPECT is a SUSPECT run, everywhere a verdict is read: exit code 3, summary.json
with the check's sentence and what next, the report's banner, JUnit, `soak runs`, `soak history` and the webhook.

The gates file makes the SUSPECT certain: `client.saturation` is the one required check, and its suspect limit is a
microsecond of schedule or event-loop lag, which no client keeps under while it sends on a schedule. The receiver
is a real HTTP server on 127.0.0.1 (port 0) in a thread of the test."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import pytest
from test_notify_every_run import webhook  # noqa: F401 - the fixture, shared

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

GATES = """required = ["client.saturation"]
[client]
lag_p99_suspect_ms = 0.001
"""
RUN = ["start", "--duration", "30s", "--warmup", "5s", "--window", "2s", "--sample-every", "1s", "--rate", "2",
       "--no-idle-probes", "--canary-every", "0", "--notify-env", "SOAK_TEST_HOOK", "--json"]


def test_a_required_suspect_is_a_suspect_run_everywhere(tmp_path, soak_cli, webhook):  # noqa: F811
    url, receiver = webhook
    gates = tmp_path / "gates.toml"
    gates.write_text(GATES, encoding="utf-8")
    out = tmp_path / "out"
    result = soak_cli(*RUN, "--gates", str(gates), "--out", str(out), env={"SOAK_TEST_HOOK": url}, timeout_s=240)
    summary = json.loads(result.stdout)
    failed = [f["check"] for f in summary["findings"] if f["verdict"] == "FAIL"]
    if failed:  # any FAIL fails the run whatever `required` says; this run is about SUSPECT
        pytest.skip(f"the reference server FAILed {failed} on this machine; nothing here judges SUSPECT")
    client = next(f for f in summary["findings"] if f["check"] == "client.saturation")
    assert client["verdict"] == "SUSPECT", client
    assert result.returncode == 3, result.stderr[-3000:]
    assert summary["verdict"] == "SUSPECT"
    assert summary["verdict_reason"] == f"client.saturation SUSPECT: {client['evidence']} — next: {client['next_step']}"
    run_id = summary["run_id"]

    report = (out / run_id / "report.html").read_text(encoding="utf-8")
    banner = report[report.index('<header class="banner'):report.index("</header>")]
    assert 'class="banner v-suspect"' in banner and '<div class="verdict-word">SUSPECT</div>' in banner

    rebuilt = soak_cli("report", run_id, "--out", str(out), "--gates", str(gates), "--junit", str(tmp_path / "j.xml"))
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    run_case = next(ElementTree.parse(tmp_path / "j.xml").getroot().iter("testcase"))
    assert run_case.get("name") == "verdict" and run_case.find("failure").get("message").startswith("SUSPECT: ")

    listed = soak_cli("runs", "--out", str(out), "--json")
    assert {r["id"]: r["verdict"] for r in json.loads(listed.stdout)}[run_id] == "SUSPECT"
    history = soak_cli("history", "--out", str(out), "--json")
    assert [row["verdict"] for row in json.loads(history.stdout)] == ["SUSPECT"]

    [posted] = receiver.wait_for(1)
    assert posted["verdict"] == "SUSPECT" and posted["text"].startswith(f"soak SUSPECT — run {run_id}")
