"""The overall verdict from the findings (docs/gates.md, "The overall verdict and `required`").

First that applies: any INVALID → INVALID; any FAIL → FAIL; a required check INCONCLUSIVE, SKIPPED
or missing → INCONCLUSIVE; else PASS. SUSPECT never fails a run. A run stopped early keeps a FAIL
(or INVALID/INCONCLUSIVE), but a PASS becomes INCONCLUSIVE: it did not run its planned time.
`leak.vram` counts as required only when a GPU was seen, `leak.kv` only when idle probes ran.
"""

from __future__ import annotations

from soak.analysis.findings import Finding
from soak.analysis.gates import Gates
from soak.contracts import Verdict

MAX_EVIDENCE_CHARS = 240


def required_checks(findings: list[Finding], gates: Gates, gpu_seen: bool | None = None,
                    probes_ran: bool | None = None) -> list[str]:
    """gates.required, less leak.vram without a GPU and leak.kv without idle probes.

    When gpu_seen/probes_ran are not given they are read from the leak findings' details.
    """
    by_check = {f.check: f for f in findings}
    if gpu_seen is None:
        gpu_seen = bool(by_check.get("leak.vram", Finding("leak.vram", Verdict.SKIPPED)).details.get("gpu_seen"))
    if probes_ran is None:
        probes_ran = bool(by_check.get("leak.kv", Finding("leak.kv", Verdict.SKIPPED)).details.get("probes_ran"))
    conditions = {"leak.vram": gpu_seen, "leak.kv": probes_ran}
    return [name for name in gates.required if conditions.get(name, True)]


def _line(finding: Finding) -> str:
    evidence = " ".join(finding.evidence.split())
    if len(evidence) > MAX_EVIDENCE_CHARS:
        evidence = evidence[: MAX_EVIDENCE_CHARS - 1] + "…"
    return f"{finding.check} {finding.verdict}: {evidence}"


def _first_with(findings: list[Finding], verdict: Verdict) -> str | None:
    hits = [f for f in findings if f.verdict == verdict]
    if not hits:
        return None
    more = f" (+{len(hits) - 1} more {verdict}: {', '.join(f.check for f in hits[1:])})" if len(hits) > 1 else ""
    return _line(hits[0]) + more


def overall_verdict(findings: list[Finding], gates: Gates, stopped_early: bool = False, *,
                    gpu_seen: bool | None = None, probes_ran: bool | None = None) -> tuple[Verdict, str]:
    """(verdict, one-line reason)."""
    for verdict in (Verdict.INVALID, Verdict.FAIL):
        reason = _first_with(findings, verdict)
        if reason:
            return verdict, reason + ("; the run was stopped early" if stopped_early else "")
    by_check = {f.check: f for f in findings}
    required = required_checks(findings, gates, gpu_seen, probes_ran)
    missing = [name for name in required if name not in by_check]
    if missing:
        return Verdict.INCONCLUSIVE, f"required check {missing[0]} was not run"
    open_checks = [by_check[n] for n in required if by_check[n].verdict in (Verdict.INCONCLUSIVE, Verdict.SKIPPED)]
    if open_checks:
        more = f" (+{len(open_checks) - 1} more)" if len(open_checks) > 1 else ""
        return Verdict.INCONCLUSIVE, _line(open_checks[0]) + more
    if stopped_early:
        return Verdict.INCONCLUSIVE, "the run was stopped early: a PASS needs the planned duration"
    suspects = [f.check for f in findings if f.verdict == Verdict.SUSPECT]
    reason = f"all {len(required)} required checks PASS"
    return Verdict.PASS, reason + (f"; SUSPECT: {', '.join(suspects)}" if suspects else "")
