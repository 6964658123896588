"""The overall verdict from the findings (docs/gates.md, "The overall verdict and `required`").

A run is PASS only when every required check is PASS. Otherwise the first that applies:

1. any FAIL → FAIL. A check a late client can distort is INVALID on a run whose client was INVALID
   (`saturation.scope_to_client`), so a FAIL here is one the client's lateness cannot explain — memory, fds, KV,
   crashes, the server's log, the canary's answers — and the reason says how late the client was beside it;
2. any INVALID → INVALID: the client was the bottleneck, so what it timed says nothing about the server;
3. a required check SUSPECT → SUSPECT: its estimate is over the threshold and the run could not prove it;
4. a required check INCONCLUSIVE, SKIPPED or missing → INCONCLUSIVE;
5. a run stopped early → INCONCLUSIVE: a PASS needs the planned duration (a stopped run keeps 1–4).

A check outside `required` fails the run with a FAIL but does not hold back a PASS with a SUSPECT or an
INCONCLUSIVE; its SUSPECT is named in the PASS's reason. `leak.vram` counts as required only when a GPU was
seen, `leak.kv` only when idle probes ran, `goodput.*` only when the run set an SLO.
"""

from __future__ import annotations

from soak.analysis.findings import Finding
from soak.analysis.gates import Gates
from soak.analysis.saturation import CHECK as SATURATION
from soak.analysis.saturation import lateness, scope_to_client
from soak.contracts import Verdict

MAX_EVIDENCE_CHARS = 240
MAX_NEXT_STEP_CHARS = 160
OPEN = (Verdict.INCONCLUSIVE, Verdict.SKIPPED)


def required_checks(findings: list[Finding], gates: Gates, gpu_seen: bool | None = None,
                    probes_ran: bool | None = None) -> list[str]:
    """gates.required, less leak.vram without a GPU, leak.kv without idle probes, goodput.* without an SLO and, on a
    replica observed behind a --router, the checks only its own load could judge.

    When gpu_seen/probes_ran are not given they are read from the leak findings' details.
    """
    by_check = {f.check: f for f in findings}
    if gpu_seen is None:
        gpu_seen = bool(by_check.get("leak.vram", Finding("leak.vram", Verdict.SKIPPED)).details.get("gpu_seen"))
    if probes_ran is None:
        probes_ran = bool(by_check.get("leak.kv", Finding("leak.kv", Verdict.SKIPPED)).details.get("probes_ran"))
    slo_set = any(f.details.get("slo_set") for f in findings if f.check.startswith("goodput."))
    conditions = {"leak.vram": gpu_seen, "leak.kv": probes_ran, "goodput.decay": slo_set, "goodput.floor": slo_set}
    observed = {f.check for f in findings if f.details.get("observe_only")}  # a replica behind a --router
    return [name for name in gates.required if conditions.get(name, True) and name not in observed]


def _cut(text: str, most: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"


def _line(finding: Finding, with_next_step: bool = False) -> str:
    """`check VERDICT: evidence`, and with `with_next_step` what would settle it."""
    line = f"{finding.check} {finding.verdict}: {_cut(finding.evidence, MAX_EVIDENCE_CHARS)}"
    if with_next_step and finding.next_step:
        line += f" — next: {_cut(finding.next_step, MAX_NEXT_STEP_CHARS)}"
    return line


def _first_of(hits: list[Finding], verdict: Verdict, with_next_step: bool = False) -> str | None:
    """The first finding's line, and how many more share its verdict."""
    if not hits:
        return None
    more = f" (+{len(hits) - 1} more {verdict}: {', '.join(f.check for f in hits[1:])})" if len(hits) > 1 else ""
    return _line(hits[0], with_next_step) + more


def _with(findings: list[Finding], verdict: Verdict) -> list[Finding]:
    return [f for f in findings if f.verdict == verdict]


def _client_late(findings: list[Finding]) -> Finding | None:
    """client.saturation when it found the client INVALID."""
    return next((f for f in findings if f.check == SATURATION and f.verdict == Verdict.INVALID), None)


def _fail_reason(findings: list[Finding]) -> str | None:
    """The first FAIL, with the client's lateness beside it when the client was late."""
    reason = _first_of(_with(findings, Verdict.FAIL), Verdict.FAIL)
    late = _client_late(findings)
    if reason is None or late is None:
        return reason
    distorted = [f.check for f in findings if f.verdict == Verdict.INVALID and f.check != SATURATION]
    unjudged = f"; {', '.join(distorted)} not judged" if distorted else ""
    return f"{reason}; the client was late ({lateness(late)}){unjudged}"


def _invalid_reason(findings: list[Finding], required: list[str]) -> str | None:
    """client.saturation's line first (it is why the others are INVALID), and any required SUSPECT."""
    hits = sorted(_with(findings, Verdict.INVALID), key=lambda f: f.check != SATURATION)
    reason = _first_of(hits, Verdict.INVALID)
    suspects = [f.check for f in findings if f.verdict == Verdict.SUSPECT and f.check in required]
    return reason and reason + (f"; also SUSPECT: {', '.join(suspects)}" if suspects else "")


def overall_verdict(findings: list[Finding], gates: Gates, stopped_early: bool = False, *,
                    gpu_seen: bool | None = None, probes_ran: bool | None = None) -> tuple[Verdict, str]:
    """(verdict, one-line reason). The findings are scoped to the client first (`scope_to_client`; findings
    that already are give the same answer)."""
    findings = scope_to_client(findings)
    early = "; the run was stopped early" if stopped_early else ""
    required = required_checks(findings, gates, gpu_seen, probes_ran)
    for verdict, reason in ((Verdict.FAIL, _fail_reason(findings)),
                            (Verdict.INVALID, _invalid_reason(findings, required))):
        if reason:
            return verdict, reason + early
    by_check = {f.check: f for f in findings}
    judged = [by_check[name] for name in required if name in by_check]
    suspect = _first_of(_with(judged, Verdict.SUSPECT), Verdict.SUSPECT, with_next_step=True)
    if suspect:
        return Verdict.SUSPECT, suspect + early
    missing = [name for name in required if name not in by_check]
    if missing:
        return Verdict.INCONCLUSIVE, f"required check {missing[0]} was not run"
    open_checks = [f for f in judged if f.verdict in OPEN]
    if open_checks:
        more = f" (+{len(open_checks) - 1} more)" if len(open_checks) > 1 else ""
        return Verdict.INCONCLUSIVE, _line(open_checks[0]) + more
    if stopped_early:
        return Verdict.INCONCLUSIVE, "the run was stopped early: a PASS needs the planned duration"
    return Verdict.PASS, _pass_reason(findings, required)


def _pass_reason(findings: list[Finding], required: list[str]) -> str:
    """`all N required checks PASS`, and the checks outside `required` that were SUSPECT."""
    suspects = [f.check for f in _with(findings, Verdict.SUSPECT) if f.check not in required]
    reason = f"all {len(required)} required checks PASS"
    return reason + (f"; SUSPECT (not required): {', '.join(suspects)}" if suspects else "")
