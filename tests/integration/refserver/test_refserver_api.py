"""The OpenAI-compatible surface of the reference server, over real HTTP."""

import concurrent.futures
import json
import re

import pytest

pytestmark = pytest.mark.timeout(120)

VLLM_METRICS = {
    "gauge": ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"],
    "counter": ["vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"],
    "histogram": ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                  "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"],
}


def test_streaming_chat_with_usage(shared_refserver):
    result = shared_refserver.stream_chat("tell me a story", max_tokens=40, ignore_eos=True,
                                          stream_options={"include_usage": True})
    assert result.status == 200 and result.done
    first, *middle, usage_chunk = result.chunks
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["id"] == first["id"] and c["model"] == "soak-reference" for c in result.chunks)
    assert middle[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in middle[:-1])
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    prompt_tokens = len(b"<|user|>\ntell me a story\n<|assistant|>\n") + 1  # + BOS
    assert usage == {"prompt_tokens": prompt_tokens, "completion_tokens": 40, "total_tokens": prompt_tokens + 40}
    content_times = result.content_times()
    assert len(content_times) >= 30  # a few tokens may be partial UTF-8 characters, merged into the next
    ttft_s, e2e_s = content_times[0] - result.sent_s, result.arrival_s[-1] - result.sent_s
    assert 0 < ttft_s < e2e_s


def test_stream_without_usage_has_no_usage_chunk(shared_refserver):
    result = shared_refserver.stream_chat(max_tokens=5, ignore_eos=True)
    assert result.done and all(chunk["choices"] for chunk in result.chunks)
    assert all("usage" not in chunk for chunk in result.chunks)


def test_non_streaming_chat(shared_refserver):
    response = shared_refserver.chat("hi", max_tokens=12, ignore_eos=True)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 12
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 12


def test_completions_streaming_and_not(shared_refserver):
    plain = shared_refserver.post("/v1/completions", {"model": "soak-reference", "prompt": "abc", "ignore_eos": True})
    assert plain.status_code == 200
    body = plain.json()
    assert body["object"] == "text_completion"
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20}  # default max_tokens
    lines = []
    with shared_refserver.client() as client, client.stream(
            "POST", "/v1/completions", json={"prompt": [256, 97, 98], "max_tokens": 6, "stream": True,
                                             "ignore_eos": True, "stream_options": {"include_usage": True}}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 6 and chunks[-1]["usage"]["prompt_tokens"] == 3
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_seeded_requests_repeat(shared_refserver):
    texts = {shared_refserver.chat("same", max_tokens=20, seed=7, temperature=0.8).json()["choices"][0]["message"]
             ["content"] for _ in range(2)}
    assert len(texts) == 1


@pytest.mark.parametrize("body, param", [
    (b"{not json", None),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "10"}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x" * 3000}]}, "messages"),
])
def test_bad_requests_are_400_with_openai_body(shared_refserver, body, param):
    response = shared_refserver.post("/v1/chat/completions", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "BadRequestError" and error["code"] == 400 and error["message"]
    assert error["param"] == param


def test_unknown_model_is_404(shared_refserver):
    response = shared_refserver.post("/v1/completions", {"model": "gpt-9", "prompt": "x"})
    assert response.status_code == 404
    assert response.json() == {"error": {"message": "The model `gpt-9` does not exist.", "type": "NotFoundError",
                                         "param": "model", "code": 404}}


def test_models_health_version(shared_refserver):
    models = shared_refserver.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["soak-reference"]
    health = shared_refserver.get("/health")
    assert health.status_code == 200 and health.content == b""
    assert shared_refserver.get("/version").json()["faults"] == []


def test_metrics_have_vllm_names(shared_refserver):
    shared_refserver.chat(max_tokens=3)
    text = shared_refserver.get("/metrics").text
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    for kind, names in VLLM_METRICS.items():
        for name in names:
            assert types.get(name) == kind, name
            assert re.search(rf'^{re.escape(name)}(_bucket|_count|_sum)?{{.*model_name="soak-reference"', text,
                             re.MULTILINE), name
    for reason in ("stop", "length", "abort"):
        assert f'vllm:request_success_total{{finished_reason="{reason}",model_name="soak-reference"}}' in text
    assert "process_resident_memory_bytes" in text and "_created" not in text


def test_continuous_batching_serves_concurrent_streams(shared_refserver):
    before = shared_refserver.metric("vllm:generation_tokens_total")
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda i: shared_refserver.stream_chat(f"user {i}", max_tokens=60, ignore_eos=True,
                                                                       stream_options={"include_usage": True}),
                                 range(10)))
    assert all(r.done and r.chunks[-1]["usage"]["completion_tokens"] == 60 for r in results)
    assert shared_refserver.metric("vllm:generation_tokens_total") - before == 600
    # Interleaved, not one after another: every stream started before the first one finished.
    first_end = min(r.arrival_s[-1] for r in results)
    assert all(r.content_times()[0] < first_end for r in results)
    assert shared_refserver.metric("vllm:kv_cache_usage_perc") == 0.0


def test_sigterm_exits_zero(start_refserver):
    server = start_refserver("--served-model-name", "other-name")
    assert [m["id"] for m in server.get("/v1/models").json()["data"]] == ["other-name"]
    assert server.stop() == 0
