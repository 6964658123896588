"""Analysis: plain run data in, findings and a verdict out (checks and verdicts: docs/gates.md).

A pure layer: it imports no database, load generator or other stage. An adapter builds a
`RunData` (see `soak.analysis.inputs`), then:

    findings = analyse(run, gates)
    verdict, reason = overall_verdict(findings, gates, run.stopped_early)
"""

from soak.analysis.baseline import compare_baseline
from soak.analysis.checks import analyse
from soak.analysis.findings import CHECK_NAMES, CHECK_ORDER, VERDICTS, Finding
from soak.analysis.gates import Gates, load_gates
from soak.analysis.inputs import (
    ClientSeries,
    Event,
    GpuProcessSeries,
    HostSeries,
    LatencyStats,
    ProbeReading,
    ProcessReading,
    ProcessSeries,
    RunData,
    ServerSeries,
    WindowInfo,
    WindowLatency,
    WindowRequests,
)
from soak.analysis.verdict import overall_verdict

__all__ = [
    "analyse", "overall_verdict", "compare_baseline", "Finding", "RunData", "Gates", "load_gates",
    "CHECK_NAMES", "CHECK_ORDER", "VERDICTS",
    "ClientSeries", "Event", "GpuProcessSeries", "HostSeries", "LatencyStats", "ProbeReading", "ProcessReading",
    "ProcessSeries", "ServerSeries", "WindowInfo", "WindowLatency", "WindowRequests",
]
