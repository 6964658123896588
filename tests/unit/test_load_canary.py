"""The canary loop: judging answers against the first, waiting out probes and pauses, and holding a probe for it."""

from __future__ import annotations

import time

import gevent

from soak.contracts import ProvokedExchange
from soak.load.canary import Answer, CanaryLoop, ProbeGate, canary_body, first_difference


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, dict]] = []

    def event(self, kind, message="", data=None):
        self.recorded.append((str(kind), data or {}))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.recorded]


def test_the_request_is_greedy_seeded_and_fixed():
    body = canary_body("m")
    assert body["temperature"] == 0 and body["seed"] == canary_body("m")["seed"] and body["stream"] is False
    assert body == canary_body("m") and body["max_tokens"] <= 64


def test_first_difference_names_the_offset_and_both_sides():
    assert first_difference("abcdef", "abXdef") == {"offset": 2, "expected": "cdef", "got": "Xdef",
                                                     "expected_chars": 6, "got_chars": 6}
    assert first_difference("abc", "abcd")["offset"] == 3  # one is a prefix of the other


def test_answers_are_judged_against_the_first_that_came_back():
    events = Events()
    loop = CanaryLoop(lambda: Answer("x", 0.0), events, 60.0, ProbeGate())
    for answer in (Answer(None, 1.0, error="HTTP 503"), Answer("same", 0.1), Answer("same", 0.1),
                   Answer("sane", 0.1), Answer(None, 60.0, timed_out=True)):
        loop.judge(answer)
    assert events.kinds() == ["canary_error", "canary", "canary", "canary_mismatch", "canary_timeout"]
    assert events.recorded[1][1]["reference"] is True and events.recorded[2][1]["reference"] is False
    assert events.recorded[3][1]["offset"] == 2 and events.recorded[3][1]["index"] == 3


def test_the_gate_follows_probes_and_pauses_and_forwards_every_event():
    gate, seen = ProbeGate(), []
    hook = gate.watching(lambda kind, message, data: seen.append(kind))
    for kind, quiet in (("probe_start", False), ("probe_drained", False), ("probe_end", True),
                        ("load_paused", False), ("load_resumed", True), ("phase", True)):
        hook(kind, "", {})
        assert gate.quiet is quiet, kind
    assert seen == ["probe_start", "probe_drained", "probe_end", "load_paused", "load_resumed", "phase"]


def test_no_canary_starts_during_a_probe():
    events, gate = Events(), ProbeGate()
    gate.observe("probe_start")
    loop = CanaryLoop(lambda: Answer("a", 0.0), events, 0.05, gate).start()
    gevent.sleep(0.3)
    assert loop.sent == 0
    gate.observe("probe_end")
    gevent.sleep(0.8)  # the gate is polled every 0.5 s
    loop.stop()
    assert loop.sent >= 2 and set(events.kinds()) == {"canary"}


def test_a_probe_waits_for_a_canary_in_flight_then_holds_again():
    def slow_answer() -> Answer:
        gevent.sleep(0.4)
        return Answer("a", 0.4)

    loop = CanaryLoop(slow_answer, Events(), 60.0, ProbeGate()).start()
    gevent.sleep(0.05)
    assert loop.in_flight
    readings = []
    hook = loop.around_probe(lambda index, drained: readings.append((index, drained, time.monotonic())), 0.2, 5.0)
    started = time.monotonic()
    hook(3, True)
    loop.stop()
    assert readings and readings[0][:2] == (3, True)
    assert readings[0][2] - started >= 0.5  # 0.35 s left of the canary, then a hold of 0.2 s


def test_a_refused_canary_is_handed_to_the_log_scan_before_it_is_judged():
    events, refusals = Events(), []
    refusal = ProvokedExchange("soak-canary-golden-1", "a canary the server refused", message="no such model here",
                               noticed_t=time.time())
    answers = iter([Answer(None, 0.1, error="HTTP 404: no such model here", refusal=refusal)])
    loop = CanaryLoop(lambda: next(answers, Answer("a", 0.0)), events, 60.0, ProbeGate(), refusals.append).start()
    deadline = time.monotonic() + 10
    while not events.recorded and time.monotonic() < deadline:
        gevent.sleep(0.01)
    loop.stop()
    assert refusals == [refusal] and events.kinds() == ["canary_error"]
