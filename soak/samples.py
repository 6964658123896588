"""The typed records a run hands its store: samples of the server, the GPUs and soak itself, latency and request
windows, and kept requests.

Telemetry and the conductor build them; the store's writer (`soak/store/writer.py`) alone turns them into rows of
its tables, stamped with the run id (and, for a sample, its time). They sit among the foundations so that both
sides import them without an upward import. Every reading is None where it was not read.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ProcessStats:
    """One reading of one process; None where it was not read (PSS/USS between their slower reads, anything
    denied for another user's process, or all but RSS and fds for the row read from the server's /metrics)."""

    pid: int
    name: str
    rss_bytes: int | None
    ppid: int | None = None
    swap_bytes: int | None = None
    threads: int | None = None
    cpu_percent: float | None = None
    pss_bytes: int | None = None
    uss_bytes: int | None = None
    fds: int | None = None


def process_role(stats: ProcessStats, roots: list[int]) -> str:
    """What a server process is: engine (vLLM's EngineCore, SGLang's scheduler), api (a root of the server's tree:
    the process soak started or found), worker, or process."""
    name = stats.name.lower()
    if "enginecore" in name or "scheduler" in name:
        return "engine"
    if "worker" in name:
        return "worker"
    return "api" if stats.pid in roots else "process"


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """A process sample: one process's reading, of the server's tree (role "server") or of soak ("client")."""

    role: str
    stats: ProcessStats


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU at one sample, read through NVML (`source` None) or from a dcgm-exporter page (`source` its URL).

    `xid_errors` counts the XIDs seen since the run started; `last_xid` is dcgm-exporter's gauge of the last XID
    code raised (0 for none). Memory in bytes, power in W, clocks in MHz.
    """

    gpu_index: int
    name: str | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    util_pct: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: int | None = None
    ecc_errors: int | None = None
    xid_errors: int | None = None
    source: str | None = None
    uuid: str | None = None
    last_xid: int | None = None
    ecc_sbe_errors: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_correctable: int | None = None
    row_remap_failure: int | None = None


@dataclass(frozen=True, slots=True)
class GpuProcessReading:
    """VRAM one process of the server's tree holds on one GPU (None: NVML would not say)."""

    gpu_index: int
    pid: int
    used_bytes: int | None


@dataclass(frozen=True, slots=True)
class ServerReading:
    """One scrape of a /metrics page in the server's dialect, and whether /health answered (None: no /health).

    A gauge or counter the page did not carry is None, never 0.
    """

    source: str
    scrape_ok: bool
    health_ok: bool | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    request_success_total: float | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None
    itl_sum_s: float | None = None  # the server's inter-token latency histogram: running sum (seconds) …
    itl_count: float | None = None  # … and count (token gaps)


@dataclass(frozen=True, slots=True)
class MetricReading:
    """One value of any other series: a scraped Prometheus series beyond the known ones, or one of soak's own."""

    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LatencyWindow:
    """One metric's latency in one window and scenario ("*": all of them): count, mean, percentiles and max in
    ms (None when the window has no value), and the mergeable HDR histogram, encoded."""

    window_index: int
    scenario: str
    metric: str
    start_s: float
    end_s: float
    count: int
    mean_ms: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    hist: str | None = None

    def stored_ms(self, pct: int) -> float | None:
        """The window's P`pct` (50, 90, 95 or 99) in ms as stored beside its histogram."""
        return {50: self.p50_ms, 90: self.p90_ms, 95: self.p95_ms, 99: self.p99_ms}[pct]


@dataclass(frozen=True, slots=True)
class RequestWindow:
    """Request counts of one window and scenario ("*": all of them): outcomes by error class, tokens, late sends,
    and the requests that met every SLO target (None: the run set none)."""

    window_index: int
    scenario: str
    start_s: float
    end_s: float
    requests: int = 0
    ok: int = 0
    cancelled: int = 0
    expected_errors: int = 0
    err_connect: int = 0
    err_timeout: int = 0
    err_http_4xx: int = 0
    err_http_5xx: int = 0
    err_bad_stream: int = 0
    err_invalid_output: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0
    late_sends_1s: int = 0
    slo_met: int | None = None

    def errors_of(self, error_class: str) -> int:
        """The window's failed requests of one error class (`connect`, `timeout`, `http_5xx`, …)."""
        return getattr(self, f"err_{error_class}")

    @property
    def errors(self) -> int:
        """The window's failed requests of every class."""
        return sum(getattr(self, name) for name in self.__dataclass_fields__ if name.startswith("err_"))


@dataclass(frozen=True, slots=True)
class KeptRequest:
    """One finished request, kept with --keep-requests; `intended_s` is its intended send time since the start."""

    scenario: str
    intended_s: float
    lag_ms: float | None
    queue_ms: float | None
    ttft_ms: float | None
    e2e_ms: float | None
    output_tokens: int | None
    status_code: int | None
    error_class: str | None


Sample = ProcessReading | GpuReading | GpuProcessReading | ServerReading | MetricReading
Window = LatencyWindow | RequestWindow
