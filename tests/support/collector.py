"""A stand-in for the run's recorder in telemetry tests: keeps the samples and events telemetry records."""

from __future__ import annotations

import time

from soak.contracts import EventKind


class Collector:
    """Keeps what telemetry records, in place of the database writer."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.samples_by_type: dict[type, list] = {}
        self.events: list[tuple[str, str, dict]] = []

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def samples(self, samples: list, t_s: float | None = None) -> None:
        for sample in samples:
            self.samples_by_type.setdefault(type(sample), []).append(sample)

    def samples_of(self, kind: type) -> list:
        """The samples of one record type, in the order telemetry recorded them."""
        return self.samples_by_type.get(kind, [])

    def event(self, kind: str, message: str = "", data: dict | None = None) -> None:
        self.events.append((kind, message, data or {}))

    def dialect_events(self) -> list[dict]:
        return [data for kind, _, data in self.events if kind == EventKind.SERVER_DIALECT]

    def events_of(self, kind: str) -> list[dict]:
        """The data of every event of one kind, in the order it was recorded."""
        return [data for recorded, _, data in self.events if recorded == kind]
