"""The outcome ledger groups failed requests by message and counts validation gaps; the summary reads its events."""

from __future__ import annotations

from typing import Any

from soak.contracts import Event
from soak.load.records import RequestRecord
from soak.run.ledger import MAX_GROUPS, OTHER_MESSAGE, OutcomeLedger
from soak.run.summary import error_messages, validation_gaps

CONTEXT_400 = "HTTP 400: request (1719 tokens) exceeds the available context size (1024 tokens)"


class EventList:
    """Events as `read_events` gives them back."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def event(self, kind: str, message: str = "", data: dict[str, Any] | None = None) -> None:
        self.events.append(Event(t_s=0.0, kind=kind, message=message, data=dict(data or {})))


def record(scenario: str = "mixed", error_class: str | None = None, message: str | None = None, status: int | None = None,
           expected: bool = False, gap: str | None = None, output_tokens: int = 16) -> RequestRecord:
    return RequestRecord(scenario=scenario, kind="chat", intended_t=0.0, sent_t=0.0, first_token_t=None, finish_t=1.0,
                         ttft_ms=None, e2e_ms=1000.0, itl_ms=(), queue_ms=0.0, lag_ms=0.0, output_tokens=output_tokens,
                         prompt_tokens=10, error_class=error_class, expected_error=expected, status_code=status,
                         error_message=message, validation_gap=gap)


def test_nine_context_errors_are_one_group_recorded_at_once_and_at_the_end():
    sink = EventList()
    ledger = OutcomeLedger(sink)
    for _ in range(9):
        ledger.add(record("long_tail", "http_4xx", CONTEXT_400, 400))
    assert [e.message for e in sink.events] == [f"1 × {CONTEXT_400}"]  # a killed run still names it
    ledger.close()
    assert sink.events[-1].message == f"9 × {CONTEXT_400}"
    [group] = error_messages(sink.events)
    assert (group.count, group.status_code, group.error_class, group.message, group.scenarios) == (
        9, 400, "http_4xx", CONTEXT_400, ["long_tail"])


def test_counts_are_recorded_at_1_10_100_and_the_end():
    sink = EventList()
    ledger = OutcomeLedger(sink)
    for _ in range(150):
        ledger.add(record(error_class="timeout", message="no response within 300s"))
    ledger.close()
    assert [e.data["count"] for e in sink.events] == [1, 10, 100, 150]
    assert error_messages(sink.events)[0].count == 150


def test_distinct_messages_beyond_the_cap_count_as_other():
    sink = EventList()
    ledger = OutcomeLedger(sink)
    for index in range(MAX_GROUPS + 5):
        ledger.add(record(error_class="http_5xx", message=f"HTTP 500: failure {index}", status=500))
    ledger.add(record(error_class="http_5xx", message="HTTP 500: failure 0", status=500))
    ledger.close()
    groups = error_messages(sink.events)
    assert len(groups) == MAX_GROUPS + 1
    assert groups[0].message == OTHER_MESSAGE and groups[0].count == 5 and groups[0].error_class == "other"
    assert sum(group.count for group in groups) == MAX_GROUPS + 6


def test_successes_cancels_and_expected_refusals_are_not_errors():
    sink = EventList()
    ledger = OutcomeLedger(sink)
    ledger.add(record())
    ledger.add(record(error_class="cancelled", message="client cancelled after 3 chunks"))
    ledger.add(record("bad_input", "http_4xx", "HTTP 400: messages must be a non-empty list", 400, expected=True))
    ledger.close()
    assert sink.events == []


def test_validation_gaps_are_grouped_by_scenario_and_expectation(caplog):
    sink = EventList()
    ledger = OutcomeLedger(sink)
    for tokens in (1500, 2000, 1800):
        ledger.add(record("bad_input", gap="max_tokens beyond the context: a 4xx", status=200, output_tokens=tokens))
    ledger.add(record("bad_input", gap="empty messages: a 4xx", status=200))
    ledger.close()
    gaps = validation_gaps(sink.events)
    assert [(g.count, g.expectation, g.max_output_tokens) for g in gaps] == [
        (3, "max_tokens beyond the context: a 4xx", 2000), (1, "empty messages: a 4xx", 16)]
    assert "validation gap: bad_input expected empty messages: a 4xx and got HTTP 200" in caplog.text
    assert "4 validation gap(s)" in caplog.text
    assert error_messages(sink.events) == []
