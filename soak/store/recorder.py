"""The run's recorder: stamps samples, windows, kept requests and events with the run id (samples and events with
the time since start too), and queues them."""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from soak.contracts import RecordObserver
from soak.samples import KeptRequest, Sample, Window
from soak.store.models import EventRow
from soak.store.writer import StoreWriter

log = logging.getLogger(__name__)


def new_run_id(now: datetime | None = None) -> str:
    """Run ids sort by time: UTC start plus a short random suffix, e.g. 20261202T101500Z-3f9a."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


def utc_now_iso() -> str:
    """Now as ISO-8601 UTC."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def utc_iso(epoch_s: float) -> str:
    """A Unix time as ISO-8601 UTC."""
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds")


class Recorder:
    """What every stage of a run writes through; one per run, sharing the process's single writer."""

    def __init__(self, writer: StoreWriter, run_id: str, t0_epoch_s: float):
        self.writer = writer
        self.run_id = run_id
        self.t0_epoch_s = t0_epoch_s
        self.observers: list[RecordObserver] = []  # told of each sample round and event as it is queued

    def _tell(self, method: str, *args: Any) -> None:
        """Hand a record to the observers; one that fails is logged, never in the way of the row."""
        for observer in self.observers:
            try:
                getattr(observer, method)(*args)
            except Exception:
                log.exception("record observer %s failed on %s", type(observer).__name__, method)

    def elapsed_s(self) -> float:
        """Seconds since the run started, by the wall clock (what analysis windows use)."""
        return time.time() - self.t0_epoch_s

    def event(self, kind: str, message: str = "", data: dict[str, Any] | None = None, t_s: float | None = None) -> None:
        """Record an event now (or one that happened at `t_s` seconds after the start), with optional data."""
        log.info("event %s: %s", kind, message)
        at = utc_now_iso() if t_s is None else utc_iso(self.t0_epoch_s + t_s)
        self.writer.insert(EventRow, {
            "run_id": self.run_id, "t_s": self.elapsed_s() if t_s is None else t_s, "at": at, "kind": kind,
            "message": message, "data_json": json.dumps(data, default=str) if data else None,
        })
        self._tell("event", kind)

    def samples(self, samples: Iterable[Sample], t_s: float | None = None) -> None:
        """Queue samples taken at `t_s` (seconds since start; now when None)."""
        t_s = self.elapsed_s() if t_s is None else t_s
        samples = list(samples)
        for sample in samples:
            self.writer.insert_sample(self.run_id, t_s, sample)
        self._tell("samples", samples, t_s)

    def windows(self, windows: Iterable[Window]) -> None:
        """Queue windows, each replacing the one stored before it (a partial window grows until it closes)."""
        for window in windows:
            self.writer.upsert_window(self.run_id, window)

    def request(self, request: KeptRequest) -> None:
        """Queue one kept request (--keep-requests)."""
        self.writer.insert_request(self.run_id, request)

    def update_run(self, **fields: Any) -> None:
        """Queue an update of this run's row."""
        self.writer.update_run(self.run_id, **fields)
