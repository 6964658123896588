"""Validation of OpenAI request bodies by the reference server: what is a 400, 404, or accepted."""

import pytest

from soak.refserver.protocol import Limits, RequestError, decode_json, error_body, parse_chat, parse_completion
from soak.refserver.tokenizer import BOS_ID, encode

LIMITS = Limits("soak-reference", max_model_len=64)
USER = [{"role": "user", "content": "hi"}]


def test_chat_defaults_fill_the_context():
    request = parse_chat({"messages": USER}, LIMITS)
    assert request.prompt_tokens == encode("<|user|>\nhi\n<|assistant|>\n")
    assert request.params.max_tokens == 64 - len(request.prompt_tokens)
    assert request.params.temperature == 1.0 and not request.stream and not request.include_usage


def test_chat_fields_are_read():
    request = parse_chat({"model": "soak-reference", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "assistant", "content": None}, *USER],
        "max_completion_tokens": 5, "temperature": 0, "top_p": 0.9, "seed": 3, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True}, "stop": ["\n"], "user": "u", "n": 1,
        "unknown_field": {"ignored": True}}, Limits("soak-reference", max_model_len=256))
    assert request.params.max_tokens == 5 and request.params.temperature == 0.0 and request.params.top_p == 0.9
    assert request.params.seed == 3 and request.params.ignore_eos
    assert request.stream and request.include_usage


def test_completion_prompts():
    assert parse_completion({"prompt": "ab"}, LIMITS).prompt_tokens == [BOS_ID, 97, 98]
    assert parse_completion({"prompt": ["ab"]}, LIMITS).prompt_tokens == [BOS_ID, 97, 98]
    assert parse_completion({"prompt": [97, 98]}, LIMITS).prompt_tokens == [BOS_ID, 97, 98]
    assert parse_completion({"prompt": "ab"}, LIMITS).params.max_tokens == 16


@pytest.mark.parametrize("body, param", [
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages"),
    ({"messages": USER, "max_tokens": True}, "max_tokens"),
    ({"messages": USER, "max_tokens": -1}, "max_tokens"),
    ({"messages": USER, "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": USER, "temperature": -0.5}, "temperature"),
    ({"messages": USER, "top_p": 0}, "top_p"),
    ({"messages": USER, "seed": "1"}, "seed"),
    ({"messages": USER, "seed": 2**64}, "seed"),
    ({"messages": USER, "temperature": float("nan")}, "temperature"),
    ({"messages": USER, "top_p": float("inf")}, "top_p"),
    ({"messages": USER, "ignore_eos": 1}, "ignore_eos"),
    ({"messages": USER, "stream": "yes"}, "stream"),
    ({"messages": USER, "stream": True, "stream_options": []}, "stream_options"),
    ({"messages": USER, "n": 17}, "n"),
    ({"messages": USER, "n": 0}, "n"),
    ({"messages": USER, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": USER, "response_format": {"type": "yaml"}}, "response_format"),
    ({"messages": USER, "response_format": {"type": "json_schema", "json_schema": {}}}, "response_format"),
    ({"messages": USER, "tools": [{"type": "function"}]}, "tools"),
    ({"messages": USER, "tool_choice": "required"}, "tool_choice"),
    ({"messages": USER, "stop": 3}, "stop"),
    ({"messages": USER, "model": 7}, "model"),
    ({"messages": USER, "max_tokens": 60}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x" * 80}]}, "messages"),
])
def test_chat_rejections(body, param):
    with pytest.raises(RequestError) as info:
        parse_chat(body, LIMITS)
    assert info.value.status == 400 and info.value.param == param


@pytest.mark.parametrize("prompt", [None, 5, [], ["a", "b"], [1, 999], [True]])
def test_completion_prompt_rejections(prompt):
    with pytest.raises(RequestError) as info:
        parse_completion({"prompt": prompt}, LIMITS)
    assert info.value.status == 400 and info.value.param == "prompt"


def test_unknown_model_is_404():
    with pytest.raises(RequestError) as info:
        parse_chat({"model": "other", "messages": USER}, LIMITS)
    assert info.value.status == 404


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b"\xff\xfe", b'"text"'])
def test_bodies_that_are_not_json_objects(raw):
    with pytest.raises(RequestError) as info:
        decode_json(raw)
    assert info.value.status == 400


def test_error_body_shape():
    assert error_body(400, "bad", "max_tokens") == {
        "error": {"message": "bad", "type": "BadRequestError", "param": "max_tokens", "code": 400}}
    assert error_body(500, "boom")["error"]["type"] == "InternalServerError"


def test_odd_but_valid_values_are_accepted():
    request = parse_chat({"messages": [{"role": "user", "content": "\ud800 lone surrogate"}], "seed": -5,
                          "temperature": 1e-300}, LIMITS)
    assert request.params.seed == -5
    assert request.prompt_tokens == encode("<|user|>\n? lone surrogate\n<|assistant|>\n")
