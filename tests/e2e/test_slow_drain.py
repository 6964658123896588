"""A request still streaming when an idle probe's drain times out is slow, not hung: `soak start` against the
reference server with long answers and a drain timeout shorter than they take must not FAIL `hang`."""

from __future__ import annotations

import json
import sqlite3

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

# Every answer is 1500 tokens, about 2 s on the reference server: each probe finds requests in flight.
LONG_ANSWERS = '''
from soak.load import OpenAIUser, task


class LongAnswers(OpenAIUser):
    @task
    def ask(self):
        self.client.chat([{"role": "user", "content": "Tell me everything."}], max_tokens=1500, ignore_eos=True)
'''


def test_a_drain_timeout_while_answers_stream_is_not_a_hang(tmp_path, soak_cli):
    scenario = tmp_path / "long_answers.py"
    scenario.write_text(LONG_ANSWERS)
    out = tmp_path / "runs"
    result = soak_cli("start", "--duration", "30s", "--warmup", "6s", "--window", "4s", "--sample-every", "1s",
                      "--rate", "2", "--scenario", str(scenario), "--idle-probe-every", "8s", "--idle-probe-for", "1s",
                      "--drain-timeout", "500ms", "--canary-every", "0", "--json", "--out", str(out), timeout_s=240)
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    hang = {f["check"]: f for f in json.loads(result.stdout)["findings"]}["hang"]
    db = sqlite3.connect(out / "soak.db")
    timeouts = db.execute("select count(*) from events where kind = 'probe_drain_timeout'").fetchone()[0]
    streaming = db.execute("select count(*) from events where kind = 'probe_drain_streaming'").fetchone()[0]
    db.close()
    assert timeouts >= 1 and streaming == timeouts  # every timed-out drain saw chunks arrive
    assert hang["verdict"] == "PASS", hang
    assert "timed out while tokens kept flowing" in hang["evidence"]
