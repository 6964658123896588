from soak.telemetry.prometheus import parse_samples, read_page


def parse_metrics(text: str) -> tuple[dict[str, float], list[tuple[str, dict[str, str], float]]]:
    """What a scrape reads of a page: its known readings and extra series."""
    _, known, extra = read_page(parse_samples(text))
    return known, extra


VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 10.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 5.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 15.0
vllm:time_to_first_token_seconds_count{model_name="m"} 15.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 3.5
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.5e+09
"""


def test_known_vllm_series_land_in_wide_fields():
    known, _ = parse_metrics(VLLM_TEXT)
    assert known["running"] == 3.0
    assert known["waiting"] == 1.0
    assert known["kv_usage"] == 0.25
    assert known["generation_tokens_total"] == 1234.0
    assert known["request_success_total"] == 15.0  # summed over finished_reason


def test_other_series_are_kept_without_buckets():
    _, extra = parse_metrics(VLLM_TEXT)
    names = {name for name, _, _ in extra}
    assert "process_resident_memory_bytes" in names
    assert "vllm:time_to_first_token_seconds_count" in names
    assert not any(name.endswith("_bucket") for name in names)


def test_v0_kv_name_is_read_as_kv_usage():
    known, _ = parse_metrics("# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.5\n")
    assert known["kv_usage"] == 0.5


def test_the_cheap_path_keeps_exactly_the_known_fields():
    from soak.telemetry.prometheus import known_lines_only

    full, _ = parse_metrics(VLLM_TEXT)
    cheap, extra = parse_metrics(known_lines_only(VLLM_TEXT))
    assert cheap == full
    assert {name for name, _, _ in extra} == {"process_resident_memory_bytes"}  # kept for the long table


def test_process_series_are_read_as_the_server_process():
    known, _ = parse_metrics(VLLM_TEXT + "# TYPE process_open_fds gauge\nprocess_open_fds 42.0\n")
    assert known["process_rss_bytes"] == 1.5e9
    assert known["process_fds"] == 42.0


LLAMACPP_TEXT = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 700
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1234
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""


def test_a_llamacpp_page_is_read_in_its_own_names_and_missing_readings_stay_absent():
    from soak.telemetry.prometheus import known_lines_only

    known, extra = parse_metrics(LLAMACPP_TEXT)
    assert known == {"running": 2.0, "waiting": 1.0, "prompt_tokens_total": 700.0, "generation_tokens_total": 1234.0}
    assert extra == []  # every series on the page is a reading
    cheap, _ = parse_metrics(known_lines_only(LLAMACPP_TEXT))
    assert cheap == known
