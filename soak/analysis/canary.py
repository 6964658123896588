"""`canary`: the golden-output canary's answers never changed (docs/gates.md).

Reads the events of soak.load.canary: `canary` (the reference answer, then each answer equal to it),
`canary_mismatch`, `canary_timeout` and `canary_error`. FAIL on any mismatch, and on two timeouts in a row (the
server left a short greedy request unanswered for a whole canary period); SUSPECT on a lone timeout; PASS once at
least `MIN_MATCHES` answers matched the reference; INCONCLUSIVE with fewer; SKIPPED when no canary answered.
Errors (an HTTP error, a refused connection) are counted but judge nothing: the error checks judge the server's errors.
A timeout during a network outage (the route to the server lost) judges nothing either: the server was out of reach.
"""

from __future__ import annotations

from typing import Any

from soak.analysis.findings import FAIL, PASS, SUSPECT, Finding, inconclusive, skipped
from soak.analysis.fmt import duration_text
from soak.analysis.gates import Gates
from soak.analysis.inputs import Event, RunData
from soak.analysis.liveness import in_network_outage

CHECK = "canary"
CANARY_KINDS = ("canary", "canary_mismatch", "canary_timeout", "canary_error")
MIN_MATCHES = 2  # answers after the reference that must equal it for a PASS
TIMEOUTS_IN_A_ROW_FAIL = 2


def check_canary(run: RunData, gates: Gates) -> Finding:
    """FAIL on a changed answer or timeouts in a row, SUSPECT on a lone timeout, PASS on ≥ 2 matches."""
    answers = [e for e in run.events if e.kind in CANARY_KINDS and not _out_of_reach(run, e)]
    if not answers:
        return skipped(CHECK, "No canary was sent (--canary-every 0, or the run ended before the first answer).")
    details = _details(answers)
    mismatches = [e for e in answers if e.kind == "canary_mismatch"]
    if mismatches:
        return _mismatch(mismatches, details)
    if details["timeouts_in_a_row"] >= TIMEOUTS_IN_A_ROW_FAIL:
        return Finding(check=CHECK, verdict=FAIL, value=details["timeouts"], unit="canaries", details=details,
                       evidence=f"{details['timeouts_in_a_row']} canaries in a row got no answer in time: the server "
                       "left a short greedy request unanswered for a whole canary period.")
    if details["timeouts"]:
        return Finding(check=CHECK, verdict=SUSPECT, value=details["timeouts"], unit="canaries", details=details,
                       evidence=f"{details['timeouts']} canary timed out (never twice in a row); "
                       f"{details['matches']} answers matched the reference.")
    return _matches(details)


def _matches(details: dict[str, Any]) -> Finding:
    matches = details["matches"]
    if matches >= MIN_MATCHES:
        return Finding(check=CHECK, verdict=PASS, value=0, unit="mismatches", details=details,
                       evidence=f"All {matches} canaries after the first gave the reference answer, character for "
                       "character.")
    why = f"; {details['errors']} failed: {details['first_error']}" if details["errors"] else ""
    ran = f"{details['sent']} canar{'y' if details['sent'] == 1 else 'ies'} ran"
    return inconclusive(CHECK, f"{ran}; {matches} after the reference matched it, and a "
                        f"PASS needs {MIN_MATCHES} (send them more often with --canary-every){why}.", details=details)


def _mismatch(mismatches: list[Event], details: dict[str, Any]) -> Finding:
    first = mismatches[0].data
    evidence = (f"{len(mismatches)} canary answer(s) differ from the reference; the first, "
                f"{duration_text(mismatches[0].t_s)} into the run, at character {first.get('offset')}: expected "
                f"{first.get('expected')!r}, got {first.get('got')!r}.")
    return Finding(check=CHECK, verdict=FAIL, value=len(mismatches), unit="mismatches", evidence=evidence,
                   details={**details, "first_mismatch": {"t_s": mismatches[0].t_s, **first}})


def _out_of_reach(run: RunData, event: Event) -> bool:
    """A canary that timed out while a network outage overlapped it."""
    sent_s = event.t_s - float(event.data.get("elapsed_s") or 0.0)
    return event.kind == "canary_timeout" and in_network_outage(run, sent_s, event.t_s)


def _details(answers: list[Event]) -> dict[str, Any]:
    """Counts of each outcome, the longest run of timeouts, the reference answer and the first error."""
    kinds = [e.kind for e in answers]
    reference = next((e for e in answers if e.kind == "canary" and e.data.get("reference")), None)
    errors = [e for e in answers if e.kind == "canary_error"]
    return {
        "sent": len(answers), "matches": sum(1 for e in answers if e.kind == "canary" and not e.data.get("reference")),
        "mismatches": kinds.count("canary_mismatch"), "timeouts": kinds.count("canary_timeout"),
        "errors": len(errors), "timeouts_in_a_row": _longest_run(kinds, "canary_timeout"),
        "reference": None if reference is None else {"t_s": reference.t_s, "text": reference.data.get("text")},
        "first_error": errors[0].data.get("error") if errors else None,
    }


def _longest_run(kinds: list[str], kind: str) -> int:
    longest = current = 0
    for each in kinds:
        current = current + 1 if each == kind else 0
        longest = max(longest, current)
    return longest
