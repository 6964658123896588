"""`analyse`: run every check in the fixed order of summary.json."""

from __future__ import annotations

import logging
from collections.abc import Callable

from soak.analysis import (
    canary,
    error_checks,
    forensics,
    goodput,
    gpu_health,
    kv,
    latency,
    liveness,
    memory,
    saturation,
    server_latency,
    server_log,
    throughput,
)
from soak.analysis.findings import CHECK_ORDER, Finding, inconclusive, skipped
from soak.analysis.gates import Gates
from soak.analysis.inputs import RunData
from soak.analysis.next_steps import add_next_steps

log = logging.getLogger(__name__)

Check = Callable[[RunData, Gates], Finding]

CHECKS: dict[str, Check] = {
    "leak.rss": memory.check_rss,
    "leak.vram": memory.check_vram,
    "leak.kv": kv.check_kv,
    "leak.fds": memory.check_fds,
    "creep.ttft_p99": latency.check_ttft,
    "creep.itl_p99": latency.check_itl,
    "creep.e2e_p99": latency.check_e2e,
    "creep.server_itl": server_latency.check_server_itl,
    "errors.rise": error_checks.check_rise,
    "errors.budget": error_checks.check_budget,
    "errors.bursts": error_checks.check_bursts,
    "errors.invalid_output": error_checks.check_invalid_output,
    "hang": liveness.check_hang,
    "crashes": liveness.check_crashes,
    "gpu.xid": gpu_health.check_xid,
    "gpu.ecc": gpu_health.check_ecc,
    "throughput.decay": throughput.check_decay,
    "client.saturation": saturation.check_saturation,
    "server.log_errors": server_log.check_log_errors,
    "canary": canary.check_canary,
    "goodput.decay": goodput.check_decay,
    "goodput.floor": goodput.check_floor,
}
assert tuple(CHECKS) == CHECK_ORDER

# What only this run's own requests can show; a replica observed behind a --router sent none.
LOAD_CHECKS = ("creep.ttft_p99", "creep.itl_p99", "creep.e2e_p99", "errors.rise", "errors.budget", "errors.bursts",
               "errors.invalid_output", "throughput.decay", "client.saturation", "canary", "goodput.decay",
               "goodput.floor")
OBSERVED_ONLY = ("This replica was only observed: its load went through the router, whose run judges latency, "
                 "errors and throughput.")


def analyse(run: RunData, gates: Gates | None = None) -> list[Finding]:
    """One finding per check, in CHECK_ORDER. A check that raises becomes INCONCLUSIVE (and is
    logged) so that one malformed series cannot cost the run its report. A leak.rss SUSPECT or FAIL says where
    the memory went when a forensics window watched the server (`forensics.add_forensics`). On a run whose client was
    INVALID, the checks its lateness can distort read INVALID (`saturation.scope_to_client`)."""
    gates = gates or Gates()
    findings = [_run_check(name, check, run, gates) for name, check in CHECKS.items()]
    findings = forensics.add_forensics(add_next_steps(findings, run, gates), run.events)
    return saturation.scope_to_client(findings)


def _run_check(name: str, check: Check, run: RunData, gates: Gates) -> Finding:
    if run.observe_only and name in LOAD_CHECKS:
        return skipped(name, OBSERVED_ONLY, observe_only=True)
    try:
        return check(run, gates)
    except Exception as exc:  # reported in the finding and the log
        log.exception("analysis check %s failed", name)
        return inconclusive(name, f"The analysis of this check failed: {type(exc).__name__}: {exc}",
                            details={"error": repr(exc)})
