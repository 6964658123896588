"""Store records built by hand (`StoredRun`, `Event`), for tests of the code that reads them without a database."""

from __future__ import annotations

import json
from typing import Any

from soak.contracts import Event
from soak.store.records import StoredRun


def stored_run(config: dict[str, Any] | None = None, environment: dict[str, Any] | None = None,
               **fields: Any) -> StoredRun:
    """A finished 10-minute run, with `fields` (and `config`/`environment`, encoded as stored) overriding."""
    base: dict[str, Any] = {"id": "r1", "status": "completed", "started_at": "2026-01-01T00:00:00+00:00",
                            "t0_epoch_s": 0.0, "planned_duration_s": 600.0, "warmup_s": 60.0, "window_s": 10.0,
                            "out_dir": "", "target_kind": "reference"}
    if config is not None:
        fields["config_json"] = json.dumps(config)
    if environment is not None:
        fields["environment_json"] = json.dumps(environment)
    merged = base | fields
    merged.setdefault("stored_status", merged["status"])
    return StoredRun(**merged)


def stored_event(t_s: float, kind: str, data: dict[str, Any] | None = None, message: str = "") -> Event:
    """An event as `Store.read_events` gives it back."""
    return Event(t_s=t_s, kind=kind, message=message, data=data or {})
