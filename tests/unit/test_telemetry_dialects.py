"""Server dialects: a /metrics page in each server's own format is recognised and read into the same six numbers.

The pages below are written by hand in the format each server produces (names, HELP/TYPE lines and labels as
its source writes them); they are not captured output.
"""

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from soak.telemetry.dialects import (
    DIALECTS,
    READINGS,
    Dialect,
    KvScale,
    KvSeries,
    Selector,
    context_length_from,
    detect_dialect,
    detect_dialect_from_models,
    read_gauges,
    samples_of,
)

# vLLM 0.10, V1 engine, two data-parallel engines; the deprecated gpu_cache_usage_perc is still exposed.
VLLM_V1 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 5.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 2.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.25
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 4.0
vllm:num_preemptions_total{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 1.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 120000.0
vllm:prompt_tokens_total{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 80000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 30000.0
vllm:generation_tokens_total{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 20000.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="Qwen/Qwen2.5-7B-Instruct"} 40.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen2.5-7B-Instruct"} 50.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 50.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 3.2
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.1e+09
# HELP process_open_fds Number of open file descriptors.
# TYPE process_open_fds gauge
process_open_fds 87.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="Qwen/Qwen2.5-7B-Instruct"} 900.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 900.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 12.5
vllm:time_per_output_token_seconds_count{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 600.0
vllm:time_per_output_token_seconds_sum{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 7.5
"""

# vLLM 0.6 (V0 engine): only model_name; KV usage under its old name; CPU swap series.
VLLM_V0 = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.82
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 51234.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 9876.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 9800.0
vllm:time_per_output_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 9800.0
vllm:time_per_output_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 98.0
"""

# SGLang (recent): scheduler gauges carry the rank labels; the old retraction gauge is per process (pid).
SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0"} 24.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0"} 6.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0"} 0.61
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0"} 250000.0
# HELP sglang:num_retracted_reqs The number of retracted requests.
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{engine_type="unified",model_name="Qwen/Qwen3-8B",pid="4242",pp_rank="0",tp_rank="0"} 2.0
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0"} 17.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="Qwen/Qwen3-8B"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="Qwen/Qwen3-8B"} 7.557572e+06
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{engine_type="unified",model_name="Qwen/Qwen3-8B",pp_rank="0",tp_rank="0"} 0.0075
# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="Qwen/Qwen3-8B"} 7000000.0
sglang:inter_token_latency_seconds_sum{model_name="Qwen/Qwen3-8B"} 140000.0
sglang:inter_token_latency_seconds_count{model_name="Qwen/Qwen3-8B"} 7000000.0
"""

# Older SGLang: only the per-step retraction gauge, which is not a running total.
SGLANG_OLD = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:num_retracted_reqs The number of retracted requests.
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct",pid="77"} 1.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 1000.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 500.0
# HELP sglang:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 400.0
sglang:time_per_output_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
sglang:time_per_output_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 400.0
"""

# TGI 3.x (v3 backend), as metrics-exporter-prometheus writes it: no labels, counters without `_total`.
TGI = """\
# HELP tgi_request_count Total number of requests
# TYPE tgi_request_count counter
tgi_request_count 1200
# HELP tgi_request_success Number of successful requests
# TYPE tgi_request_success counter
tgi_request_success 1180
# HELP tgi_batch_current_size Current batch size
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 9
# HELP tgi_queue_size Current queue size
# TYPE tgi_queue_size gauge
tgi_queue_size 4
# HELP tgi_batch_current_max_tokens Maximum tokens for the current batch
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 40960
# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens 163840
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="81.91"} 300
tgi_request_input_length_bucket{le="+Inf"} 1200
tgi_request_input_length_sum 614400
tgi_request_input_length_count 1200
# HELP tgi_request_generated_tokens Generated tokens per request
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="81.92"} 100
tgi_request_generated_tokens_bucket{le="+Inf"} 1180
tgi_request_generated_tokens_sum 302080
tgi_request_generated_tokens_count 1180
# HELP tgi_request_duration Request duration
# TYPE tgi_request_duration summary
tgi_request_duration{quantile="0.5"} 2.1
tgi_request_duration{quantile="0.99"} 7.9
tgi_request_duration_sum 2750.2
tgi_request_duration_count 1180
# HELP tgi_request_mean_time_per_token_duration Mean time per token per request
# TYPE tgi_request_mean_time_per_token_duration summary
tgi_request_mean_time_per_token_duration{quantile="0.5"} 0.03
tgi_request_mean_time_per_token_duration_sum 35.4
tgi_request_mean_time_per_token_duration_count 1180
"""

# llama-server of 2025 and later: no KV-cache series.
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 29.03
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:tokens_predicted_seconds_total Predict process time
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 35.44
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 3512
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode counter
llamacpp:n_busy_slots_per_decode 1.42
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 237.2
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 97.9
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""

# An older llama-server build that still had the KV-cache series.
LLAMACPP_OLD = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 33065
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 7801
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.375
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 1536
# HELP llamacpp:requests_processing Number of request processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of request deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""

# Triton 25.x with the TensorRT-LLM backend v0.18+: Triton's own series next to the backend's labelled ones.
TRTLLM = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="tensorrt_llm",version="1"} 950
nv_inference_request_success{model="ensemble",version="1"} 950
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 0
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 3
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 16
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 64
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 19
# HELP nv_trt_llm_runtime_memory_metrics TRT LLM runtime memory metrics
# TYPE nv_trt_llm_runtime_memory_metrics gauge
nv_trt_llm_runtime_memory_metrics{memory_type="pinned",model="tensorrt_llm",version="1"} 0
nv_trt_llm_runtime_memory_metrics{memory_type="gpu",model="tensorrt_llm",version="1"} 1610236
nv_trt_llm_runtime_memory_metrics{memory_type="cpu",model="tensorrt_llm",version="1"} 0
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.4875
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 3042
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 3198
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 6240
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="reused",model="tensorrt_llm",version="1"} 120
# HELP nv_trt_llm_inflight_batcher_metrics TRT LLM inflight_batcher-specific metrics
# TYPE nv_trt_llm_inflight_batcher_metrics gauge
nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="paused_requests",model="tensorrt_llm",version="1"} 0
nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="generation_requests",model="tensorrt_llm",version="1"} 15
# HELP nv_llm_input_token_len TRT LLM response metrics
# TYPE nv_llm_input_token_len histogram
nv_llm_input_token_len_count{model="tensorrt_llm",response_metric_type="total_input_tokens",version="1"} 950
nv_llm_input_token_len_sum{model="tensorrt_llm",response_metric_type="total_input_tokens",version="1"} 486400
nv_llm_input_token_len_bucket{model="tensorrt_llm",response_metric_type="total_input_tokens",version="1",le="1000"} 900
nv_llm_input_token_len_bucket{model="tensorrt_llm",response_metric_type="total_input_tokens",version="1",le="+Inf"} 950
# HELP nv_llm_output_token_len TRT LLM response metrics
# TYPE nv_llm_output_token_len histogram
nv_llm_output_token_len_count{model="tensorrt_llm",response_metric_type="total_output_tokens",version="1"} 950
nv_llm_output_token_len_sum{model="tensorrt_llm",response_metric_type="total_output_tokens",version="1"} 243200
nv_llm_output_token_len_bucket{model="tensorrt_llm",response_metric_type="total_output_tokens",version="1",le="+Inf"} 950
"""

# An older backend (before v0.16): no `waiting`, no `fraction`, no token histograms.
TRTLLM_OLD = """\
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 8
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 11
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 1560
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 4680
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 6240
"""

CASES = {
    # page, dialect, running, waiting, kv, preemptions, prompt tokens, generation tokens, ITL sum (s), ITL count
    "vllm": (VLLM_V1, "vllm", 8.0, 2.0, 0.375, 5.0, 200000.0, 50000.0, 20.0, 1500.0),
    "vllm-v0": (VLLM_V0, "vllm-v0", 7.0, 1.0, 0.82, 12.0, 51234.0, 9876.0, 98.0, 9800.0),
    "sglang": (SGLANG, "sglang", 24.0, 6.0, 0.61, 17.0, 8128902.0, 7557572.0, 140000.0, 7000000.0),
    "sglang-old": (SGLANG_OLD, "sglang", 3.0, 0.0, 0.28, None, 1000.0, 500.0, 4.0, 400.0),
    "tgi": (TGI, "tgi", 9.0, 4.0, 0.25, None, 614400.0, 302080.0, 35.4, 1180.0),
    "llamacpp": (LLAMACPP, "llamacpp", 2.0, 1.0, None, None, 6886.0, 3469.0, 35.44, 3469.0),
    "llamacpp-old": (LLAMACPP_OLD, "llamacpp", 1.0, 0.0, 0.375, None, 33065.0, 7801.0, None, None),
    "trtllm": (TRTLLM, "trtllm", 16.0, 3.0, 0.4875, None, 486400.0, 243200.0, None, None),
    "trtllm-old": (TRTLLM_OLD, "trtllm", 8.0, 3.0, 0.25, None, None, None, None, None),
}


def family_names(text: str) -> list[str]:
    return [family.name for family in text_string_to_metric_families(text)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_server_page_is_recognised_and_read(case):
    text, expected_dialect, *expected = CASES[case]
    dialect = detect_dialect(family_names(text))
    assert dialect is not None and dialect.name == expected_dialect
    # Sample names (with `_total`, `_sum` …) identify the server just as well as family names.
    assert detect_dialect(name for name, _, _ in samples_of(text)) is dialect

    readings = read_gauges(dialect, samples_of(text))
    assert list(readings) == list(READINGS)
    for key, want in zip(READINGS, expected, strict=True):
        got = readings[key]
        if want is None:
            assert got is None, key
        else:
            assert got == pytest.approx(want), key


def test_a_vllm_page_with_both_token_latency_names_is_read_by_the_new_one():
    both = VLLM_V1 + """\
vllm:inter_token_latency_seconds_count{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 1000.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 30.0
"""
    readings = read_gauges(DIALECTS["vllm"], samples_of(both))
    assert (readings["token_latency_sum_s"], readings["token_latency_count"]) == (30.0, 1000.0)


def test_prometheus_client_sample_objects_are_read_as_they_come():
    samples = [s for family in text_string_to_metric_families(TRTLLM) for s in family.samples]
    assert read_gauges(DIALECTS["trtllm"], samples)["running"] == 16.0


def test_vllm_v1_is_told_from_v0_by_the_kv_name():
    assert detect_dialect(["vllm:num_requests_running", "vllm:kv_cache_usage_perc"]).name == "vllm"
    assert detect_dialect(["vllm:num_requests_running", "vllm:gpu_cache_usage_perc"]).name == "vllm-v0"
    # 0.9/0.10 expose both names; the new one decides.
    assert detect_dialect(["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"]).name == "vllm"
    # Neither name (e.g. a page filtered down): the current engine is the better guess.
    assert detect_dialect(["vllm:num_requests_running"]).name == "vllm"


def test_pages_of_no_known_server_are_not_guessed():
    assert detect_dialect([]) is None
    assert detect_dialect(["process_resident_memory_bytes", "python_gc_objects_collected_total"]) is None
    # Triton serving some other backend: Triton's own nv_ series are not the TensorRT-LLM backend's.
    assert detect_dialect(["nv_inference_request_success", "nv_gpu_utilization"]) is None


def test_the_prefix_most_names_carry_wins():
    names = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "tgi_queue_size"]
    assert detect_dialect(names).name == "vllm"


def test_the_soak_reference_server_reads_as_vllm():
    from soak.refserver.metrics import EngineSnapshot, ServerMetrics

    metrics = ServerMetrics("ref")
    metrics.preemptions.inc(2)
    text = metrics.render(EngineSnapshot(running=3, waiting=1, kv_cache_usage=0.25)).decode()
    dialect = detect_dialect(family_names(text))
    assert dialect is not None and dialect.name == "vllm"
    readings = read_gauges(dialect, samples_of(text), model="ref")
    assert (readings["running"], readings["waiting"], readings["kv_usage_fraction"]) == (3.0, 1.0, 0.25)
    assert readings["preemptions_total"] == 2.0


def test_a_server_that_exposes_nothing_for_a_reading_gives_none():
    readings = read_gauges(DIALECTS["tgi"], [])
    assert readings == dict.fromkeys(READINGS)
    assert DIALECTS["tgi"].preemptions is None
    assert DIALECTS["llamacpp"].preemptions is None
    assert DIALECTS["trtllm"].preemptions is None


def test_tgi_v2_backend_without_a_token_budget_has_no_kv_reading():
    text = "# TYPE tgi_batch_current_max_tokens gauge\ntgi_batch_current_max_tokens 4096\n"
    assert read_gauges(DIALECTS["tgi"], samples_of(text))["kv_usage_fraction"] is None


def test_nan_samples_are_skipped():
    text = '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{engine="0"} NaN\n'
    assert read_gauges(DIALECTS["vllm"], samples_of(text))["kv_usage_fraction"] is None


def test_a_percent_scale_is_divided_by_100():
    percent = Dialect(
        name="pct", server="test", prefix="x_", running=None, waiting=None,
        kv_usage=(KvSeries(Selector("x_kv_percent"), KvScale.PERCENT, "test"),),
        preemptions=None, prompt_tokens=None, generation_tokens=None,
        model_label=None, owned_by=None, process_metrics=False,
    )
    assert read_gauges(percent, [("x_kv_percent", {}, 42.0)])["kv_usage_fraction"] == pytest.approx(0.42)


def test_the_model_filter_keeps_one_models_series():
    two_models = TRTLLM + (
        'nv_trt_llm_request_metrics{model="other",request_type="scheduled",version="1"} 100\n'
    )
    dialect = DIALECTS["trtllm"]
    assert read_gauges(dialect, samples_of(two_models))["running"] == 116.0
    assert read_gauges(dialect, samples_of(two_models), model="tensorrt_llm")["running"] == 16.0
    assert read_gauges(dialect, samples_of(two_models), model="absent")["running"] is None
    # A dialect without a model label reads everything whatever the model asked for.
    assert read_gauges(DIALECTS["llamacpp"], samples_of(LLAMACPP), model="whatever")["running"] == 2.0


def test_waiting_before_v018_is_never_negative():
    text = (
        "# TYPE nv_trt_llm_request_metrics gauge\n"
        'nv_trt_llm_request_metrics{model="m",request_type="active",version="1"} 2\n'
        'nv_trt_llm_request_metrics{model="m",request_type="scheduled",version="1"} 3\n'
    )
    assert read_gauges(DIALECTS["trtllm"], samples_of(text))["waiting"] == 0.0


def test_every_reading_names_its_source_and_counters_are_marked():
    for dialect in DIALECTS.values():
        for field in ("running", "waiting", "preemptions", "prompt_tokens", "generation_tokens"):
            for series in getattr(dialect, field) or ():
                assert series.source
                if field in ("running", "waiting"):
                    assert series.kind.value == "gauge"
                else:
                    assert series.kind.value in ("counter", "histogram_sum")
        for kv in dialect.kv_usage or ():
            assert kv.source
            assert (kv.total is not None) == (kv.scale is KvScale.USED_OVER_TOTAL)


def test_registry_holds_the_six_dialects():
    assert set(DIALECTS) == {"vllm", "vllm-v0", "sglang", "tgi", "llamacpp", "trtllm"}
    assert str(DIALECTS["trtllm"].running[0].selector) == 'nv_trt_llm_request_metrics{request_type="scheduled"}'


# --- /v1/models and the servers' own info endpoints ------------------------------------------------------

VLLM_MODELS = {
    "object": "list",
    "data": [
        {"id": "Qwen/Qwen2.5-7B-Instruct", "object": "model", "owned_by": "vllm", "root": "Qwen/Qwen2.5-7B-Instruct",
         "parent": None, "max_model_len": 32768},
        {"id": "my-lora", "object": "model", "owned_by": "vllm", "root": "/loras/a", "parent": "Qwen/Qwen2.5-7B-Instruct",
         "max_model_len": None},
    ],
}
SGLANG_MODELS = {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "sglang",
                                             "root": "Qwen/Qwen3-8B", "max_model_len": 40960}]}
SGLANG_SERVER_INFO = {"model_path": "Qwen/Qwen3-8B", "context_length": 16384, "max_total_num_tokens": 409600,
                      "max_req_input_len": 16378, "version": "0.5.0", "internal_states": [{}]}
SGLANG_SERVER_INFO_DEFAULT = {**SGLANG_SERVER_INFO, "context_length": None}
SGLANG_MODEL_INFO = {"model_path": "Qwen/Qwen3-8B", "tokenizer_path": "Qwen/Qwen3-8B", "is_generation": True,
                     "preferred_sampling_params": None, "weight_version": "default"}
TGI_INFO = {"model_id": "mistralai/Mistral-7B-Instruct-v0.3", "model_sha": None, "max_concurrent_requests": 128,
            "max_best_of": 2, "max_stop_sequences": 4, "max_input_tokens": 8191, "max_total_tokens": 8192,
            "validation_workers": 2, "max_client_batch_size": 4, "router": "text-generation-router",
            "version": "3.3.4", "sha": None, "docker_label": None}
TGI_INFO_OLD = {"model_id": "bigscience/bloom-560m", "max_input_length": 1024, "max_total_tokens": 2048,
                "router": "text-generation-router", "version": "1.4.5"}
LLAMACPP_PROPS = {"default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": -1}}, "total_slots": 4,
                  "model_path": "/models/qwen2.5-7b-instruct-q4_k_m.gguf", "build_info": "b6000"}
LLAMACPP_MODELS = {
    "models": [{"name": "qwen", "model": "qwen"}],
    "object": "list",
    "data": [{"id": "qwen", "object": "model", "owned_by": "llamacpp",
              "meta": {"vocab_type": 2, "n_vocab": 152064, "n_ctx": 4096, "n_ctx_train": 32768, "n_embd": 3584}}],
}
LLAMACPP_MODELS_OLD = {
    "object": "list",
    "data": [{"id": "qwen.gguf", "object": "model", "owned_by": "llamacpp",
              "meta": {"vocab_type": 2, "n_vocab": 152064, "n_ctx_train": 32768, "n_embd": 3584}}],
}
TRITON_MODELS = {"object": "list", "data": [{"id": "tensorrt_llm_bls", "object": "model", "created": 1728948689,
                                             "owned_by": "Triton Inference Server"}]}


@pytest.mark.parametrize(
    ("info", "dialect", "expected"),
    [
        (VLLM_MODELS, "vllm", 32768),
        (VLLM_MODELS, "vllm-v0", 32768),
        (SGLANG_MODELS, "sglang", 40960),
        (SGLANG_SERVER_INFO, "sglang", 16384),
        (SGLANG_SERVER_INFO_DEFAULT, "sglang", None),  # KV pool size is not a context length
        (SGLANG_MODEL_INFO, "sglang", None),
        (TGI_INFO, "tgi", 8192),
        (TGI_INFO_OLD, "tgi", 2048),
        (LLAMACPP_PROPS, "llamacpp", 4096),
        (LLAMACPP_MODELS, "llamacpp", 4096),  # the slot's context before the training context
        (LLAMACPP_MODELS_OLD, "llamacpp", 32768),
        (TRITON_MODELS, "trtllm", None),
        ({}, "vllm", None),
    ],
)
def test_context_length_from_each_info_shape(info, dialect, expected):
    assert context_length_from(info, dialect) == expected


def test_context_length_picks_the_asked_model_and_takes_any_shape_without_a_dialect():
    assert context_length_from(VLLM_MODELS, "vllm", model="my-lora") == 32768  # the LoRA card says nothing
    single = {"id": "m", "object": "model", "owned_by": "vllm", "max_model_len": 2048}
    assert context_length_from(single, "vllm") == 2048
    assert context_length_from(TGI_INFO, None) == 8192
    assert context_length_from(LLAMACPP_PROPS, None) == 4096
    # Fields of another server's shape are not read under a named dialect.
    assert context_length_from(TGI_INFO, "vllm") is None
    assert context_length_from({"data": [{"id": "m", "max_model_len": 4096.5}]}, "vllm") is None
    assert context_length_from({"data": [{"id": "m", "max_model_len": True}]}, "vllm") is None
    with pytest.raises(ValueError, match="unknown dialect"):
        context_length_from(VLLM_MODELS, "ollama")


@pytest.mark.parametrize(
    ("info", "expected"),
    [(VLLM_MODELS, "vllm"), (SGLANG_MODELS, "sglang"), (LLAMACPP_MODELS, "llamacpp"), (TRITON_MODELS, None),
     ({"object": "list", "data": [{"id": "x", "owned_by": "x"}]}, None), ({}, None)],
)
def test_models_answer_names_the_server_where_it_can(info, expected):
    dialect = detect_dialect_from_models(info)
    assert (dialect.name if dialect else None) == expected


def test_histogram_sums_behave_like_counters():
    first = read_gauges(DIALECTS["tgi"], samples_of(TGI))["generation_tokens_total"]
    later = read_gauges(DIALECTS["tgi"], samples_of(TGI.replace("sum 302080", "sum 302500")))
    assert later["generation_tokens_total"] - first == 420
    assert not math.isnan(first)
