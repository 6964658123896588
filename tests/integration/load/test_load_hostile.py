"""Every hostile server behaviour ends in the right error class, at the right time, without an exception."""

from __future__ import annotations

import socket
import time

import gevent
import pytest
from loadtools import scenario_instances

from soak.load.client import Arrival, set_arrival

TIMEOUT_S = 1.5

CASES = [
    # mode, expected error class, words in the message
    ("normal", None, ""),
    ("trickle", None, ""),
    ("truncated", "bad_stream", "mid-stream"),
    ("no_done", "bad_stream", "without [DONE]"),
    ("invalid_json", "bad_stream", "invalid JSON"),
    ("error_event", "bad_stream", "error event"),
    ("wrong_ct", "bad_stream", "content-type"),
    ("error_body", "bad_stream", "error body"),
    ("never_end", "bad_stream", "did not finish"),
    ("hang", "timeout", "no response"),
    ("http500", "http_5xx", "HTTP 500"),
    ("http400", "http_4xx", "HTTP 400"),
]


def one_request(url: str, model: str, timeout_s: float = TIMEOUT_S, **chat_kwargs):
    records: list = []
    [user] = scenario_instances(url, "chat_short", model, records, request_timeout_s=timeout_s)
    set_arrival(Arrival("hostile", time.time(), None))
    try:
        reply = user.client.chat([{"role": "user", "content": "hello"}], max_tokens=6, **chat_kwargs)
    finally:
        set_arrival(None)
    assert records == [reply.record]
    return reply


@pytest.mark.timeout(60)
def test_each_hostile_mode_is_classified(mock_server):
    models = {mode: mock_server.model(mode=mode, ttft_ms=20, itl_ms=10) for mode, _, _ in CASES}
    jobs = {mode: gevent.spawn(one_request, mock_server.url, model) for mode, model in models.items()}
    gevent.joinall(list(jobs.values()), timeout=30, raise_error=True)
    for mode, error_class, words in CASES:
        record = jobs[mode].value.record
        assert record.error_class == error_class, (mode, record)
        assert words in (record.error_message or ""), (mode, record.error_message)
        assert record.is_error == (error_class is not None)


@pytest.mark.timeout(30)
def test_a_timeout_is_recorded_at_the_timeout_value(mock_server):
    reply = one_request(mock_server.url, mock_server.model(mode="hang"), timeout_s=0.5)
    assert reply.record.error_class == "timeout"
    assert reply.record.e2e_ms == pytest.approx(500, abs=30)
    assert reply.record.status_code is None and reply.record.ttft_ms is None


@pytest.mark.timeout(30)
def test_trickled_events_are_reassembled_and_ttft_waits_for_content(mock_server):
    reply = one_request(mock_server.url, mock_server.model(mode="trickle", ttft_ms=20, itl_ms=10))
    assert reply.text == "tok0 tok1 tok2 tok3 tok4 tok5 " and reply.record.output_tokens == 6
    assert reply.record.ttft_ms < reply.record.e2e_ms and len(reply.record.itl_ms) == 5


@pytest.mark.timeout(30)
def test_a_refused_connection_is_a_connect_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # bound, never listening: refused
        reply = one_request(closed_url, "mock")
    assert reply.record.error_class == "connect" and reply.record.status_code is None


@pytest.mark.timeout(30)
def test_the_connection_pool_survives_errors(mock_server):
    """After every kind of failure, a normal request on the same client still works."""
    records: list = []
    [user] = scenario_instances(mock_server.url, "chat_short", "mock", records, request_timeout_s=TIMEOUT_S)
    for mode in ("truncated", "invalid_json", "http500", "never_end", "normal"):
        reply = user.client.chat([{"role": "user", "content": "hi"}], max_tokens=4,
                                 model=mock_server.model(mode=mode, ttft_ms=5, itl_ms=5), cancel_after_tokens=None)
    assert reply.ok and reply.text == "tok0 tok1 tok2 tok3 "
    pool = next(iter(user.http.client.clientpool.clients.values()))._connection_pool
    assert pool._semaphore.counter == pool.size  # no connection slot leaked
