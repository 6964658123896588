"""`client.saturation`: was the load generator itself the bottleneck?

An open-loop client measures latency from the intended send time; if it cannot send on schedule,
the server was not offered the planned load and the run says nothing about it (INVALID).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from soak.analysis.findings import INVALID, PASS, SUSPECT, Finding, skipped
from soak.analysis.fmt import pct_text
from soak.analysis.gates import ClientGate, Gates
from soak.analysis.inputs import RunData


@dataclass(frozen=True)
class ClientLag:
    sends: int | None
    late_sends_1s: int | None
    lag_p99_ms: float | None
    lag_estimated: bool  # True when the run-level P99 came from window P99s

    @property
    def late_frac(self) -> float | None:
        if not self.sends or self.late_sends_1s is None:
            return None
        return self.late_sends_1s / self.sends


def client_lag(run: RunData) -> ClientLag:
    """Run-level schedule lag: the client's own totals, else sums over the request windows."""
    client, rows = run.client, run.request_windows
    sends = client.sends if client and client.sends is not None else _sum(r.sends for r in rows)
    late = (client.late_sends_1s if client and client.late_sends_1s is not None
            else _sum(r.late_sends_1s for r in rows))
    if client and client.lag_p99_ms is not None:
        return ClientLag(sends, late, client.lag_p99_ms, False)
    # Without a run-level histogram, the sends-weighted mean of window P99s stands in for it.
    pairs = [(r.lag_p99_ms, r.sends or 0) for r in rows if r.lag_p99_ms is not None]
    if not pairs:
        return ClientLag(sends, late, None, False)
    values = np.array([v for v, _ in pairs], dtype=float)
    weights = np.array([w for _, w in pairs], dtype=float)
    lag = float(np.average(values, weights=weights) if weights.sum() > 0 else values.mean())
    return ClientLag(sends, late, lag, True)


def _sum(values) -> int | None:
    known = [v for v in values if v is not None]
    return int(sum(known)) if known else None


def _cpu_p95(run: RunData) -> float | None:
    """A sustained client CPU figure: the 95th percentile of the samples (one spike is no evidence)."""
    if run.client is None or run.client.cpu_percent is None:
        return None
    cpu = run.client.cpu_percent[np.isfinite(run.client.cpu_percent)]
    return float(np.percentile(cpu, 95)) if cpu.size else None


def saturation_verdict(lag: ClientLag, cpu_p95: float | None, gate: ClientGate) -> tuple[str, list[str]]:
    """The verdict and the reasons for it, worst first."""
    reasons_invalid, reasons_suspect = [], []
    if lag.late_frac is not None and lag.late_frac > gate.late_frac_invalid:
        reasons_invalid.append(f"{pct_text(lag.late_frac, 2)} of sends were > 1 s late "
                               f"(limit {pct_text(gate.late_frac_invalid, 2)})")
    if lag.lag_p99_ms is not None and lag.lag_p99_ms > gate.lag_p99_invalid_ms:
        reasons_invalid.append(f"schedule-lag P99 {lag.lag_p99_ms:.1f} ms > {gate.lag_p99_invalid_ms:g} ms")
    elif lag.lag_p99_ms is not None and lag.lag_p99_ms > gate.lag_p99_suspect_ms:
        reasons_suspect.append(f"schedule-lag P99 {lag.lag_p99_ms:.1f} ms > {gate.lag_p99_suspect_ms:g} ms")
    if cpu_p95 is not None and cpu_p95 >= gate.cpu_suspect_percent:
        reasons_suspect.append(f"client CPU at {cpu_p95:.0f} % (95th percentile)")
    if reasons_invalid:
        return INVALID, reasons_invalid + reasons_suspect
    return (SUSPECT, reasons_suspect) if reasons_suspect else (PASS, [])


def lag_limits(gate: ClientGate) -> dict[str, float]:
    """The gate's lag limits, kept in the finding's details: the report's lag chart draws what the run was judged by."""
    return {"lag_p99_suspect_ms": gate.lag_p99_suspect_ms, "lag_p99_invalid_ms": gate.lag_p99_invalid_ms}


def check_saturation(run: RunData, gates: Gates) -> Finding:
    lag, cpu_p95 = client_lag(run), _cpu_p95(run)
    if lag.lag_p99_ms is None and lag.late_frac is None and cpu_p95 is None:
        return skipped("client.saturation", "No schedule-lag or client CPU measurements.", **lag_limits(gates.client))
    verdict, reasons = saturation_verdict(lag, cpu_p95, gates.client)
    details = {"sends": lag.sends, "late_sends_1s": lag.late_sends_1s, "late_frac": lag.late_frac,
               "lag_p99_ms": lag.lag_p99_ms, "lag_p99_estimated": lag.lag_estimated,
               "cpu_p95_percent": cpu_p95, **lag_limits(gates.client)}
    return Finding(check="client.saturation", verdict=verdict, value=lag.lag_p99_ms, unit="ms",
                   threshold=gates.client.lag_p99_invalid_ms,
                   evidence=_text(verdict, reasons, lag, cpu_p95), details=details)


def _text(verdict: str, reasons: list[str], lag: ClientLag, cpu_p95: float | None) -> str:
    if verdict == INVALID:
        return "The client was the bottleneck: " + "; ".join(reasons) + "."
    if verdict == SUSPECT:
        return "The client may have limited the load: " + "; ".join(reasons) + "."
    parts = []
    if lag.lag_p99_ms is not None:
        parts.append(f"schedule-lag P99 {lag.lag_p99_ms:.1f} ms")
    if lag.late_frac is not None:
        parts.append(f"{lag.late_sends_1s} of {lag.sends} sends > 1 s late")
    if cpu_p95 is not None:
        parts.append(f"client CPU {cpu_p95:.0f} % (95th percentile)")
    return "The client kept its schedule: " + ", ".join(parts) + "."
