"""The golden-output canary: one fixed greedy request every `--canary-every`, whose answer must never change.

The first answer is the reference; every later one must be identical to it. Canaries are sent by the conductor on
their own connection, not by the dispatcher, so they are no part of the offered load: they land in no latency window
and no request count. They wait while an idle probe or an outage pause is in force, and a probe whose hold ends
while a canary is still in flight waits for it (`CanaryLoop.around_probe`), so the idle floor is read with nothing
running. Each answer is an event: `canary` (the reference, or a match), `canary_mismatch` (with the first difference),
`canary_timeout`, `canary_error`; the `canary` check judges them (docs/gates.md). Each carries soak's own request id,
and a canary the server refuses is handed to the log scan (`on_refused`): what the server logs refusing it is the
canary's answer, already judged here, not a second finding under `server.log_errors`.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.event import Event as GeventEvent

from soak.contracts import REQUEST_ID_HEADER, EventKind, EventSink, ProvokedExchange, soak_request_id
from soak.load.client import short_error

log = logging.getLogger(__name__)

CANARY_PROMPT = "Repeat after me, exactly: the quick brown fox jumps over the lazy dog, 0123456789."
CANARY_MAX_TOKENS = 32
CANARY_SEED = 1234
CANARY_TIMEOUT_S = 60.0  # or the run's request timeout when that is shorter
GATE_POLL_S = 0.5
SNIPPET_CHARS = 24
MAX_TEXT_CHARS = 2000


@dataclass(frozen=True)
class Answer:
    """One canary's outcome: the text, or why there is none (`timed_out`, `error`)."""

    text: str | None
    elapsed_s: float
    timed_out: bool = False
    error: str | None = None
    completion_tokens: int | None = None
    refusal: ProvokedExchange | None = None  # a 4xx: what the server logs for it is this canary's answer


def canary_body(model: str) -> dict[str, Any]:
    """The fixed request: greedy (temperature 0), seeded, the same prompt and length every time."""
    return {"model": model, "messages": [{"role": "user", "content": CANARY_PROMPT}], "max_tokens": CANARY_MAX_TOKENS,
            "temperature": 0.0, "top_p": 1.0, "seed": CANARY_SEED, "stream": False}


def ask(base_url: str, model: str, headers: dict[str, str], timeout_s: float) -> Answer:
    """Send one canary (non-streaming chat completion) and read its answer; never raises."""
    request_id = soak_request_id("canary", "golden")
    request = urllib.request.Request(base_url + "/v1/chat/completions", data=json.dumps(canary_body(model)).encode(),
                                     headers={"Content-Type": "application/json", **headers,
                                              REQUEST_ID_HEADER: request_id}, method="POST")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return _refused(exc, request_id, time.monotonic() - started)
    except TimeoutError as exc:
        return Answer(None, time.monotonic() - started, timed_out=True, error=str(exc) or "timed out")
    except urllib.error.URLError as exc:
        timed_out = isinstance(exc.reason, TimeoutError)
        return Answer(None, time.monotonic() - started, timed_out=timed_out, error=_describe(exc))
    except (OSError, ValueError) as exc:  # a reset connection, a body that is not JSON
        return Answer(None, time.monotonic() - started, error=f"{type(exc).__name__}: {exc}")
    return _answer_from(body, time.monotonic() - started)


def _refused(exc: urllib.error.HTTPError, request_id: str, elapsed_s: float) -> Answer:
    """An HTTP error answer; a 4xx carries the refusal, whose logged lines are the canary's, not a server fault."""
    try:
        message = short_error(exc.read())
    except OSError:
        message = ""
    refusal = None
    if 400 <= exc.code < 500 and message:
        refusal = ProvokedExchange(request_id, "a canary the server refused", message=message, noticed_t=time.time())
    return Answer(None, elapsed_s, error=f"HTTP {exc.code}: {message}" if message else f"HTTP {exc.code}",
                  refusal=refusal)


def _describe(exc: urllib.error.URLError) -> str:
    return f"{type(exc.reason).__name__}: {exc.reason}"


def _answer_from(body: Any, elapsed_s: float) -> Answer:
    try:
        text = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return Answer(None, elapsed_s, error="the answer has no choices[0].message.content")
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return Answer(text if isinstance(text, str) else str(text), elapsed_s, completion_tokens=tokens)


def first_difference(expected: str, got: str) -> dict[str, Any]:
    """Where two answers part: the character offset and a few characters of each from there."""
    offset = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    return {"offset": offset, "expected": expected[offset:offset + SNIPPET_CHARS], "got": got[offset:offset + SNIPPET_CHARS],
            "expected_chars": len(expected), "got_chars": len(got)}


class ProbeGate:
    """Whether the canary may send now: not while an idle probe runs nor while arrivals are paused (an outage).

    It learns both from the load's events; `watching(forward)` wraps the event hook so every event still goes on.
    """

    def __init__(self) -> None:
        self.probing = False
        self.paused = False

    def watching(self, forward: Callable[..., Any]) -> Callable[..., Any]:
        def hook(kind: str, message: str = "", data: dict[str, Any] | None = None) -> Any:
            self.observe(kind)
            return forward(kind, message, data)
        return hook

    def observe(self, kind: str) -> None:
        if kind in (EventKind.PROBE_START, EventKind.PROBE_END):
            self.probing = kind == EventKind.PROBE_START
        elif kind in (EventKind.LOAD_PAUSED, EventKind.LOAD_RESUMED):
            self.paused = kind == EventKind.LOAD_PAUSED

    @property
    def quiet(self) -> bool:
        return not (self.probing or self.paused)


class CanaryLoop:
    """Sends a canary every `every_s` (the first at once) from its own greenlet and records each outcome."""

    def __init__(self, send: Callable[[], Answer], recorder: EventSink, every_s: float, gate: ProbeGate,
                 on_refused: Callable[[ProvokedExchange], None] | None = None) -> None:
        self._send = send
        self._on_refused = on_refused
        self.recorder = recorder
        self.every_s = every_s
        self.gate = gate
        self.reference: str | None = None
        self.sent = 0
        self._idle = GeventEvent()
        self._idle.set()
        self._last_end = float("-inf")
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> CanaryLoop:
        self._greenlet = gevent.spawn(self._run)
        return self

    def stop(self) -> None:
        """Stop sending; a canary in flight is abandoned and not recorded."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=5.0)
            self._greenlet = None

    @property
    def in_flight(self) -> bool:
        return not self._idle.is_set()

    def _run(self) -> None:
        due = time.monotonic()
        while True:
            gevent.sleep(max(due - time.monotonic(), 0.0))
            while not self.gate.quiet:
                gevent.sleep(GATE_POLL_S)
            due = time.monotonic() + self.every_s
            self._idle.clear()
            try:
                answer = self._send()
            finally:
                self._idle.set()
                self._last_end = time.monotonic()
            if answer.refusal is not None and self._on_refused is not None:
                self._on_refused(answer.refusal)
            self.judge(answer)

    def judge(self, answer: Answer) -> None:
        """Record one answer against the reference (the first answer that came back is the reference)."""
        index, self.sent = self.sent, self.sent + 1
        data = {"index": index, "elapsed_s": round(answer.elapsed_s, 3), "completion_tokens": answer.completion_tokens}
        if answer.timed_out:
            self.recorder.event(EventKind.CANARY_TIMEOUT, f"canary {index}: no answer in {answer.elapsed_s:.1f}s", data)
        elif answer.text is None:
            self.recorder.event(EventKind.CANARY_ERROR, f"canary {index}: {answer.error}", {**data, "error": answer.error})
        elif self.reference is None:
            self.reference = answer.text
            self.recorder.event(EventKind.CANARY, f"canary {index}: reference answer ({len(answer.text)} chars)",
                                {**data, "reference": True, "text": answer.text[:MAX_TEXT_CHARS]})
        elif answer.text == self.reference:
            self.recorder.event(EventKind.CANARY, f"canary {index}: same answer as the reference",
                                {**data, "reference": False})
        else:
            diff = first_difference(self.reference, answer.text)
            self.recorder.event(EventKind.CANARY_MISMATCH, f"canary {index}: answer differs from the reference at "
                                f"character {diff['offset']}", {**data, **diff, "text": answer.text[:MAX_TEXT_CHARS]})

    def around_probe(self, reading: Callable[[int, bool], None], hold_s: float, timeout_s: float
                     ) -> Callable[[int, bool], None]:
        """The idle-probe hook, made to wait for a canary in flight and then hold again before `reading`."""
        def hook(index: int, drained: bool) -> None:
            if self.in_flight:
                self._idle.wait(timeout_s)
            settle_s = hold_s - (time.monotonic() - self._last_end)
            if settle_s > 0:
                gevent.sleep(settle_s)
            reading(index, drained)
        return hook


def start_canary(every_s: float, request_timeout_s: float, base_url: Callable[[], str], model: str,
                 headers: dict[str, str], recorder: EventSink, gate: ProbeGate,
                 on_refused: Callable[[ProvokedExchange], None] | None = None) -> CanaryLoop | None:
    """A running canary loop, or None when `every_s` is 0 (off). `base_url()` is read at each send (restarts);
    `on_refused` learns of each canary the server refused (the log scan, so its logged lines are not faults)."""
    if not every_s:
        return None
    timeout_s = min(request_timeout_s, CANARY_TIMEOUT_S)

    def send() -> Answer:
        return ask(base_url(), model, headers, timeout_s)
    return CanaryLoop(send, recorder, every_s, gate, on_refused).start()
