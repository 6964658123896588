"""`leak.kv`: the idle floor. After an idle probe's drain nothing may stay in the KV cache.

No statistics: KV blocks or running requests left after every client request has finished are a
leak by definition (vLLM #54947, #29906, #46502), so one residual reading is a FAIL. A probe whose drain
timed out is judged only when the engine ran nothing at the reading: waiting requests hold no KV blocks
(vLLM allocates at scheduling, and a preempted request gives its blocks back), so KV still in use then
belongs to no request — the very leak that starves the queue. Other timed-out probes are left to `hang`.
"""

from __future__ import annotations

from soak.analysis.findings import FAIL, PASS, Finding, inconclusive, skipped
from soak.analysis.fmt import duration_text
from soak.analysis.gates import Gates, KvGate
from soak.analysis.inputs import ProbeReading, RunData

CHECK = "leak.kv"


def check_kv(run: RunData, gates: Gates) -> Finding:
    if not run.probes_ran or not run.probes:
        return skipped(CHECK, "No idle probes ran, so the idle KV floor was not measured.",
                       probes_ran=run.probes_ran)
    drained = [p for p in run.probes if p.drained or _engine_idle(p)]
    readable = [p for p in drained if p.kv_usage is not None or p.running is not None]
    if not readable:
        why = ("every idle probe's drain timed out" if not drained
               else "the server exposes neither KV usage nor running requests")
        return inconclusive(CHECK, f"{len(run.probes)} idle probes ran but {why}.",
                            details={"probes_ran": True, "probes": len(run.probes)})
    residues = [p for p in readable if _residue(p, gates.leak.kv)]
    if residues:
        return _residue_finding(residues, readable, gates.leak.kv)
    return _clean_finding(readable, len(run.probes), gates.leak.kv)


def _engine_idle(probe: ProbeReading) -> bool:
    """Nothing running at the reading, so KV usage then is not held by any request."""
    return probe.running is not None and probe.running == 0 and probe.kv_usage is not None


def _residue(probe: ProbeReading, gate: KvGate) -> bool:
    kv_left = probe.kv_usage is not None and probe.kv_usage > gate.max_kv_usage
    running_left = probe.running is not None and probe.running > gate.max_running
    return kv_left or running_left


def _reading_text(probe: ProbeReading) -> str:
    kv = "n/a" if probe.kv_usage is None else f"{100 * probe.kv_usage:.2f} %"
    running = "n/a" if probe.running is None else f"{probe.running:g}"
    return f"KV usage {kv}, running {running} at {duration_text(probe.t_s)}"


def _max_kv(probes: list[ProbeReading]) -> float | None:
    values = [p.kv_usage for p in probes if p.kv_usage is not None]
    return max(values) if values else None


def _residue_finding(residues: list[ProbeReading], readable: list[ProbeReading], gate: KvGate) -> Finding:
    first = residues[0]
    return Finding(
        check=CHECK, verdict=FAIL, value=_max_kv(residues), unit="fraction of KV cache",
        threshold=gate.max_kv_usage,
        evidence=(f"After the idle-probe drain the server still held {_reading_text(first)} "
                  f"({len(residues)} of {len(readable)} judged probes left a residue"
                  f"{'; requests queued behind the held blocks' if any(not p.drained for p in residues) else ''})."),
        details={"probes_ran": True, "residues": [_reading_dict(p) for p in residues],
                 "probes": [_reading_dict(p) for p in readable]})


def _clean_finding(readable: list[ProbeReading], probes_run: int, gate: KvGate) -> Finding:
    max_kv = _max_kv(readable)
    seen = [] if max_kv is None else [f"max KV usage {100 * max_kv:.2f} %"]
    if any(p.running is not None for p in readable):
        seen.append("no running requests")
    return Finding(
        check=CHECK, verdict=PASS, value=max_kv, unit="fraction of KV cache", threshold=gate.max_kv_usage,
        evidence=(f"All {len(readable)} drained idle probes (of {probes_run}) returned to an empty "
                  f"server: {', '.join(seen)}."),
        details={"probes_ran": True, "probes": [_reading_dict(p) for p in readable]})


def _reading_dict(probe: ProbeReading) -> dict:
    return {"t_s": probe.t_s, "kv_usage": probe.kv_usage, "running": probe.running,
            "waiting": probe.waiting, "drained": probe.drained}
