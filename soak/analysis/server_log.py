"""`server.log_errors`: what the server wrote to its log (docs/gates.md).

Reads the `server_log_error` events the scan recorded (soak.telemetry.server_log) and the `server_log_scanned`
events that say a log was scanned at all. FAIL on a fatal class (an out-of-memory kill, EngineDeadError, a CUDA
error, a server's own fatal line), SUSPECT on tracebacks and NaN/inf warnings, PASS when a log was scanned and had
neither, SKIPPED when no log was scanned. Lines the server wrote answering a request soak sent to be refused (a
capability probe: `server_log_provoked` events) are that request's answer, never judged; the details count them.
"""

from __future__ import annotations

from typing import Any

from soak.analysis.findings import FAIL, PASS, SUSPECT, Finding, skipped
from soak.analysis.fmt import duration_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event, RunData
from soak.contracts import EventKind, ServerLogClass

CHECK = "server.log_errors"
FATAL_CLASSES = frozenset({ServerLogClass.OOM, ServerLogClass.ENGINE_DEAD, ServerLogClass.CUDA_ERROR,
                           ServerLogClass.FATAL})
LINES_SHOWN = 5  # matched lines kept in the finding's details


def check_log_errors(run: RunData, gates: Gates) -> Finding:
    """FAIL on fatal lines, SUSPECT on tracebacks/NaN warnings, PASS on a clean scanned log, else SKIPPED."""
    errors = [e for e in run.events if e.kind == EventKind.SERVER_LOG_ERROR]
    scans = [e for e in run.events if e.kind == EventKind.SERVER_LOG_SCANNED]
    if not errors and not scans:
        return skipped(CHECK, "No server log was scanned: soak scans the log of a server it starts; for a server it "
                       "did not start, pass --server-log FILE.", scanned=False)
    provoked = [e for e in run.events if e.kind == EventKind.SERVER_LOG_PROVOKED]
    details = _details(errors, scans, provoked)
    fatal = [e for e in errors if _log_class(e) in FATAL_CLASSES]
    if fatal:
        return _finding(FAIL, fatal, details, "fatal")
    if errors:
        return _finding(SUSPECT, errors, details, "suspicious")
    scanned = f" ({details['lines']} lines)" if details["lines"] is not None else ""
    return Finding(check=CHECK, verdict=PASS, value=0, unit="lines", details=details,
                   evidence=f"The server log{scanned} has no fatal line, traceback or NaN/inf warning"
                            f"{_provoked_text(details)}.")


def _provoked_text(details: dict[str, Any]) -> str:
    """What the log says only because soak asked for a refusal, in a clause."""
    if not details["provoked_lines"]:
        return ""
    return (f" of its own ({details['provoked_lines']} matched line(s) were the server's answer to requests soak sent "
            f"to be refused: {', '.join(details['provoked_answers'])}; not judged)")


def _log_class(event: Event) -> str:
    return str(event.data.get("class", ""))


def _finding(verdict: Any, hits: list[Event], details: dict[str, Any], what: str) -> Finding:
    first = hits[0]
    line = str(first.data.get("exception") or first.data.get("line") or first.message).strip()
    classes = sorted({_log_class(e) for e in hits})
    evidence = (f"{len(hits)} {what} line(s) in the server log ({', '.join(classes)}); the first "
                f"{duration_text(first.t_s)} into the run: {line[:200]}")
    return Finding(check=CHECK, verdict=verdict, value=len(hits), unit="lines", evidence=evidence, details=details)


def _details(errors: list[Event], scans: list[Event], provoked: list[Event]) -> dict[str, Any]:
    """Counts per class, the first few lines with their context, what the scan saw and held back, and the lines
    that answered soak's own requests for a refusal."""
    end = next((e.data for e in reversed(scans) if e.data.get("phase") == "end"), {})
    by_class: dict[str, int] = {}
    for event in errors:
        by_class[_log_class(event)] = by_class.get(_log_class(event), 0) + 1
    return {
        "scanned": bool(scans), "path": next((e.data.get("path") for e in scans), None),
        "lines": end.get("lines"), "matched": end.get("matched"), "held_back": end.get("suppressed"),
        "recorded_by_class": by_class,
        "first_lines": [{"t_s": e.t_s, "class": _log_class(e), "line": e.data.get("line"),
                         "exception": e.data.get("exception"), "before": e.data.get("before"),
                         "after": e.data.get("after")} for e in errors[:LINES_SHOWN]],
        "provoked": [{"t_s": e.t_s, "class": _log_class(e), "request_id": e.data.get("request_id"),
                      "answer_to": e.data.get("answer_to"), "exception": e.data.get("exception") or e.data.get("line")}
                     for e in provoked[:LINES_SHOWN]],
        # Past the scan's cap on events, only its totals count the provoked lines.
        "provoked_lines": max(len(provoked), end.get("provoked") or 0),
        "provoked_answers": sorted({str(e.data.get("answer_to")) for e in provoked}),
    }
