"""What kind of server a run measured, and what its /metrics left unmeasured, read from the run's events.

Telemetry records the server's dialect once (`server_dialect`: forced by --server-kind or detected) with the
readings that dialect never exposes, and which server processes it samples (`server_processes`). Checks whose
input is missing say so by name; the summary and the report list what was not measured.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from soak.analysis.inputs import Event, RunData
from soak.contracts import EventKind

DIALECT_EVENTS = (EventKind.SERVER_DIALECT,)
PROCESS_EVENTS = (EventKind.SERVER_PROCESSES,)
KV_USAGE = "KV-cache usage"
RUNNING = "running requests"


def _last_data(events: Iterable[Event], kinds: tuple[str, ...]) -> Mapping[str, Any] | None:
    found = [e.data for e in events if e.kind in kinds]
    return found[-1] if found else None


def dialect_data(run: RunData) -> Mapping[str, Any] | None:
    """The `server_dialect` event's data: dialect, server, source, not_measured; None when none was recorded."""
    return _last_data(run.events, DIALECT_EVENTS)


def server_name(run: RunData) -> str:
    """The server as the dialect names it ("llama.cpp llama-server"), or "the server" when unknown."""
    data = dialect_data(run)
    return str(data["server"]) if data and data.get("server") else "the server"


def lacks(run: RunData, reading: str) -> bool:
    """Whether the run's server never exposes `reading` (one of the dialect's phrases, e.g. KV_USAGE)."""
    data = dialect_data(run)
    return bool(data) and reading in (data.get("not_measured") or [])


def tokens_at_finish(run: RunData) -> bool:
    """Whether the server's generation-token counter moves only when a request finishes (SGLang, TGI, Triton)."""
    data = dialect_data(run)
    return bool(data and data.get("tokens_at_finish"))


def not_measured(events: Iterable[Event]) -> list[str]:
    """One line per thing the server did not let soak measure: each gauge its dialect lacks, and its processes
    when none could be seen."""
    events = list(events)
    lines = []
    dialect = _last_data(events, DIALECT_EVENTS)
    if dialect:
        server = dialect.get("server") or dialect.get("dialect")
        lines += [f"{reading} ({server} exposes no such series on /metrics)"
                  for reading in dialect.get("not_measured") or []]
    processes = _last_data(events, PROCESS_EVENTS)
    if processes is not None and not processes.get("pids"):
        lines.append("server processes: none could be seen from soak's host, so memory and open files come only "
                     "from /metrics process_* series if served (pass --server-pid PID)")
    return lines
