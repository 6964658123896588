"""`client.saturation`: was the load generator itself the bottleneck?

An open-loop client measures latency from the intended send time; if it cannot send on schedule,
the server was not offered the planned load and the run says nothing about it (INVALID). Lateness on the
receiving side counts as much: a client whose event loop wakes late stamps every reply late, and its
latencies read high by that much (the loop lag, `loop_lag_p99_ms`).

A late client distorts only what it times or offers: `CLIENT_REACH` says, check by check, whether its lateness
can reach it, and `scope_to_client` turns those checks INVALID on a run whose client was INVALID. What the
server's processes, gauges, log and answers showed keeps its verdict (docs/gates.md, "When the client is late").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from soak.analysis.findings import FAIL, INVALID, PASS, SKIPPED, SUSPECT, Finding, skipped
from soak.analysis.fmt import pct_text
from soak.analysis.gates import ClientGate, Gates
from soak.analysis.inputs import RunData

# Client CPU samples left out at each end: the first covers soak's own start-up (the sampler's first reading,
# then importing and starting the load), the ones after the planned end cover the drain and the stop.
STARTUP_SAMPLES = 2
CHECK = "client.saturation"


@dataclass(frozen=True)
class Reach:
    """Whether a late client can distort a check, and why (the sentence docs/gates.md and the finding give)."""

    distorted: bool
    why: str


# Every check, by whether the client's lateness reaches it. A late client offers less than planned and stamps
# every reply late by its own delay; it does not change what the OS, the server's gauges or its log record.
CLIENT_REACH: dict[str, Reach] = {
    "leak.rss": Reach(False, "the server's memory is read from the OS"),
    "leak.vram": Reach(False, "the server's GPU memory is read from the driver"),
    "leak.kv": Reach(False, "the KV floor is the server's own gauge, read at rest"),
    "leak.fds": Reach(False, "the server's open files are read from the OS"),
    "creep.ttft_p99": Reach(True, "latency is timed by the client from the intended send time"),
    "creep.itl_p99": Reach(True, "the gap between chunks is timed by the client as it reads them"),
    "creep.server_itl": Reach(False, "the time between tokens is the server's own histogram"),
    "creep.e2e_p99": Reach(True, "latency is timed by the client from the intended send time"),
    "errors.rise": Reach(False, "errors are what the server answered (status codes, broken streams)"),
    "errors.budget": Reach(False, "errors are what the server answered (status codes, broken streams)"),
    "errors.bursts": Reach(False, "errors are what the server answered (status codes, broken streams)"),
    "errors.invalid_output": Reach(False, "an answer's validity is what the server said, not when"),
    "hang": Reach(True, "idle-probe drains are timed by the client; a stall on the server's own gauges "
                        "(requests running, no new tokens) keeps its FAIL"),
    "crashes": Reach(False, "a server exit is seen by the OS"),
    "gpu.xid": Reach(False, "XIDs are the GPU driver's own (NVML or dcgm-exporter)"),
    "gpu.ecc": Reach(False, "ECC and row-remap counters are the GPU driver's own"),
    "throughput.decay": Reach(True, "a late client offers less than planned, so the tokens follow the client"),
    "goodput.decay": Reach(True, "a request meets its SLO on latency the client timed"),
    "goodput.floor": Reach(True, "a request meets its SLO on latency the client timed"),
    "server.log_errors": Reach(False, "the lines are the server's own log"),
    "canary": Reach(False, "the canary judges what the server answered, not when"),
    "baseline.regression": Reach(True, "it compares latency and throughput with the baseline's"),
}


# What settles a check the late client voided (client.saturation's own next step says how to keep up).
RERUN_STEP = "judge it again on a run whose client keeps its schedule: see client.saturation's next step"


# Evidence a distorted check may still hold that no client's lateness explains: a hang seen on the server's
# own gauges (requests running while its generated-token counter stood still) is the server's.
SERVER_EVIDENCE: dict[str, Callable[[Finding], bool]] = {
    "hang": lambda finding: finding.verdict == FAIL and bool((finding.details or {}).get("stalls")),
}


def client_sensitive(check: str) -> bool:
    """Whether a late client can distort `check` (`CLIENT_REACH`; a check it does not name keeps its verdict)."""
    reach = CLIENT_REACH.get(check)
    return bool(reach and reach.distorted)


def voided_by_late_client(finding: Finding) -> bool:
    """Whether a late client voids `finding`: its check can be distorted, it judged something, and it does not
    rest on the server's own evidence (`SERVER_EVIDENCE`)."""
    if not client_sensitive(finding.check) or finding.verdict in (SKIPPED, INVALID):
        return False
    keeps = SERVER_EVIDENCE.get(finding.check)
    return not (keeps and keeps(finding))


@dataclass(frozen=True)
class ClientLag:
    sends: int | None
    late_sends_1s: int | None
    lag_p99_ms: float | None
    lag_estimated: bool  # True when the run-level P99 came from window P99s
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None

    @property
    def late_frac(self) -> float | None:
        if not self.sends or self.late_sends_1s is None:
            return None
        return self.late_sends_1s / self.sends


@dataclass(frozen=True)
class Reading:
    """One figure the check judges and the limits it is held to: above `invalid` INVALID, above `suspect`
    SUSPECT (at or above, with `inclusive`). `unit` is "ms", "%" or "fraction"."""

    label: str
    value: float
    unit: str
    suspect: float | None = None
    invalid: float | None = None
    inclusive: bool = False

    def _over(self, limit: float | None) -> bool:
        return limit is not None and (self.value >= limit if self.inclusive else self.value > limit)

    @property
    def level(self) -> str:
        if self._over(self.invalid):
            return INVALID
        return SUSPECT if self._over(self.suspect) else PASS

    @property
    def crossed(self) -> float | None:
        """The limit this reading's level is judged against: the one crossed, else the first it would cross."""
        if self.level == INVALID:
            return self.invalid
        return self.suspect if self.suspect is not None else self.invalid

    def text(self, with_limit: bool) -> str:
        """`schedule-lag P99 36.2 ms > 10 ms`, or without the limit `schedule-lag P99 36.2 ms`."""
        said = f"{self.label} {_amount(self.value, self.unit)}"
        if not with_limit or self.crossed is None:
            return said
        sign = (">" if self.level != PASS else "≤") if not self.inclusive else ("≥" if self.level != PASS else "<")
        return f"{said} {sign} {_amount(self.crossed, self.unit, limit=True)}"


def _amount(value: float, unit: str, limit: bool = False) -> str:
    """A measured figure to one decimal (a percentage to none); a limit as the gates state it."""
    if unit == "fraction":
        return pct_text(value, 2)
    number = f"{value:g}" if limit else (f"{value:.0f}" if unit == "%" else f"{value:.1f}")
    return f"{number} {unit}"


def client_lag(run: RunData) -> ClientLag:
    """Run-level schedule lag: the client's own totals, else sums over the request windows; and the loop lag."""
    client, rows = run.client, run.request_windows
    sends = client.sends if client and client.sends is not None else _sum(r.sends for r in rows)
    late = (client.late_sends_1s if client and client.late_sends_1s is not None
            else _sum(r.late_sends_1s for r in rows))
    loop = (client.loop_lag_p99_ms, client.loop_lag_max_ms) if client else (None, None)
    if client and client.lag_p99_ms is not None:
        return ClientLag(sends, late, client.lag_p99_ms, False, *loop)
    # Without a run-level histogram, the sends-weighted mean of window P99s stands in for it.
    pairs = [(r.lag_p99_ms, r.sends or 0) for r in rows if r.lag_p99_ms is not None]
    if not pairs:
        return ClientLag(sends, late, None, False, *loop)
    values = np.array([v for v, _ in pairs], dtype=float)
    weights = np.array([w for _, w in pairs], dtype=float)
    lag = float(np.average(values, weights=weights) if weights.sum() > 0 else values.mean())
    return ClientLag(sends, late, lag, True, *loop)


def _sum(values) -> int | None:
    known = [v for v in values if v is not None]
    return int(sum(known)) if known else None


def steady_cpu(run: RunData) -> np.ndarray:
    """The client CPU samples of the load's steady state: the start-up samples and those after the planned end
    (the drain, the stop) left out; with too few samples for that, none."""
    if run.client is None or run.client.cpu_percent is None:
        return np.array([])
    cpu, t_s = run.client.cpu_percent, run.client.t_s
    keep = np.arange(cpu.size) >= STARTUP_SAMPLES
    if t_s.size == cpu.size:
        keep &= t_s <= run.planned_duration_s
    if run.stopped_early and keep.any():
        keep[np.flatnonzero(keep)[-1]] = False  # a stop before the planned end: its last sample covers the drain
    cpu = cpu[keep]
    return cpu[np.isfinite(cpu)]


def _cpu_p95(run: RunData) -> float | None:
    """A sustained client CPU figure: the 95th percentile of the steady samples (one spike is no evidence)."""
    cpu = steady_cpu(run)
    return float(np.percentile(cpu, 95)) if cpu.size else None


def readings(lag: ClientLag, cpu_p95: float | None, gate: ClientGate) -> list[Reading]:
    """Every figure measured, each with its limits; a delay on either side of the client shares the lag gate."""
    found = []
    if lag.late_frac is not None:
        found.append(Reading("sends > 1 s late", lag.late_frac, "fraction", invalid=gate.late_frac_invalid))
    if lag.lag_p99_ms is not None:
        found.append(Reading("schedule-lag P99", lag.lag_p99_ms, "ms", gate.lag_p99_suspect_ms, gate.lag_p99_invalid_ms))
    if lag.loop_lag_p99_ms is not None:
        found.append(Reading("event-loop lag P99", lag.loop_lag_p99_ms, "ms", gate.lag_p99_suspect_ms,
                             gate.lag_p99_invalid_ms))
    if cpu_p95 is not None:
        found.append(Reading("client CPU (95th percentile, steady state)", cpu_p95, "%", gate.cpu_suspect_percent,
                             inclusive=True))
    return found


def saturation_verdict(lag: ClientLag, cpu_p95: float | None, gate: ClientGate) -> tuple[str, list[Reading]]:
    """The verdict and the readings that decided it, worst first (none for a PASS)."""
    found = sorted(readings(lag, cpu_p95, gate), key=lambda r: r.value / r.crossed if r.crossed else 0.0, reverse=True)
    invalid = [r for r in found if r.level == INVALID]  # each level furthest past its limit first
    suspect = [r for r in found if r.level == SUSPECT]
    if invalid:
        return INVALID, invalid + suspect
    return (SUSPECT, suspect) if suspect else (PASS, [])


def headline(verdict: str, deciding: list[Reading], found: list[Reading]) -> Reading | None:
    """The reading the finding's value and threshold show: the worst that decided it, else the largest lag."""
    if deciding:
        return deciding[0]
    lags = [r for r in found if r.unit == "ms"]
    if lags:
        return max(lags, key=lambda r: r.value)
    return found[0] if found else None


def lag_limits(gate: ClientGate) -> dict[str, float]:
    """The gate's lag limits, kept in the finding's details: the report's lag chart draws what the run was judged by."""
    return {"lag_p99_suspect_ms": gate.lag_p99_suspect_ms, "lag_p99_invalid_ms": gate.lag_p99_invalid_ms}


def check_saturation(run: RunData, gates: Gates) -> Finding:
    lag, cpu_p95 = client_lag(run), _cpu_p95(run)
    found = readings(lag, cpu_p95, gates.client)
    if not found:
        return skipped(CHECK, "No schedule-lag, loop-lag or client CPU measurements.",
                       **lag_limits(gates.client))
    verdict, deciding = saturation_verdict(lag, cpu_p95, gates.client)
    shown = headline(verdict, deciding, found)
    details = {"sends": lag.sends, "late_sends_1s": lag.late_sends_1s, "late_frac": lag.late_frac,
               "lag_p99_ms": lag.lag_p99_ms, "lag_p99_estimated": lag.lag_estimated,
               "loop_lag_p99_ms": lag.loop_lag_p99_ms, "loop_lag_max_ms": lag.loop_lag_max_ms,
               "cpu_p95_percent": cpu_p95, "judged_by": shown.label, **lag_limits(gates.client)}
    if deciding:  # the readings past their limits, as other findings quote them
        details["late_by"] = "; ".join(r.text(True) for r in deciding)
    return Finding(check=CHECK, verdict=verdict, value=shown.value, unit=shown.unit,
                   threshold=shown.crossed, evidence=_text(verdict, deciding, found, lag), details=details)


def _text(verdict: str, deciding: list[Reading], found: list[Reading], lag: ClientLag) -> str:
    if verdict == INVALID:
        return "The client was the bottleneck: " + "; ".join(r.text(True) for r in deciding) + "."
    if verdict == SUSPECT:
        return "The client may have limited the load: " + "; ".join(r.text(True) for r in deciding) + "."
    parts = [r.text(True) for r in found if r.unit != "fraction"]
    if lag.late_frac is not None:
        parts.append(f"{lag.late_sends_1s} of {lag.sends} sends > 1 s late")
    return "The client kept its schedule: " + ", ".join(parts) + "."


# -- where the client's lateness reaches -----------------------------------------------------------------
def lateness(saturation: Finding) -> str:
    """How late the client was, in the readings that made it INVALID: `schedule-lag P99 728.0 ms > 100 ms`."""
    said = (saturation.details or {}).get("late_by")
    return str(said) if said else saturation.evidence.removeprefix("The client was the bottleneck: ").rstrip(".")


def untrusted(finding: Finding, late: str, next_step: str = RERUN_STEP) -> Finding:
    """`finding` on a run whose client was late (`late`): INVALID, with what it measured kept in its details
    and said after the reason it is not judged."""
    why = CLIENT_REACH[finding.check].why if finding.check in CLIENT_REACH else "the client's lateness reaches it"
    measured = " ".join(finding.evidence.split())
    evidence = (f"Not judged: the client was late ({late}), and {why}. "
                f"What it measured ({finding.verdict}): {measured}")
    details = {**finding.details, "measured": {"verdict": str(finding.verdict), "evidence": finding.evidence,
                                               "next_step": finding.next_step}}
    return replace(finding, verdict=INVALID, evidence=evidence, next_step=next_step, details=details)


def scope_to_client(findings: list[Finding]) -> list[Finding]:
    """The findings as the client's lateness leaves them: on a run whose `client.saturation` is INVALID, each
    finding a late client voids (`voided_by_late_client`) reads INVALID; every other keeps its verdict.
    Otherwise the findings unchanged."""
    saturation = next((f for f in findings if f.check == CHECK), None)
    if saturation is None or saturation.verdict != INVALID:
        return findings
    late = lateness(saturation)
    return [untrusted(f, late) if voided_by_late_client(f) else f for f in findings]
