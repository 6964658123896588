"""The outcome ledger: failed requests grouped by their exact (truncated, scrubbed) message, and validation gaps.

The conductor hands it every finished request. A group's first request records an event at once (so a run that
is killed still names its errors), again when its count reaches 10, 100, 1000…, and once more at the end with
the final count; readers take each group's largest count (`soak/run/summary.py`).

- `error_message`: a real error (neither a deliberate cancel nor an expected 4xx), grouped by its message, e.g.
  "HTTP 400: request (1719 tokens) exceeds the available context size (1024 tokens)". At most MAX_GROUPS
  distinct messages; later new ones count in one `other` group.
- `validation_gap`: a 200 where the scenario expected a refusal (`soak.load.client.Expect`), grouped by scenario
  and expectation (beyond MAX_GROUPS expectations, under OTHER_MESSAGE).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from soak.contracts import EventKind, EventSink
from soak.load.records import RequestRecord

log = logging.getLogger(__name__)

MAX_GROUPS = 20
OTHER_CLASS = "other"
OTHER_MESSAGE = f"(further messages, beyond the first {MAX_GROUPS} distinct ones)"


@dataclass
class _Group:
    """One distinct message (or expectation): how often, and the count last recorded."""

    data: dict[str, Any]
    count: int = 0
    recorded: int = 0
    scenarios: set[str] = field(default_factory=set)

    def add(self, record: RequestRecord) -> bool:
        """Count one request; True when the count is one to record now (1, 10, 100, …)."""
        self.count += 1
        self.scenarios.add(record.scenario)
        return self.count == 1 or str(self.count).strip("0") == "1"

    def snapshot(self) -> dict[str, Any]:
        self.recorded = self.count
        return {**self.data, "count": self.count, "scenarios": sorted(self.scenarios)}


def error_text(data: dict[str, Any]) -> str:
    """"9 × HTTP 400: …" for the log and the report."""
    return f"{data['count']} × {data['message']}"


def gap_text(data: dict[str, Any]) -> str:
    """"27 × bad_input: expected <expectation>; got HTTP 200 (at most N output tokens)"."""
    got = f"HTTP {data.get('status_code') or 200}"
    if data.get("max_output_tokens") is not None:
        got += f" ({data['max_output_tokens']} output tokens at most)"
    return f"{data['count']} × {data['scenario']}: expected {data['expectation']}; got {got}"


class OutcomeLedger:
    """Groups error messages and validation gaps of a run's requests and records them as events."""

    def __init__(self, sink: EventSink, max_groups: int = MAX_GROUPS) -> None:
        self.sink = sink
        self.max_groups = max_groups
        self.errors: dict[str, _Group] = {}
        self.gaps: dict[tuple[str, str], _Group] = {}

    def add(self, record: RequestRecord) -> None:
        """Count one finished request (anything but a real error or a validation gap is ignored)."""
        if record.is_error:
            self._add_error(record)
        elif record.validation_gap:
            self._add_gap(record)

    def close(self) -> None:
        """Record every group's final count (those whose count changed since last recorded)."""
        for group in self.errors.values():
            if group.count != group.recorded:
                self._record_error(group)
        for group in self.gaps.values():
            if group.count != group.recorded:
                self._record_gap(group)
        if self.gaps:
            total = sum(group.count for group in self.gaps.values())
            log.warning("%d validation gap(s): the server answered 200 where a refusal was expected", total)

    def _add_error(self, record: RequestRecord) -> None:
        message = record.error_message or record.error_class or "error"
        group = self.errors.get(message)
        if group is None and len(self.errors) >= self.max_groups:
            message = OTHER_MESSAGE
            group = self.errors.get(message)
            if group is None:
                group = self.errors[message] = _Group({"error_class": OTHER_CLASS, "status_code": None,
                                                       "message": OTHER_MESSAGE})
        elif group is None:
            group = self.errors[message] = _Group({"error_class": record.error_class,
                                                   "status_code": record.status_code, "message": message})
        if group.add(record):
            self._record_error(group)

    def _add_gap(self, record: RequestRecord) -> None:
        key = (record.scenario, str(record.validation_gap))
        if key not in self.gaps and len(self.gaps) >= self.max_groups:
            key = (record.scenario, OTHER_MESSAGE)
        group = self.gaps.get(key)
        if group is None:
            group = self.gaps[key] = _Group({"scenario": key[0], "expectation": key[1],
                                             "status_code": record.status_code, "max_output_tokens": None})
            log.warning("validation gap: %s expected %s and got HTTP %s", key[0], key[1], record.status_code or 200)
        most = group.data["max_output_tokens"]
        group.data["max_output_tokens"] = max(most or 0, record.output_tokens)
        if group.add(record):
            self._record_gap(group)

    def _record_error(self, group: _Group) -> None:
        data = group.snapshot()
        self.sink.event(EventKind.ERROR_MESSAGE, error_text(data), data)

    def _record_gap(self, group: _Group) -> None:
        data = group.snapshot()
        self.sink.event(EventKind.VALIDATION_GAP, gap_text(data), data)
