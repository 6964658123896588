"""Trace replay (`--trace`): reading the three formats, detection, bad inputs, the planned arrivals, prefix blocks."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from soak.config import LoadSettings, resolve_config
from soak.errors import ConfigError
from soak.load.scenarios import effective_specs, load_scenarios
from soak.load.trace import (
    TraceRow,
    TraceSchedule,
    block_text,
    length_histogram,
    load_trace,
    plan_trace_arrivals,
    planned_windows,
    trace_prompt,
)

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def written(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_mooncake_rows_keep_times_tokens_and_hash_ids():
    trace = load_trace(TRACES / "mooncake.jsonl")
    assert trace.format == "mooncake" and len(trace) == 8 and trace.sorted_from_line is None
    first, second = trace.row(0), trace.row(1)
    assert (first.t_s, first.input_tokens, first.output_tokens, first.hash_ids) == (0.0, 1100, 8, (0, 1, 2))
    assert (second.t_s, second.input_tokens, second.output_tokens, second.hash_ids) == (0.4, 700, 4, (0, 1))
    assert trace.span_s == 3.5
    assert trace.period_s == pytest.approx(4.0)  # the span plus one mean gap (3.5 / 7)
    assert trace.mean_rate_rps == pytest.approx(2.0)


def test_azure_times_are_dates_read_to_the_microsecond():
    trace = load_trace(TRACES / "azure.csv")
    assert trace.format == "azure" and len(trace) == 6
    assert trace.input_tokens.tolist() == [374, 396, 879, 91, 1528, 204]
    assert trace.output_tokens.tolist() == [44, 109, 12, 7, 240, 31]
    assert trace.row(1).t_s == pytest.approx(50.995169 - 46.68059, abs=1e-5)
    assert trace.span_s == pytest.approx(56.25 - 46.68059, abs=1e-5)
    assert trace.hash_ids is None and trace.row(0).hash_ids == () and trace.row(0).line == 2


def test_burstgpt_reads_its_token_columns_and_seconds():
    trace = load_trace(TRACES / "burstgpt.csv")
    assert trace.format == "burstgpt"
    assert [(r.t_s, r.input_tokens, r.output_tokens) for r in map(trace.row, range(len(trace)))] == [
        (0.0, 472, 18), (40.0, 1087, 0), (113.0, 417, 276), (125.0, 165, 97), (126.0, 60, 8)]


def test_the_format_is_detected_or_named(tmp_path):
    # A BurstGPT file named as Azure lacks Azure's columns: said on line 1.
    with pytest.raises(ConfigError, match=r"burstgpt.csv line 1: the header has no 'TIMESTAMP' column"):
        load_trace(TRACES / "burstgpt.csv", "azure")
    assert load_trace(TRACES / "azure.csv", "azure").format == "azure"
    odd = written(tmp_path, "odd.csv", "time,prompt,answer\n1,2,3\n")
    with pytest.raises(ConfigError, match=r"odd.csv line 1: not a known trace format"):
        load_trace(odd)


@pytest.mark.parametrize("name, text, error", [
    ("gone.jsonl", None, r"gone.jsonl cannot be read"),
    ("empty.jsonl", "\n\n", r"empty.jsonl line 1: the file is empty"),
    ("header.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", r"header.csv line 2: the trace holds no requests"),
    ("short.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 9, "input_length": 5}\n',
     r"short.jsonl line 2: no 'output_length'"),
    ("short.csv", "Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,4,2\n2,ChatGPT,4\n",
     r"short.csv line 3: no 'Response tokens' value"),
    ("words.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nsoon,4,2\n", r"words.csv line 2: TIMESTAMP 'soon' is not a time"),
    ("minus.jsonl", '{"timestamp": 0, "input_length": -5, "output_length": 1}\n',
     r"minus.jsonl line 1: input_length -5 is not a token count"),
    ("hashes.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "abc"}\n',
     r"hashes.jsonl line 1: hash_ids is not a list of integers"),
    ("broken.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1,\n',
     r"broken.jsonl line 2: not a JSON object"),
])
def test_bad_traces_are_one_line_config_errors_naming_file_and_line(tmp_path, name, text, error):
    path = tmp_path / name if text is None else written(tmp_path, name, text)
    with pytest.raises(ConfigError, match=error) as raised:
        load_trace(path)
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)


def test_an_unknown_format_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown trace format 'sharegpt' \(known: mooncake, azure, burstgpt\)"):
        load_trace(TRACES / "azure.csv", "sharegpt")
    with pytest.raises(ConfigError, match="trace-format"):
        resolve_config({"duration": "1h", "trace": str(TRACES / "azure.csv"), "trace_format": "sharegpt"}, environ={})


def test_timestamps_out_of_order_are_sorted_and_the_first_such_line_named(tmp_path, caplog):
    path = written(tmp_path, "shuffled.csv", "Timestamp,Request tokens,Response tokens\n"
                   "10,1,1\n30,3,3\n20,2,2\n20,4,4\n")
    trace = load_trace(path)
    assert trace.input_tokens.tolist() == [1, 2, 4, 3]  # equal times keep the file's order
    assert trace.times_s.tolist() == [0.0, 10.0, 10.0, 20.0] and trace.lines.tolist() == [2, 4, 5, 3]
    assert trace.sorted_from_line == 4
    assert "shuffled.csv line 4: timestamps go backwards" in caplog.text


def test_arrivals_follow_the_trace_scaled_by_speed_and_loop_to_the_end():
    trace = load_trace(TRACES / "mooncake.jsonl")  # offsets 0 … 3.5 s, period 4 s
    schedule = TraceSchedule(trace, begin_t=1000.0, end_t=1010.0, speed=2.0)
    planned = plan_trace_arrivals(schedule)
    assert schedule.loops == pytest.approx(5.0)  # 10 s at twice the speed of a 4 s loop
    assert len(planned) == 40
    offsets = trace.times_s.tolist()
    for k, (intended_t, row) in enumerate(planned):
        loop, index = divmod(k, 8)
        assert row == trace.row(index)
        assert intended_t == pytest.approx(1000.0 + (loop * 4.0 + offsets[index]) / 2.0)
    assert all(b >= a for (a, _), (b, _) in zip(planned, planned[1:]))
    # The run's end cuts the last loop short: at speed 1 the third loop starts at 8 s, and its fourth row (9.5 s)
    # falls on the end.
    cut = plan_trace_arrivals(TraceSchedule(trace, 0.0, 9.5, 1.0))
    assert [row.line for _, row in cut[16:]] == [1, 2, 3]
    assert cut[-1][0] == pytest.approx(8.9)


def _blocks(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def test_rows_sharing_the_first_k_hash_ids_share_exactly_the_first_k_blocks():
    size = 512
    a = TraceRow(0.0, 5 * size, 1, (7, 8, 9, 10, 11))
    b = TraceRow(0.0, 5 * size, 1, (7, 8, 9, 12, 13))
    prompt_a = trace_prompt(a, 5 * size, size, seed=3, rng=random.Random(1))
    prompt_b = trace_prompt(b, 5 * size, size, seed=3, rng=random.Random(2))
    assert len(prompt_a.encode()) == len(prompt_b.encode()) == 5 * size
    blocks_a, blocks_b = _blocks(prompt_a, size), _blocks(prompt_b, size)
    assert blocks_a[:3] == blocks_b[:3]
    assert all(x != y for x, y in zip(blocks_a[3:], blocks_b[3:]))
    assert blocks_a[0] == block_text(3, 7, size) != block_text(4, 7, size)  # the seed changes every block


def test_a_prompt_is_as_long_as_asked_past_and_short_of_its_blocks():
    row = TraceRow(0.0, 0, 1, (1, 2))
    longer = trace_prompt(row, 1300, 512, seed=0, rng=random.Random(0))
    assert len(longer) == 1300 and longer.startswith(block_text(0, 1, 512) + block_text(0, 2, 512))
    shorter = trace_prompt(row, 700, 512, seed=0, rng=random.Random(0))
    assert shorter == (block_text(0, 1, 512) + block_text(0, 2, 512))[:700]
    plain = trace_prompt(TraceRow(0.0, 0, 1), 300, 512, seed=0, rng=random.Random(0))
    assert len(plain) == 300


def test_the_trace_is_the_mix_and_shapes_cannot_be_combined_with_it():
    load = LoadSettings(trace=TRACES / "mooncake.jsonl")
    [spec] = effective_specs(load)
    assert spec.name == "trace" and load_scenarios([spec])[0].user_classes
    for clash, flag in ((dict(phases=["steady rate_rps=3"]), "--phase"), (dict(burstiness=2.0), "--burstiness"),
                        (dict(dataset=TRACES / "azure.csv"), "--dataset"), (dict(scenarios=["chat_short"]), "--scenario"),
                        (dict(rate_rps=3.0), "--rate")):
        with pytest.raises(ValueError, match=f"cannot be combined with {flag}"):
            LoadSettings(trace=TRACES / "mooncake.jsonl", **clash)


def test_the_trace_settings_resolve_into_the_config():
    config = resolve_config({"duration": "1h", "trace": str(TRACES / "azure.csv"), "trace_format": "azure",
                             "trace_speed": "2.5"}, environ={})
    assert config.load.trace == TRACES / "azure.csv"
    assert (config.load.trace_format, config.load.trace_speed) == ("azure", 2.5)


def test_planned_windows_count_in_closed_form_what_the_clock_sends():
    trace = load_trace(TRACES / "mooncake.jsonl")
    schedule = TraceSchedule(trace, begin_t=100.3, end_t=160.0, speed=1.5)
    windows = planned_windows(schedule, t0=100.0, warmup_s=2.0, window_s=7.0)
    sent = plan_trace_arrivals(schedule)
    assert [w["index"] for w in windows] == list(range(-1, 9))  # 58 s after the warm-up: 9 windows, the last cut
    for window in windows:
        start = 100.0 if window["index"] < 0 else 102.0 + 7.0 * window["index"]
        end = 102.0 if window["index"] < 0 else start + 7.0
        rows = [row for t, row in sent if start <= t < end]
        assert window["requests"] == len(rows)
        assert window["prompt_tokens"] == sum(row.input_tokens for row in rows)
        assert window["output_tokens"] == sum(row.output_tokens for row in rows)


def test_length_histograms_double_their_bins_and_the_report_labels_them():
    from soak.report.reading import RequestWindow
    from soak.report.sections import histogram_cells, trace_windows

    histogram = length_histogram(load_trace(TRACES / "azure.csv").input_tokens)  # 374 396 879 91 1528 204
    assert histogram == {"upper": [16, 32, 64, 128, 256, 512, 1024, 2048], "rows": [0, 0, 0, 1, 1, 2, 1, 1]}
    assert histogram_cells(histogram)[:2] == [("≤ 16", 0), ("17–32", 0)] and histogram_cells(histogram)[-1] == (
        "1,025–2,048", 1)
    planned = [{"index": -1, "requests": 2, "prompt_tokens": 300, "output_tokens": 20},
               {"index": 0, "requests": 4, "prompt_tokens": 800, "output_tokens": 40}]
    sent = [RequestWindow(window_index=0, scenario="*", start_s=0.0, end_s=7.0, requests=3, ok=2, prompt_tokens=410,
                          output_tokens=18)]
    assert trace_windows(planned, sent) == [
        {"window": "warm-up", "planned": 2, "sent": 0, "planned_prompt": 150.0, "sent_prompt": None,
         "planned_output": 10.0, "sent_output": None},
        {"window": 0, "planned": 4, "sent": 3, "planned_prompt": 200.0, "sent_prompt": 205.0,
         "planned_output": 10.0, "sent_output": 9.0}]


def test_a_bad_trace_stops_soak_start_before_any_server_folder_or_database(tmp_path, soak_cli):
    bad = written(tmp_path, "bad.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n')
    result = soak_cli("start", "--trace", str(bad), "--minutes", "1", "--out", str(tmp_path / "out"), timeout_s=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"soak: error: trace {bad} line 2: no 'input_length' (a Mooncake " \
        "row has timestamp, input_length, output_length, hash_ids)"
    assert not (tmp_path / "out").exists()


def test_over_load_workers_the_master_deals_each_rows_time_and_index_round_robin():
    from soak.load.dispatcher import PlanBoard
    from soak.load.distributed import Dealer, deals_times

    assert deals_times(resolve_config({"duration": "1h", "trace": str(TRACES / "mooncake.jsonl"), "workers": 2},
                                      environ={}))
    assert not deals_times(resolve_config({"duration": "1h", "trace": str(TRACES / "mooncake.jsonl")}, environ={}))
    trace = load_trace(TRACES / "mooncake.jsonl")  # offsets 0, 0.4, 0.9, 1.5, 2.1 … s
    now = time.time()
    schedule = TraceSchedule(trace, now - 0.5, now + 60.0, 1.0)
    sent: list[tuple[str, dict]] = []
    runner = SimpleNamespace(send_message=lambda kind, message, client_id: sent.append((client_id, message)))
    members = [SimpleNamespace(node_id="a"), SimpleNamespace(node_id="b")]
    dealer = Dealer(SimpleNamespace(segments=lambda a, b: []), 0, None, lambda: members, schedule)
    dealer.deal(runner)  # the look-ahead is 1.5 s: the rows due within 2 s of the trace's start
    assert [(client, message["rows"]) for client, message in sent] == [("a", [0, 2]), ("b", [1, 3])]
    assert sent[0][1]["times"] == pytest.approx([schedule.arrival(k)[0] for k in (0, 2)])
    board = PlanBoard()
    board.dealt.resolve = trace.row
    board.update(sent[1][1])
    assert board.dealt.peek() == pytest.approx(now - 0.5 + 0.4)
    board.dealt.take()
    assert board.dealt.row == trace.row(1)
    board.dealt.take()
    assert board.dealt.row == trace.row(3) and board.dealt.peek() == math.inf
