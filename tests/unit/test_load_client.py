"""The SSE reader and chunk handling of the OpenAI client, on canned byte streams."""

from __future__ import annotations

import pytest

from soak.load.client import (
    MAX_MESSAGE_CHARS,
    SseParser,
    StreamError,
    _apply_chunk,
    _Exchange,
    _parse_chunk,
    scrub_secrets,
    short_error,
)


def events(body: bytes, piece: int | None = None) -> list[bytes]:
    """The events of `body` fed whole, or `piece` bytes at a time as a slow network would hand it over."""
    parser = SseParser()
    piece = piece or len(body) or 1
    found = [event for start in range(0, len(body), piece) for event in parser.feed(body[start:start + piece])]
    return found + parser.close()


def test_sse_events_end_at_blank_lines_and_comments_are_skipped():
    body = b': keep-alive\n\ndata: {"a": 1}\n\ndata:{"b": 2}\r\n\r\nevent: x\nid: 3\ndata: [DONE]\n\n'
    assert events(body) == [b'{"a": 1}', b'{"b": 2}', b"[DONE]"]


def test_multi_line_data_joins_and_a_last_event_without_newline_is_kept():
    assert events(b"data: {\"a\":\ndata: 1}\n\ndata: [DONE]") == [b'{"a":\n1}', b"[DONE]"]


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64])
def test_events_split_across_reads_come_out_whole(piece):
    body = b': keep-alive\n\ndata: {"a": 1}\r\n\r\ndata: {"b":\ndata: 2}\n\nevent: x\ndata: [DONE]\n\n'
    assert events(body, piece) == [b'{"a": 1}', b'{"b":\n2}', b"[DONE]"]


def test_a_chunk_is_timed_when_its_read_returned_not_when_it_was_parsed():
    exchange = _Exchange("s", "chat", intended_t=100.0, queue_ms=0.0)
    _apply_chunk(exchange, _parse_chunk(b'{"choices":[{"delta":{"content":"a"}}]}'), 100.2)
    _apply_chunk(exchange, _parse_chunk(b'{"choices":[{"delta":{"reasoning_content":"b"}}]}'), 100.25)
    record = exchange.record()
    assert record.ttft_ms == pytest.approx(200.0) and record.itl_ms == pytest.approx((50.0,))
    assert "".join(exchange.parts) == "ab"


def test_chat_deltas_completion_text_and_usage():
    exchange = _Exchange("s", "chat", intended_t=0.0, queue_ms=0.0)
    _apply_chunk(exchange, _parse_chunk(b'{"choices":[{"delta":{"role":"assistant"}}]}'))
    assert exchange.first_token_t is None  # a role-only delta is not a token
    _apply_chunk(exchange, _parse_chunk(b'{"choices":[{"delta":{"content":"Hel"}}]}'))
    _apply_chunk(exchange, _parse_chunk(b'{"choices":[{"text":"lo","finish_reason":"length"}]}'))
    _apply_chunk(exchange, _parse_chunk(b'{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}'))
    record = exchange.record()
    assert "".join(exchange.parts) == "Hello" and exchange.finish_reason == "length"
    assert record.output_tokens == 2 and record.prompt_tokens == 7 and len(record.itl_ms) == 1


@pytest.mark.parametrize("data, message", [
    (b'{"choices": [', "invalid JSON chunk"),
    (b'[1, 2]', "not an object"),
    (b'{"error": {"message": "engine died"}}', "engine died"),
])
def test_hostile_chunks_raise_stream_errors(data, message):
    with pytest.raises(StreamError, match=message):
        _parse_chunk(data)


def test_times_are_measured_from_the_intended_send_and_lag_excludes_the_queue():
    exchange = _Exchange("s", "chat", intended_t=100.0, queue_ms=300.0)
    exchange.sent_t, exchange.first_token_t, exchange.finish_t = 100.302, 100.5, 101.0
    record = exchange.record()
    assert record.ttft_ms == pytest.approx(500) and record.e2e_ms == pytest.approx(1000)
    assert record.lag_ms == pytest.approx(2.0) and record.output_tokens == 0 and record.prompt_tokens is None


def test_error_messages_are_short_and_from_the_body():
    assert short_error(b'{"error": {"message": "bad   request", "code": 400}}') == "bad request"
    assert short_error(b'{"detail": "x"}') == "{'detail': 'x'}"
    assert short_error(b"<html>" + b"x" * 1000) == ("<html>" + "x" * 1000)[:MAX_MESSAGE_CHARS] and MAX_MESSAGE_CHARS == 300


def test_error_messages_keep_no_credentials():
    body = b'{"error": {"message": "invalid key tok-abcdef123456 (header: Bearer tok-abcdef123456, api_key=s3cr3tvalue)"}}'
    assert short_error(body, ("tok-abcdef123456",)) == "invalid key *** (header: Bearer ***, api_key=***)"
    assert scrub_secrets("use sk-proj-AbC123xyz9 or Authorization: xyz987654321") == "use *** or Authorization: ***"
    assert scrub_secrets("request (1719 tokens) exceeds the available context size (1024 tokens)") == (
        "request (1719 tokens) exceeds the available context size (1024 tokens)")
