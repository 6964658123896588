"""`soak start --trace` for 10 s against the reference server: the requests sent follow the trace's rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from soak.load.trace import load_trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "mooncake.jsonl"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory, soak_cli):
    out = tmp_path_factory.mktemp("trace-run")
    result = soak_cli("start", "--trace", str(TRACE), "--duration", "10s", "--warmup", "2s", "--window", "5s",
                      "--sample-every", "1s", "--canary-every", "0", "--keep-requests", "--json", "--out", str(out),
                      timeout_s=120)
    assert result.returncode in (0, 1, 3), result.stderr[-3000:]
    db = sqlite3.connect(out / "soak.db")
    try:
        requests = db.execute("select intended_s, output_tokens, error_class from requests "
                              "order by intended_s").fetchall()
        prompt_tokens = db.execute("select sum(prompt_tokens) from request_windows where scenario = '*'").fetchone()[0]
        [event] = db.execute("select data_json from events where kind = 'trace'").fetchall()
    finally:
        db.close()
    return requests, prompt_tokens, json.loads(event[0]), json.loads(result.stdout)


def test_each_request_follows_its_rows_time_and_token_counts(replayed):
    requests, prompt_tokens, _, _ = replayed
    trace = load_trace(TRACE)
    rows = [trace.row(index) for index in range(len(trace))]
    assert len(requests) >= 12  # about 2.4 loops of 8 rows fit the 10 s, less the load's start-up
    assert all(error is None for _, _, error in requests)
    expected = [rows[k % len(rows)] for k in range(len(requests))]
    assert [tokens for _, tokens, _ in requests] == [row.output_tokens for row in expected]
    first_s = requests[0][0]
    for k, (intended_s, _, _) in enumerate(requests):  # the trace's offsets, looping every 4 s
        assert intended_s - first_s == pytest.approx(4.0 * (k // len(rows)) + expected[k].t_s, abs=1e-3)
    # Prompts are sized by the tokens per byte soak learns from the server's usage (here a token a byte, plus
    # one for the start of the text), so the server counts what the rows say to a token or two each.
    wanted = sum(row.input_tokens for row in expected)
    assert prompt_tokens == pytest.approx(wanted, rel=0.005)


def test_the_run_records_what_it_replayed_beside_what_it_sent(replayed):
    requests, _, event, summary = replayed
    assert (event["name"], event["format"], event["rows"], event["speed"]) == ("mooncake.jsonl", "mooncake", 8, 1.0)
    assert event["trace_rate_rps"] == pytest.approx(2.0) and 1.5 < event["loops"] <= 2.5  # 4 s loops in under 10 s
    trace = summary["trace"]
    assert (trace["name"], trace["rows"], trace["planned_rate_rps"]) == ("mooncake.jsonl", 8, pytest.approx(2.0))
    assert trace["sent_rate_rps"] == pytest.approx(len(requests) / summary["duration_s"])
    # The trace's pace, less the moments before the load starts and after the last loop's cut.
    assert 1.0 < trace["sent_rate_rps"] <= 2.0
    # The rows' means over whole loops, beside what the server counted over 2 and a bit loops.
    assert trace["trace_output_tokens"] == pytest.approx(70 / 8)
    assert trace["sent_output_tokens"] == pytest.approx(trace["trace_output_tokens"], rel=0.15)
    assert trace["sent_prompt_tokens"] == pytest.approx(trace["trace_prompt_tokens"], rel=0.15)
