"""The client's side of structured answers: streamed tool-call fragments assembled and timed, and an answer a
validator rejects recorded as `invalid_output` with the answer quoted."""

from __future__ import annotations

import json

import pytest

from soak.load.client import _apply_events, _Exchange, _validated
from soak.load.schemas import TOOLS
from soak.load.validate import Answer, ToolCall, json_answer, tool_answer


def _delta(**delta) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode()


def test_streamed_tool_call_fragments_are_assembled_and_timed_like_content():
    exchange = _Exchange("tools", "chat", intended_t=100.0, queue_ms=0.0)
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    _apply_events(exchange, [_delta(role="assistant", content="")], 100.1, None)
    _apply_events(exchange, [_delta(tool_calls=[first])], 100.2, None)
    _apply_events(exchange, [_delta(tool_calls=[{"index": 0, "function": {"arguments": '{"location":'}}])], 100.3, None)
    _apply_events(exchange, [_delta(tool_calls=[{"index": 0, "function": {"arguments": '"Oslo"}'}}])], 100.35, None)
    assert _apply_events(exchange, [b"[DONE]"], 100.4, None)
    assert exchange.tool_calls() == (ToolCall("get_weather", '{"location":"Oslo"}'),)
    record = exchange.record()
    assert record.ttft_ms == pytest.approx(200.0) and record.itl_ms == pytest.approx((100.0, 50.0))


def test_a_rejected_answer_becomes_invalid_output_with_the_answer_quoted():
    record = _Exchange("structured", "chat", intended_t=0.0, queue_ms=0.0).record()
    broken = _validated(record, json_answer(), Answer('{"answer":"soak",', finish_reason="stop"))
    assert broken.error_class == "invalid_output" and broken.is_error
    assert broken.error_message.startswith("invalid JSON (") and broken.error_message.endswith("""'{"answer":"soak",'""")
    assert _validated(record, json_answer(), Answer('{"answer":"soak"}')) is record
    unknown = _validated(record, tool_answer(TOOLS), Answer("", (ToolCall("rm_rf", "{}"),)))
    assert "tool call names 'rm_rf', not a tool offered" in unknown.error_message


def test_a_validator_that_raises_is_an_invalid_output_saying_so():
    def broken_validator(answer: Answer) -> str | None:
        raise KeyError("schema")

    record = _Exchange("mine", "chat", intended_t=0.0, queue_ms=0.0).record()
    judged = _validated(record, broken_validator, Answer("{}"))
    assert judged.error_class == "invalid_output" and "the validator failed: KeyError" in judged.error_message
