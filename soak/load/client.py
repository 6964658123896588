"""An OpenAI-compatible client on FastHttpUser's connection pool, streaming SSE line by line.

It times each request from its *intended* send (given by the dispatcher through the greenlet's arrival),
classifies every failure into one error class, and never lets a hostile response escape as an exception.
Each finished request becomes a `RequestRecord`, goes to the record sink and fires Locust's request event.

Every streamed chunk is stamped with the time the socket read that brought it returned, before any parsing,
so the client's own work does not add to TTFT and ITL (bench/timing_fidelity.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.local
import orjson
from gevent import monkey
from geventhttpclient._parser import HTTPParseError
from geventhttpclient.response import HTTPConnectionClosed
from geventhttpclient.url import URL

from soak.contracts import REQUEST_ID_HEADER, soak_request_id
from soak.load.prompts import TokenRatio, utf8_len
from soak.load.records import CANCELLED, INVALID_OUTPUT, RequestRecord
from soak.load.settings import ClientSettings
from soak.load.validate import Answer, ToolCall, Validator, invalid_message

log = logging.getLogger(__name__)

MAX_ERROR_BODY_BYTES = 64 * 1024
MAX_MESSAGE_CHARS = 300
AFTER_DONE_S = 2.0
_CONTENT_KEYS = ("content", "reasoning_content", "reasoning")
# What looks like a credential in an error body: a bearer token, an api_key/authorization value, an sk- key.
_SECRET_PATTERN = re.compile(r"(?i)(bearer\s+|api[_-]?key[\"'=:\s]+|authorization[\"'=:\s]+)[A-Za-z0-9._~+/=-]{6,}"
                             r"|\bsk-[A-Za-z0-9_-]{6,}")


@dataclass(frozen=True)
class Expect:
    """The answer a deliberately bad request expects: a 4xx. With `max_total_tokens`, a 200 whose prompt and
    completion tokens together stay within that many is accepted too. Any other 200 is a validation gap,
    named `name` in the record (`RequestRecord.validation_gap`)."""

    name: str = "a 4xx"
    max_total_tokens: int | None = None

    def accepts_success(self, record: RequestRecord) -> bool:
        """Whether a 200 answer still meets the expectation."""
        if self.max_total_tokens is None:
            return False
        return (record.prompt_tokens or 0) + record.output_tokens <= self.max_total_tokens


def expectation_of(expect_error: bool | Expect) -> Expect | None:
    """`expect_error=True` is the plain expectation of a 4xx; an `Expect` says more; False expects success."""
    if isinstance(expect_error, Expect):
        return expect_error
    return Expect() if expect_error else None


def scrub_secrets(text: str, secrets: tuple[str | None, ...] = ()) -> str:
    """`text` with our own secrets and anything shaped like a credential replaced by ***."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return _SECRET_PATTERN.sub(lambda match: (match.group(1) or "") + "***", text)


@dataclass
class Arrival:
    """One planned arrival, as the dispatcher hands it to the greenlet running a scenario task."""

    scenario: str
    intended_t: float
    rng: random.Random
    queue_ms: float = 0.0
    on_first_send: Callable[[float], None] | None = None
    used: bool = False
    item: Any = None  # what the arrival replays, if anything (a trace row: soak/load/trace.py)


_local = gevent.local.local()


_blocking_sleep = monkey.get_original("time", "sleep")
# Below this, a send waits for its intended time without the loop's timer (which wakes up to ~1 ms late).
PRECISE_WAIT_S = 0.002


def hold_until(t: float) -> None:
    """Return at wall time `t` (at once if it passed): the loop's timer for all but the last ~2 ms, then a sleep
    that blocks the process for the rest — short enough not to delay other greenlets' reads in any measurable way,
    and precise to ~0.1 ms where the timer is not."""
    remaining = t - time.time()
    if remaining > PRECISE_WAIT_S:
        gevent.sleep(remaining - PRECISE_WAIT_S)
        remaining = t - time.time()
    if remaining > 0:
        _blocking_sleep(remaining)


def set_arrival(arrival: Arrival | None) -> None:
    """Bind an arrival to the current greenlet (the dispatcher does this before running a task)."""
    _local.arrival = arrival


def current_arrival() -> Arrival | None:
    return getattr(_local, "arrival", None)


class _Deadline(Exception):
    """The request ran past `request_timeout_s`."""


class _Cancel(Exception):
    """The scenario asked to disconnect after N content chunks."""


class StreamError(Exception):
    """The response broke the protocol: truncated, invalid JSON, wrong content type, error body."""


@dataclass
class Reply:
    """What a scenario gets back: the generated text and the measured record."""

    text: str
    record: RequestRecord
    finish_reason: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def ok(self) -> bool:
        return self.record.error_class is None


@dataclass
class _Exchange:
    """The mutable state of one request while it runs."""

    scenario: str
    kind: str
    intended_t: float
    queue_ms: float
    sent_t: float = 0.0
    first_token_t: float | None = None
    last_chunk_t: float | None = None
    finish_t: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    chunks: int = 0
    usage: dict[str, Any] | None = None
    status_code: int | None = None
    headers_seen: bool = False
    headers_t: float = 0.0
    done: bool = False
    finish_reason: str | None = None
    error_class: str | None = None
    error_message: str | None = None
    expected_error: bool = False
    request_id: str | None = None
    # Tool calls by index: [name, arguments so far]; `tool_delta` marks a chunk that carried a fragment of one.
    tool_parts: dict[int, list[str]] = field(default_factory=dict)
    tool_delta: bool = False

    def tool_fragment(self, calls: list[Any]) -> None:
        """Add a chunk's `tool_calls` deltas (or a whole message's calls) to the calls being assembled."""
        for position, call in enumerate(calls):
            if not isinstance(call, dict):
                raise StreamError("malformed tool call")
            index = call.get("index", position)
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            part = self.tool_parts.setdefault(index if isinstance(index, int) else position, ["", ""])
            part[0] += str(function.get("name") or "")
            part[1] += str(function.get("arguments") or "")
        self.tool_delta = True

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(name or None, arguments) for _, (name, arguments) in sorted(self.tool_parts.items()))

    def content(self, text: str, now: float) -> None:
        """A content chunk that arrived at `now` (the time its socket read returned)."""
        if self.first_token_t is None:
            self.first_token_t = now
        else:
            self.itl_ms.append((now - self.last_chunk_t) * 1000.0)
        self.last_chunk_t = now
        self.parts.append(text)
        self.chunks += 1

    def fail(self, error_class: str, message: str, finish_t: float | None = None) -> None:
        self.error_class = error_class
        self.error_message = message[:MAX_MESSAGE_CHARS]
        self.finish_t = finish_t if finish_t is not None else time.time()

    def record(self) -> RequestRecord:
        finish_t = self.finish_t if self.finish_t is not None else time.time()
        sent_t = self.sent_t or finish_t
        usage = self.usage or {}
        output_tokens = usage.get("completion_tokens")
        first = self.first_token_t
        return RequestRecord(
            scenario=self.scenario, kind=self.kind, intended_t=self.intended_t, sent_t=sent_t,
            first_token_t=first, finish_t=finish_t,
            ttft_ms=(first - self.intended_t) * 1000.0 if first is not None else None,
            e2e_ms=(finish_t - self.intended_t) * 1000.0, itl_ms=tuple(self.itl_ms), queue_ms=self.queue_ms,
            lag_ms=(sent_t - self.intended_t) * 1000.0 - self.queue_ms,
            output_tokens=int(output_tokens) if isinstance(output_tokens, (int, float)) else self.chunks,
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")), error_class=self.error_class,
            expected_error=self.expected_error, status_code=self.status_code, error_message=self.error_message,
            request_id=self.request_id)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def short_error(body: bytes, secrets: tuple[str | None, ...] = ()) -> str:
    """The server's error message from a JSON error body, else the start of the body, on one line, at most
    MAX_MESSAGE_CHARS, with secrets scrubbed (`scrub_secrets`)."""
    text = body[:MAX_ERROR_BODY_BYTES].decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        message: Any = text
    else:
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message") if isinstance(error, dict) else error
        message = message if message is not None else data
    return scrub_secrets(" ".join(str(message).split()), secrets)[:MAX_MESSAGE_CHARS]


class SseParser:
    """Splits an SSE byte stream, fed as it arrives, into the data of each event (its `data:` lines joined).

    An event ends at a blank line; comments and other fields are skipped. `close` gives what the end of the
    stream completes: a last line without its newline, a last event without its blank line.
    """

    def __init__(self) -> None:
        self._pending = b""  # the start of a line not yet complete
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events that `chunk` completes (usually one: servers write an event per chunk)."""
        data = self._pending + chunk if self._pending else chunk
        end = data.rfind(b"\n")
        if end < 0:
            self._pending = data
            return []
        self._pending = data[end + 1:]
        lines = data[:end].split(b"\n")
        if b"\r" in data:
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        events: list[bytes] = []
        for line in lines:  # the two common lines inline: this runs twice per streamed token
            if line[:5] == b"data:":
                self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line:
                if self._data:
                    events.append(self._data[0] if len(self._data) == 1 else b"\n".join(self._data))
                    self._data = []
            else:
                self._line(line, events)
        return events

    def close(self) -> list[bytes]:
        events: list[bytes] = []
        if self._pending:
            self._line(self._pending.rstrip(b"\r"), events)
            self._pending = b""
        self._line(b"", events)
        return events

    def _line(self, line: bytes, events: list[bytes]) -> None:
        if not line:
            if self._data:
                events.append(b"\n".join(self._data))
                self._data = []
            return
        name, _, value = line.partition(b":")
        if name == b"data":
            self._data.append(value[1:] if value.startswith(b" ") else value)


def body_reads(response: Any, headers_t: float) -> Iterator[tuple[bytes, float]]:
    """The response body as it arrives, each socket read's bytes (chunked encoding undone) with the time the read
    returned; body bytes that came with the headers carry `headers_t`.

    Whatever the socket holds is taken at once: reading line by line or in fixed sizes would wait, and stamping
    after the parse would add the client's own work to every token's time. It reads through geventhttpclient's
    `HTTPSocketResponse` (its socket, parser and body buffer), the way that class's own `readline` does.
    """
    buffer = response._body_buffer
    if buffer:
        yield _take(buffer), headers_t
    while not response.message_complete:
        sock = response._sock
        if sock is None:
            raise HTTPConnectionClosed("connection closed.")
        try:
            data = sock.recv(response.block_size)
            received_t = time.time()
            response.feed(data)
        except BaseException:
            response.release()
            raise
        if buffer:
            yield _take(buffer), received_t
        elif not data and not response.message_complete:
            raise HTTPConnectionClosed("connection closed mid-body")


def _take(buffer: bytearray) -> bytes:
    data = bytes(buffer)
    del buffer[:]
    return data


def iter_sse_batches(response: Any, headers_t: float) -> Iterator[tuple[list[bytes], float]]:
    """The SSE events each socket read completed (their data), with the time that read returned."""
    parser = SseParser()
    received_t = headers_t
    for chunk, received_t in body_reads(response, headers_t):
        events = parser.feed(chunk)
        if events:
            yield events, received_t
    events = parser.close()
    if events:
        yield events, received_t


def discard_connection(response: Any) -> None:
    """Close the response's socket instead of returning it to the pool (its state is unknown)."""
    sock, pool = getattr(response, "_sock", None), getattr(response, "_pool", None)
    response._sock = response._pool = None
    if sock is not None and pool is not None:
        pool.release_socket(sock)
    elif sock is not None:
        sock.close()


@dataclass
class ClientContext:
    """What the client needs of the scenario instance it serves, handed over explicitly."""

    scenario: str  # the name of a request made outside any planned arrival
    model: Callable[[], str]  # the default model, resolved on first use
    token_ratio: TokenRatio
    on_record: Callable[[RequestRecord], None]


class OpenAIClient:
    """`self.client` of an OpenAIUser: chat/completion calls that measure and report themselves.

    `get`, `post`, … are the FastHttpSession's (`http`), unmeasured, as under plain Locust.
    """

    def __init__(self, http: Any, settings: ClientSettings, events: Any, context: ClientContext) -> None:
        self.http = http
        self.settings = settings
        self.events = events
        self.context = context
        self._base = URL(self.http.base_url.rstrip("/"))
        self._pool_client = self.http.client.clientpool.get_client(self._base)
        self._headers = self._make_headers()

    def retarget(self, base_url: str) -> None:
        """Send to `base_url` from the next request on (the server moved); the verbs below follow too."""
        self.http.base_url = base_url.rstrip("/")
        self._base = URL(self.http.base_url)
        self._pool_client = self.http.client.clientpool.get_client(self._base)

    # FastHttpSession's HTTP verbs, named one by one: any other attribute is an AttributeError, not a guess.
    def request(self, *args: Any, **kwargs: Any) -> Any:
        return self.http.request(*args, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self.http.get(*args, **kwargs)

    def post(self, *args: Any, **kwargs: Any) -> Any:
        return self.http.post(*args, **kwargs)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        return self.http.put(*args, **kwargs)

    def patch(self, *args: Any, **kwargs: Any) -> Any:
        return self.http.patch(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        return self.http.delete(*args, **kwargs)

    def head(self, *args: Any, **kwargs: Any) -> Any:
        return self.http.head(*args, **kwargs)

    def options(self, *args: Any, **kwargs: Any) -> Any:
        return self.http.options(*args, **kwargs)

    def _make_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        return headers

    # -- public API for scenario authors -----------------------------------------------------------
    def chat(self, messages: list[dict[str, Any]], max_tokens: int | None = None, stream: bool = True, *,
             model: str | None = None, name: str | None = None, cancel_after_tokens: int | None = None,
             expect_error: bool | Expect = False, validate: Validator | None = None, **params: Any) -> Reply:
        """POST /v1/chat/completions. `cancel_after_tokens` disconnects after that many content chunks;
        `validate` (soak.load.validate) judges a successful answer, and one it rejects is `invalid_output`."""
        body = {"model": model or self.context.model(), "messages": messages, **_generation(max_tokens, stream), **params}
        prompt_bytes = sum(utf8_len(m["content"]) for m in messages
                           if isinstance(m, dict) and isinstance(m.get("content"), str))
        return self._send("chat", "/v1/chat/completions", body, stream, name, cancel_after_tokens, expect_error,
                          prompt_bytes, validate)

    def completion(self, prompt: str, max_tokens: int | None = None, stream: bool = True, *,
                   model: str | None = None, name: str | None = None, cancel_after_tokens: int | None = None,
                   expect_error: bool | Expect = False, **params: Any) -> Reply:
        """POST /v1/completions."""
        body = {"model": model or self.context.model(), "prompt": prompt, **_generation(max_tokens, stream), **params}
        return self._send("completion", "/v1/completions", body, stream, name, cancel_after_tokens, expect_error,
                          utf8_len(prompt) if isinstance(prompt, str) else None)

    def raw(self, path: str, body: bytes | str | dict[str, Any], *, kind: str = "chat", stream: bool = False,
            name: str | None = None, expect_error: bool | Expect = False) -> Reply:
        """POST an arbitrary body (even malformed JSON) and measure it like any other request.

        `expect_error` (here and in `chat`, `completion`): True or an `Expect` for a request that should be refused.
        """
        return self._send(kind, path, body, stream, name, None, expect_error)

    # -- one request --------------------------------------------------------------------------------
    def _send(self, kind: str, path: str, body: Any, stream: bool, name: str | None,
              cancel_after: int | None, expect_error: bool | Expect, prompt_bytes: int | None = None,
              validate: Validator | None = None) -> Reply:
        payload = _encode(body)
        exchange, arrival = self._begin(kind)
        if expect_error:  # the server may log its refusal: the id marks those lines as soak's doing
            exchange.request_id = soak_request_id("provoke", exchange.scenario)
        response = None
        deadline = gevent.Timeout(self.settings.request_timeout_s, _Deadline)
        deadline.start()
        try:
            if arrival is not None:
                hold_until(exchange.intended_t)  # launched a little early: send on the intended time itself
            exchange.sent_t = time.time()
            if arrival is not None and arrival.on_first_send is not None:
                arrival.on_first_send((exchange.sent_t - exchange.intended_t) * 1000.0 - exchange.queue_ms)
            response = self._open(path, payload, stream, exchange.request_id)
            exchange.headers_t = time.time()
            exchange.headers_seen = True
            exchange.status_code = response.get_code()
            self._read(exchange, response, stream, cancel_after)
        except (gevent.GreenletExit, gevent.Timeout) as exc:
            # Killed at stop, or cut by a timeout the scenario put around the call: recorded, then passed on.
            why = "cancelled at stop" if isinstance(exc, gevent.GreenletExit) else "cut by the scenario's timeout"
            exchange.fail(CANCELLED, why)
            self._finish(exchange, response, payload, name, expect_error, prompt_bytes)
            raise
        except Exception as exc:  # every failure becomes a classified record
            self._classify(exchange, exc)
        finally:
            deadline.close()
        return self._finish(exchange, response, payload, name, expect_error, prompt_bytes, validate)

    def _begin(self, kind: str) -> tuple[_Exchange, Arrival | None]:
        """Intended time and queue wait from the arrival for its first request; later ones start now."""
        arrival = current_arrival()
        scenario = arrival.scenario if arrival else self.context.scenario
        if arrival is not None and not arrival.used:
            arrival.used = True
            return _Exchange(scenario, kind, arrival.intended_t, arrival.queue_ms), arrival
        return _Exchange(scenario, kind, time.time(), 0.0), None

    def _open(self, path: str, payload: bytes, stream: bool, request_id: str | None) -> Any:
        headers = dict(self._headers)
        headers["Accept"] = "text/event-stream" if stream else "application/json"
        if request_id is not None:
            headers[REQUEST_ID_HEADER] = request_id
        uri = self._base.path.rstrip("/") + path
        return self._pool_client.request("POST", uri, body=payload, headers=headers)

    def _read(self, exchange: _Exchange, response: Any, stream: bool, cancel_after: int | None) -> None:
        status = exchange.status_code
        if status >= 400:
            body = response.read(MAX_ERROR_BODY_BYTES)
            message = short_error(body, (self.settings.api_key,))
            exchange.fail("http_5xx" if status >= 500 else "http_4xx", f"HTTP {status}: {message}")
            return
        if status != 200:
            raise StreamError(f"unexpected HTTP {status}")
        content_type = str(response.get("content-type") or "").lower()
        if stream:
            self._read_stream(exchange, response, content_type, cancel_after)
        else:
            self._read_json(exchange, response, content_type)

    def _read_stream(self, exchange: _Exchange, response: Any, content_type: str, cancel_after: int | None) -> None:
        if "text/event-stream" not in content_type:
            raise StreamError(_wrong_type_message(response, content_type))
        for events, received_t in iter_sse_batches(response, exchange.headers_t):
            if _apply_events(exchange, events, received_t, cancel_after):
                self._drain_after_done(response)
                return
        raise StreamError("stream ended without [DONE]" if exchange.chunks else "empty stream")

    def _drain_after_done(self, response: Any) -> None:
        """Read the end of the response so the connection can be reused; a server that dawdles loses it."""
        if response.message_complete and not response._body_buffer:
            response.release()  # the end came with [DONE]: straight back to the pool, no timer needed
            return
        try:
            with gevent.Timeout(AFTER_DONE_S, _Deadline):
                while response.readline(b"\n"):
                    pass
        except (_Deadline, OSError, HTTPParseError):
            discard_connection(response)

    def _read_json(self, exchange: _Exchange, response: Any, content_type: str) -> None:
        body = response.read()
        exchange.finish_t = time.time()
        if "json" not in content_type:
            raise StreamError(f"wrong content-type {content_type or 'none'!r} for a JSON response")
        try:
            data = json.loads(body)
        except ValueError:
            raise StreamError("invalid JSON body") from None
        if not isinstance(data, dict) or "error" in data or "choices" not in data:
            raise StreamError(f"200 with an error body: {short_error(body)}")
        exchange.usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
        for choice in data.get("choices") or []:
            message = choice.get("message") or {}
            exchange.parts.append(str(message.get("content") or choice.get("text") or ""))
            if isinstance(message, dict) and isinstance(message.get("tool_calls"), list):
                exchange.tool_fragment(message["tool_calls"])
            exchange.finish_reason = choice.get("finish_reason")

    # -- outcome --------------------------------------------------------------------------------------
    def _classify(self, exchange: _Exchange, exc: BaseException) -> None:
        """Map an exception to an error class; the deadline is recorded at the timeout value."""
        if isinstance(exc, _Cancel):
            exchange.fail(CANCELLED, f"client cancelled after {exchange.chunks} chunks")
        elif isinstance(exc, _Deadline):
            timeout_s = self.settings.request_timeout_s
            at = exchange.sent_t + timeout_s
            if exchange.headers_seen:
                exchange.fail("bad_stream", f"response did not finish within {timeout_s:g}s", at)
            else:
                exchange.fail("timeout", f"no response within {timeout_s:g}s", at)
        elif isinstance(exc, StreamError):
            exchange.fail("bad_stream", str(exc))
        elif not exchange.headers_seen and isinstance(exc, (OSError, HTTPConnectionClosed, socket.error)):
            exchange.fail("connect", f"{type(exc).__name__}: {exc}")
        elif isinstance(exc, (OSError, HTTPParseError)):
            what = "connection closed mid-stream" if exchange.headers_seen else "invalid HTTP response"
            exchange.fail("bad_stream", f"{what}: {type(exc).__name__}: {exc}")
        else:
            log.debug("unexpected client failure", exc_info=exc)
            exchange.fail("bad_stream", f"{type(exc).__name__}: {exc}")

    def _finish(self, exchange: _Exchange, response: Any, payload: bytes, name: str | None,
                expect_error: bool | Expect, prompt_bytes: int | None, validate: Validator | None = None) -> Reply:
        if response is not None and not getattr(response, "message_complete", True):
            discard_connection(response)  # a half-read response cannot go back to the pool
        if exchange.finish_t is None:
            exchange.finish_t = time.time()
        record = _judged(exchange, expectation_of(expect_error))
        text, calls = "".join(exchange.parts), exchange.tool_calls()
        if validate is not None and record.error_class is None:
            record = _validated(record, validate, Answer(text, calls, exchange.finish_reason))
        if prompt_bytes is not None:
            self.context.token_ratio.observe(prompt_bytes, record.prompt_tokens)
        self._report(record, len(payload), name)
        return Reply(text, record, exchange.finish_reason, calls)

    def _report(self, record: RequestRecord, payload_bytes: int, name: str | None) -> None:
        fire_request_event(self.events, record, payload_bytes, name)
        self.context.on_record(record)


def _judged(exchange: _Exchange, expect: Expect | None) -> RequestRecord:
    """The record, with an expected 4xx marked as such and a success where a refusal was expected named a gap."""
    exchange.expected_error = expect is not None and exchange.error_class == "http_4xx"
    record = exchange.record()
    if expect is not None and record.error_class is None and not expect.accepts_success(record):
        record = dataclasses.replace(record, validation_gap=expect.name)
    return record


def _validated(record: RequestRecord, validate: Validator, answer: Answer) -> RequestRecord:
    """The record, an `invalid_output` error when the validator rejects the answer (quoted in the message)."""
    try:
        problem = validate(answer)
    except Exception as exc:  # a scenario's validator that breaks must not cost the request its record
        log.debug("validator failed", exc_info=exc)
        problem = f"the validator failed: {type(exc).__name__}: {exc}"
    if problem is None:
        return record
    return dataclasses.replace(record, error_class=INVALID_OUTPUT,
                               error_message=invalid_message(problem, answer)[:MAX_MESSAGE_CHARS])


def fire_request_event(events: Any, record: RequestRecord, payload_bytes: int, name: str | None) -> None:
    """Locust's request event for a finished request: timed from the intended send, our times in `context`."""
    failure = None
    if record.error_class not in (None, CANCELLED) and not record.expected_error:
        # Locust keeps one entry per distinct message for the whole run: keep them few.
        failure = Exception(f"{record.error_class} {record.status_code or ''}".strip())
    events.request.fire(
        request_type=record.kind, name=name or record.scenario, response_time=record.e2e_ms,
        response_length=payload_bytes, exception=failure, start_time=record.intended_t, url=None,
        response=None, context={"intended_t": record.intended_t, "sent_t": record.sent_t,
                                "first_token_t": record.first_token_t, "finish_t": record.finish_t,
                                "ttft_ms": record.ttft_ms, "error_class": record.error_class,
                                "queue_ms": record.queue_ms, "lag_ms": record.lag_ms})


def _generation(max_tokens: int | None, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"stream": stream}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _encode(body: bytes | str | dict[str, Any]) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    try:
        return orjson.dumps(body)
    except TypeError:  # what orjson refuses (an int beyond 64 bits, a subclass it does not know), json writes
        return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _parse_chunk(data: bytes) -> dict[str, Any]:
    try:
        chunk = orjson.loads(data)  # once per streamed token: several times faster than json
    except ValueError:
        raise StreamError(f"invalid JSON chunk: {data[:60]!r}") from None
    if not isinstance(chunk, dict):
        raise StreamError(f"chunk is not an object: {data[:60]!r}")
    if "error" in chunk:
        raise StreamError(f"error event in stream: {short_error(data)}")
    return chunk


def _apply_events(exchange: _Exchange, events: list[bytes], received_t: float, cancel_after: int | None) -> bool:
    """Apply the events one socket read completed, each timed at `received_t`; True at `[DONE]`.

    Raises `_Cancel` once `cancel_after` content chunks have arrived."""
    for data in events:
        if data.strip() == b"[DONE]":  # as before: whitespace around the marker is allowed
            exchange.done = True
            exchange.finish_t = received_t
            return True
        text = _chunk_text(exchange, _parse_chunk(data))
        if text or exchange.tool_delta:  # a tool call's fragment is output too: it times like content
            exchange.tool_delta = False
            exchange.content(text, received_t)
        if cancel_after is not None and exchange.chunks >= cancel_after:
            raise _Cancel()
    return False


def _apply_chunk(exchange: _Exchange, chunk: dict[str, Any], received_t: float | None = None) -> None:
    """Content (chat delta or completion text) is timed at `received_t` (else now); usage and finish reasons are
    kept."""
    text = _chunk_text(exchange, chunk)
    if text:
        exchange.content(text, time.time() if received_t is None else received_t)


def _chunk_text(exchange: _Exchange, chunk: dict[str, Any]) -> str:
    """A chunk's generated text (every choice's chat delta content and reasoning, or completion `text`); its usage
    and finish reasons are kept on the exchange. One call per streamed token, so kept flat."""
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        exchange.usage = usage
    text = ""
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            raise StreamError("malformed choice in chunk")
        delta = choice.get("delta")
        if delta and isinstance(delta, dict):
            for key in _CONTENT_KEYS:
                value = delta.get(key)
                if value:
                    text += str(value)
            calls = delta.get("tool_calls")
            if calls:
                exchange.tool_fragment(calls if isinstance(calls, list) else [calls])
        value = choice.get("text")
        if value:
            text += str(value)
        reason = choice.get("finish_reason")
        if reason:
            exchange.finish_reason = reason
    return text


def _wrong_type_message(response: Any, content_type: str) -> str:
    if "json" in content_type:
        body = response.read(MAX_ERROR_BODY_BYTES)
        return f"200 with an error body: {short_error(body)}"
    return f"wrong content-type {content_type or 'none'!r} for a stream"
