"""Records built by hand (`StoredRun`, `Event`, `Summary`, `SummaryFinding`), for tests of the code that reads them
without a database or a run."""

from __future__ import annotations

import json
from typing import Any

from soak.contracts import Event, Summary, SummaryFinding
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


def summary_finding(**fields: Any) -> SummaryFinding:
    """A finding as summary.json carries it: `fields` over an empty PASS of a check named "check"."""
    base: dict[str, Any] = {"check": "check", "verdict": "PASS", "value": None, "unit": "", "ci": None,
                            "threshold": None, "evidence": ""}
    return SummaryFinding.model_validate(base | fields)


def run_summary(**fields: Any) -> Summary:
    """A `Summary`: `fields` over a bare PASS of run r1 without requests; findings may be given as dicts of the
    fields they set (`summary_finding` fills the rest)."""
    none = {"p50": None, "p95": None, "p99": None, "count": 0}
    base: dict[str, Any] = {
        "run_id": "r1", "status": "completed", "started_at": "2026-01-01T00:00:00+00:00", "ended_at": None,
        "duration_s": None, "planned_duration_s": 600.0, "target": {"kind": "reference", "url": None, "model": None},
        "verdict": "PASS", "verdict_reason": "", "context": None, "report_html": None,
        "totals": {"requests": 0, "errors": 0, "error_rate": 0.0, "output_tokens": 0, "cancelled": 0,
                   "errors_by_class": dict.fromkeys(("connect", "timeout", "http_4xx", "http_5xx", "bad_stream"), 0)},
        "latency_ms": {"ttft": none, "itl": none, "e2e": none}}
    findings = [summary_finding(**f) if isinstance(f, dict) else f for f in fields.pop("findings", [])]
    return Summary.model_validate(base | fields | {"findings": findings})
