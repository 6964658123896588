"""Each built-in scenario sends requests of its kind, and the mix runs under a real Locust runner."""

from __future__ import annotations

import json

import pytest
from loadtools import make_config, run_load, run_tasks, wait_for

from soak.load.scenarios import TRACE_SCENARIO, builtin_names

MAX_MODEL_LEN = 4096  # the mock's


def fast(mock_server, **params):
    params = {"ttft_ms": 5, "itl_ms": 1, **params}
    return mock_server.model(**params)


@pytest.mark.timeout(30)
def test_chat_short_streams_short_chats(mock_server):
    records = run_tasks(mock_server.url, "chat_short", fast(mock_server), per_task=5)
    assert len(records) == 5
    assert all(r.kind == "chat" and r.error_class is None and r.ttft_ms is not None for r in records)
    assert all(16 <= r.output_tokens <= 64 and r.prompt_tokens < 200 for r in records)


@pytest.mark.timeout(30)
def test_mixed_sends_chats_and_completions(mock_server):
    records = run_tasks(mock_server.url, "mixed", fast(mock_server), per_task=3, max_model_len=MAX_MODEL_LEN)
    assert {r.kind for r in records} == {"chat", "completion"}
    assert all(r.error_class is None for r in records)


@pytest.mark.timeout(30)
def test_long_tail_lengths_vary_and_always_fit_the_context(mock_server):
    records = run_tasks(mock_server.url, "long_tail", fast(mock_server), per_task=8, max_model_len=MAX_MODEL_LEN)
    assert all(r.error_class is None for r in records)  # the mock refuses anything beyond max_model_len
    prompts = [r.prompt_tokens for r in records]
    assert max(prompts) > 3 * min(prompts)


@pytest.mark.timeout(30)
def test_long_context_prompts_fill_most_of_the_context(mock_server):
    records = run_tasks(mock_server.url, "long_context", fast(mock_server), per_task=4, max_model_len=MAX_MODEL_LEN)
    assert all(r.error_class is None and r.prompt_tokens > 0.75 * MAX_MODEL_LEN for r in records)


@pytest.mark.timeout(30)
def test_prefix_multiturn_resends_a_growing_history_behind_one_system_prompt(mock_server):
    model = fast(mock_server, tokens=8)
    records = run_tasks(mock_server.url, "prefix_multiturn", model, per_task=40, max_model_len=MAX_MODEL_LEN)
    assert all(r.error_class is None for r in records)
    bodies = mock_server.stats(model)["bodies"]
    assert len({b["messages"][0]["content"] for b in bodies}) == 1  # 40 turns, 16 conversations: one prefix
    assert max(len(b["messages"]) for b in bodies) >= 4  # some conversation came back with its history


@pytest.mark.timeout(30)
def test_cancel_disconnects_mid_stream_and_records_cancelled(mock_server):
    model = fast(mock_server, itl_ms=2, tokens=400)  # the server is still sending when the client walks away
    records = run_tasks(mock_server.url, "cancel", model, per_task=5)
    assert all(r.error_class == "cancelled" and not r.is_error for r in records)
    assert all(r.ttft_ms is not None and r.error_message.startswith("client cancelled") for r in records)
    assert wait_for(lambda: mock_server.stats(model)["disconnects"] == 5, 5.0), mock_server.stats(model)


@pytest.mark.timeout(30)
def test_bad_input_gets_expected_4xx_that_count_as_success(mock_server):
    records = run_tasks(mock_server.url, "bad_input", fast(mock_server), per_task=1, max_model_len=MAX_MODEL_LEN)
    assert len(records) == 5
    assert all(r.error_class == "http_4xx" and r.expected_error and not r.is_error for r in records)


@pytest.mark.timeout(30)
def test_bad_input_5xx_is_an_error(mock_server):
    records = run_tasks(mock_server.url, "bad_input", fast(mock_server, mode="reject500"), per_task=1,
                        max_model_len=MAX_MODEL_LEN)
    five_hundreds = [r for r in records if r.error_class == "http_5xx"]
    assert five_hundreds and all(r.is_error and not r.expected_error for r in five_hundreds)


@pytest.mark.timeout(30)
def test_unicode_sends_emoji_rtl_and_control_characters(mock_server):
    model = fast(mock_server)
    records = run_tasks(mock_server.url, "unicode", model, per_task=4)
    assert {r.kind for r in records} == {"chat", "completion"} and all(r.error_class is None for r in records)
    sent = json.dumps(mock_server.stats(model)["bodies"], ensure_ascii=False)
    assert any(ch in sent for ch in "😀🚀🧪🤖🫠") and any(ch in sent for ch in "שמر") and "\u0301" in sent


@pytest.mark.timeout(30)
def test_non_streaming_has_no_ttft_but_full_usage(mock_server):
    records = run_tasks(mock_server.url, "non_streaming", fast(mock_server), per_task=3)
    assert {r.kind for r in records} == {"chat", "completion"}
    assert all(r.error_class is None and r.ttft_ms is None and r.itl_ms == () and r.output_tokens > 0
               for r in records)


@pytest.mark.timeout(30)
def test_dataset_replays_sharegpt_json_and_jsonl(mock_server, tmp_path):
    conversations = [{"conversations": [{"from": "human", "value": f"question {i}?"},
                                        {"from": "gpt", "value": "x" * 400}]} for i in range(3)]
    for path, text in ((tmp_path / "d.json", json.dumps(conversations)),
                       (tmp_path / "d.jsonl", "\n".join(json.dumps(c) for c in conversations))):
        path.write_text(text)
        model = fast(mock_server)
        records = run_tasks(mock_server.url, "dataset", model, per_task=4, dataset_path=path)
        assert all(r.error_class is None and r.output_tokens == 100 for r in records)  # 400 chars ≈ 100 tokens
        prompts = {b["messages"][0]["content"] for b in mock_server.stats(model)["bodies"]}
        assert prompts <= {f"question {i}?" for i in range(3)}


@pytest.mark.timeout(30)
def test_multimodal_sends_png_and_jpeg_pictures_some_repeated(mock_server):
    model = fast(mock_server)
    records = run_tasks(mock_server.url, "multimodal", model, per_task=12)
    assert len(records) == 48 and all(r.kind == "chat" and r.error_class is None for r in records)
    urls = [part["image_url"]["url"] for body in mock_server.stats(model)["bodies"]
            for part in body["messages"][0]["content"] if part["type"] == "image_url"]
    assert len(urls) == 48 + 12  # two_images sends two
    assert {url.partition(";")[0] for url in urls} == {"data:image/png", "data:image/jpeg"}
    assert len(set(urls)) < len(urls)  # a share drawn from the popular pictures


@pytest.mark.timeout(30)
def test_a_users_own_scenario_file_runs_by_path(mock_server, tmp_path):
    path = tmp_path / "my_scenario.py"
    path.write_text(
        "from soak.load import OpenAIUser, task\n\n\n"
        "class Mine(OpenAIUser):\n"
        "    @task\n"
        "    def hello(self):\n"
        "        self.client.completion('Hello', max_tokens=4)\n")
    records = run_tasks(mock_server.url, str(path), fast(mock_server), per_task=2)
    assert [r.kind for r in records] == ["completion", "completion"]
    assert all(r.scenario == str(path) and r.error_class is None for r in records)


@pytest.mark.timeout(60)
def test_the_whole_mix_runs_under_locust_with_every_scenario_represented(mock_server, tmp_path):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    # the trace scenario needs --trace; lora needs --lora adapters a server loaded (tests/e2e/test_lora_churn.py)
    names = [n for n in builtin_names() if n not in (TRACE_SCENARIO, "lora")]
    config = make_config(duration_s=3, rate_rps=40, seed=21, scenarios=[f"{n}:1" for n in names], dataset=dataset)
    model = fast(mock_server, tokens=4)
    run = run_load(config, mock_server.url, model)
    assert {r.scenario for r in run.records} == set(names)
    # The mock server answers plain text whatever is asked: the answers of the scenarios that validate structure are
    # invalid_output (they are proven on the reference server, tests/e2e/test_structured_output.py); nothing else errs.
    errors = {(r.scenario, r.error_class) for r in run.records if r.is_error}
    assert errors <= {("structured", "invalid_output"), ("tools", "invalid_output")}
    # Every valid request sent reached the server (the mock does not count invalid ones), but for those still on
    # their way when the load stopped (in flight when the counters were read; stopping cancels them).
    valid_sends = run.counters.sends - sum(1 for r in run.records if r.scenario == "bad_input")
    received = mock_server.stats(model)["requests"]
    assert valid_sends - run.counters.in_flight <= received <= valid_sends
