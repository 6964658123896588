"""Engine behaviour seen from outside: aborts on disconnect, preemption, prefix caching."""

import concurrent.futures

import httpx
import pytest
from refserver_helpers import wait_until

pytestmark = pytest.mark.timeout(120)

LONG_STREAM = {"model": "soak-reference", "messages": [{"role": "user", "content": "go on"}],
               "max_tokens": 1500, "ignore_eos": True, "stream": True}


def _disconnect_mid_stream(server, chunks_to_read: int = 3) -> None:
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", server.url + "/v1/chat/completions", json=LONG_STREAM) as response:
            events = (line for line in response.iter_lines() if line)
            for _ in range(chunks_to_read):
                assert next(events).startswith("data: ")
    # leaving both blocks closes the connection with the stream unread


def _aborted(server) -> float:
    return server.metric("vllm:request_success_total", finished_reason="abort")


def test_stream_disconnect_aborts_and_frees_blocks(shared_refserver):
    server = shared_refserver
    tokens_before = server.metric("vllm:generation_tokens_total")
    aborts_before = _aborted(server)
    _disconnect_mid_stream(server)
    wait_until(lambda: _aborted(server) == aborts_before + 1, 10, what="the abort to be counted")
    assert server.metric("vllm:num_requests_running") == 0
    assert server.metric("vllm:kv_cache_usage_perc") == 0.0
    assert server.metric("vllm:generation_tokens_total") - tokens_before < 1500


def test_non_streaming_disconnect_aborts(shared_refserver):
    server = shared_refserver
    aborts_before = _aborted(server)
    body = {**LONG_STREAM, "stream": False}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/chat/completions", json=body, timeout=0.3)
    wait_until(lambda: _aborted(server) == aborts_before + 1, 10, what="the abort to be counted")
    assert server.metric("vllm:kv_cache_usage_perc") == 0.0


def test_kv_leak_on_abort_keeps_blocks(start_refserver):
    server = start_refserver("--fault", "kv-leak-on-abort")
    _disconnect_mid_stream(server)
    wait_until(lambda: _aborted(server) == 1, 10, what="the abort to be counted")
    leaked = server.metric("vllm:kv_cache_usage_perc")
    assert leaked > 0
    assert server.chat(max_tokens=20).status_code == 200  # a clean request frees its own blocks...
    assert server.metric("vllm:num_requests_running") == 0
    assert server.metric("vllm:kv_cache_usage_perc") == leaked  # ...but the aborted one's stay held


def test_small_pool_preempts_and_still_finishes(start_refserver):
    server = start_refserver("--num-blocks", "16", "--block-size", "16", "--max-model-len", "256")
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(
            lambda i: server.stream_chat(f"r{i}", max_tokens=200, ignore_eos=True,
                                         stream_options={"include_usage": True}), range(6)))
    assert all(r.done and r.chunks[-1]["usage"]["completion_tokens"] == 200 for r in results)
    assert server.metric("vllm:num_preemptions_total") > 0
    assert server.metric("vllm:kv_cache_usage_perc") == 0.0


def test_prefix_cache_hits_on_repeated_prompt(start_refserver):
    server = start_refserver("--enable-prefix-caching")
    prompt = "a long shared system prompt " * 8  # 224 characters → 14 full blocks with the template
    prompt_tokens = server.chat(prompt, max_tokens=4).json()["usage"]["prompt_tokens"]
    assert server.metric("vllm:prefix_cache_queries_total") == prompt_tokens
    assert server.metric("vllm:prefix_cache_hits_total") == 0
    server.chat(prompt, max_tokens=4)
    assert server.metric("vllm:prefix_cache_queries_total") == 2 * prompt_tokens
    assert server.metric("vllm:prefix_cache_hits_total") == (prompt_tokens - 1) // 16 * 16
    assert server.metric("vllm:kv_cache_usage_perc") == 0.0  # cached blocks are free, not used
