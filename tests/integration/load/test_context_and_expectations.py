"""The context length comes from the server (or --max-context) and every scenario's requests fit it; bad_input's
requests state what they expect, and a 200 where a refusal was expected is a named validation gap.

Real mock servers (subprocesses on 127.0.0.1), real Locust where the load runs.
"""

from __future__ import annotations

import pytest
from loadtools import make_config, run_load, run_tasks, start_mock

from soak.load.context import DEFAULT_SOURCE, resolve_context

SMALL_CONTEXT = 1024


@pytest.fixture(scope="module")
def llamacpp_mock():
    """A server that states its 1,024-token context as llama.cpp does (meta.n_ctx, /props) and refuses more."""
    server = start_mock("--max-model-len", str(SMALL_CONTEXT), "--context-style", "llamacpp")
    yield server
    server.process.kill()
    server.process.wait(timeout=10)


@pytest.fixture(scope="module")
def lenient_mock():
    """A server that answers 200 to malformed requests (as a real llama.cpp server did), but not to long prompts."""
    server = start_mock("--max-model-len", str(SMALL_CONTEXT), "--lenient", "--ttft-ms", "1", "--itl-ms", "0.1")
    yield server
    server.process.kill()
    server.process.wait(timeout=10)


def fast(server, **params):
    return server.model(**{"ttft_ms": 2, "itl_ms": 0.2, **params})


@pytest.mark.timeout(30)
def test_llamacpp_context_is_read_not_its_training_length(llamacpp_mock):
    context = resolve_context(llamacpp_mock.url, "mock", None)
    assert context.tokens == SMALL_CONTEXT  # not meta.n_ctx_train (4 × it), not the 2,048 default
    assert context.source in ("GET /v1/models", "GET /props") and context.stated == SMALL_CONTEXT


@pytest.mark.timeout(60)
def test_long_prompts_fit_a_context_smaller_than_the_default(llamacpp_mock):
    config = make_config(6.0, rate_rps=8.0, scenarios=["long_context", "long_tail:2", "mixed", "unicode", "cancel"])
    run = run_load(config, llamacpp_mock.url, fast(llamacpp_mock))
    [event] = run.events_of("context_length")
    assert event["tokens"] == SMALL_CONTEXT
    assert len(run.records) > 20
    assert [r.error_message for r in run.records if r.is_error] == []  # no "prompt is N tokens, more than …"
    long_context = [r for r in run.records if r.scenario == "long_context"]
    assert long_context and all(r.prompt_tokens > 0.7 * SMALL_CONTEXT for r in long_context)


@pytest.mark.timeout(60)
def test_max_context_overrides_what_the_server_states(mock_server):
    config = make_config(4.0, rate_rps=6.0, scenarios=["long_context"], max_context=512)
    run = run_load(config, mock_server.url, fast(mock_server))
    [event] = run.events_of("context_length")
    assert (event["tokens"], event["source"], event["stated"]) == (512, "--max-context", 4096)
    assert run.records and all(r.error_class is None and r.prompt_tokens + r.output_tokens <= 512 for r in run.records)


@pytest.mark.timeout(30)
def test_a_server_that_states_no_context_gets_the_default_and_says_so(caplog):
    server = start_mock("--context-style", "none")
    try:
        context = resolve_context(server.url, "mock", None)
    finally:
        server.process.kill()
        server.process.wait(timeout=10)
    assert (context.tokens, context.source, context.stated) == (2048, DEFAULT_SOURCE, None)
    assert "states no context length" in caplog.text and "--max-context" in caplog.text


@pytest.mark.timeout(60)
def test_bad_input_answered_200_is_a_named_validation_gap(lenient_mock):
    records = run_tasks(lenient_mock.url, "bad_input", fast(lenient_mock), per_task=1, max_model_len=SMALL_CONTEXT)
    by_gap = {r.validation_gap: r for r in records if r.validation_gap}
    assert set(by_gap) == {"malformed JSON: a 4xx", "unknown model: a 4xx", "empty messages: a 4xx",
                           f"max_tokens beyond the context: a 4xx, or prompt + completion within {SMALL_CONTEXT} tokens"}
    assert all(r.error_class is None and r.status_code == 200 for r in by_gap.values())
    too_many = next(r for name, r in by_gap.items() if name.startswith("max_tokens"))
    assert too_many.output_tokens > SMALL_CONTEXT  # the server generated past its own context
    [refused] = [r for r in records if not r.validation_gap]  # the prompt beyond the context: refused, as expected
    assert refused.error_class == "http_4xx" and refused.expected_error


@pytest.mark.timeout(60)
def test_max_tokens_beyond_the_limit_is_met_by_a_completion_within_the_context(lenient_mock):
    records = run_tasks(lenient_mock.url, "bad_input", fast(lenient_mock, tokens=16), per_task=1,
                        max_model_len=SMALL_CONTEXT)
    gaps = {r.validation_gap for r in records if r.validation_gap}
    assert len(records) == 5 and len(gaps) == 3 and not any(name.startswith("max_tokens") for name in gaps)


@pytest.mark.timeout(30)
def test_a_server_that_refuses_leaves_no_gap(mock_server):
    records = run_tasks(mock_server.url, "bad_input", fast(mock_server), per_task=2, max_model_len=4096)
    assert len(records) == 10 and all(r.expected_error and r.validation_gap is None for r in records)
