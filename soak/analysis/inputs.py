"""Plain-data inputs of the analysis layer.

The analysis never reads the database: an adapter (in the store or report stage) builds one
`RunData` from what was recorded and hands it to `soak.analysis.analyse`. Everything here is a
frozen dataclass of numbers, numpy arrays and strings.

Conventions every field follows:

* Times are **seconds since the run started** (`t_s`, `start_s`, `end_s`), wall-clock based, so a
  sample at 3600.0 was taken one hour into the run, warm-up included.
* Array fields are 1-D numpy float arrays of equal length inside one object, sorted by `t_s`.
  A missing reading inside an array is `nan`; a quantity never measured is `None`.
* Units are in the names: bytes, ms, seconds, fractions (0–1), counts.
* A window's `index` is the same number in `WindowInfo`, `WindowLatency` and `WindowRequests`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from soak.contracts import Event  # the run events, as the store reads them back

EXCLUDED_REASONS = ("warmup", "network", "probe", "outage", "forensics", "worker_lost")
LATENCY_METRICS = ("ttft", "itl", "e2e")
ERROR_CLASSES = ("connect", "timeout", "http_4xx", "http_5xx", "bad_stream", "invalid_output")


def _array(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=float)


def _optional_array(values: Any) -> np.ndarray | None:
    return None if values is None else _array(values)


@dataclass(frozen=True)
class WindowInfo:
    """One analysis window `[start_s, end_s)`.

    `excluded` is None for a window that trends judge, else why it is left out: "warmup" (it
    overlaps the warm-up), "network" (the route to the server was lost for part of it: the server was out of reach,
    not down, and its errors are not the server's), "probe" (an idle probe ran in it, so load was not steady), "outage"
    (the server was down or restarting for part of it), "forensics" (an allocation tracker watched a server
    process, slowing it and holding memory of its own) or "worker_lost" (a load worker went silent in it, so
    part of the load was not sent and some records never came back).
    """

    index: int
    start_s: float
    end_s: float
    excluded: str | None = None

    @property
    def mid_s(self) -> float:
        return 0.5 * (self.start_s + self.end_s)


@dataclass(frozen=True, eq=False)  # numpy arrays do not compare as one bool
class ProcessSeries:
    """Samples of one server process (one PID) of the server's process tree.

    `name` is the process name as sampled ("refserver", "vllm", "EngineCore"). `rss_bytes` is the
    resident set size; `swap_bytes` the memory of the process pushed out to swap (VmSwap; None when
    not read); `pss_bytes` the proportional set size from smaps_rollup (None when not
    read); `fds` the count of open file descriptors and `threads` the thread count (None when not
    sampled). All arrays have the length of `t_s`.
    """

    pid: int
    name: str
    t_s: np.ndarray
    rss_bytes: np.ndarray
    pss_bytes: np.ndarray | None = None
    fds: np.ndarray | None = None
    threads: np.ndarray | None = None
    swap_bytes: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "t_s", _array(self.t_s))
        object.__setattr__(self, "rss_bytes", _array(self.rss_bytes))
        for name in ("pss_bytes", "fds", "threads", "swap_bytes"):
            object.__setattr__(self, name, _optional_array(getattr(self, name)))

    @property
    def held_bytes(self) -> np.ndarray:
        """Host memory the process holds, resident + swapped: what `leak.rss` judges. A leak written once and
        never read again is swapped out on a host with swap, and RSS alone then looks flat. RSS alone where
        swap was never read; a sample whose swap is missing is missing here too (summed short it would look
        like a drop)."""
        return self.rss_bytes if self.swap_bytes is None else self.rss_bytes + self.swap_bytes

    @property
    def swapped(self) -> bool:
        """Whether any sample found memory of this process in swap."""
        return self.swap_bytes is not None and bool(np.nanmax(self.swap_bytes, initial=0.0) > 0)


@dataclass(frozen=True, eq=False)  # numpy arrays do not compare as one bool
class GpuProcessSeries:
    """Per-process GPU memory of one PID of the server tree, from NVML, in bytes.

    One object per (pid, gpu_index); the analysis sums all of them per window for the tree total.
    """

    pid: int
    t_s: np.ndarray
    used_bytes: np.ndarray
    name: str = ""
    gpu_index: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "t_s", _array(self.t_s))
        object.__setattr__(self, "used_bytes", _array(self.used_bytes))


@dataclass(frozen=True, eq=False)  # numpy arrays do not compare as one bool
class GpuSeries:
    """One GPU's own readings over the run: through NVML (`source` None) or from a dcgm-exporter page (its URL).

    `uuid` names the GPU (dcgm-exporter's UUID label; None from NVML), `gpu_index` its index. Arrays may be None
    when the source never gave that reading: `mem_used_bytes` (framebuffer used), `ecc_dbe` (uncorrected ECC
    errors, volatile), `remapped_rows_uncorrectable`, `row_remap_failure`, `xid_errors` (XIDs since the start).
    """

    source: str | None
    gpu_index: int
    t_s: np.ndarray
    uuid: str | None = None
    mem_used_bytes: np.ndarray | None = None
    ecc_dbe: np.ndarray | None = None
    remapped_rows_uncorrectable: np.ndarray | None = None
    row_remap_failure: np.ndarray | None = None
    xid_errors: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "t_s", _array(self.t_s))
        for name in ("mem_used_bytes", "ecc_dbe", "remapped_rows_uncorrectable", "row_remap_failure", "xid_errors"):
            object.__setattr__(self, name, _optional_array(getattr(self, name)))

    @property
    def label(self) -> str:
        """How a sentence names the GPU: its UUID, else its index."""
        return f"GPU {self.uuid}" if self.uuid else f"GPU {self.gpu_index}"


@dataclass(frozen=True)
class ProcessReading:
    """One process's memory at the quiet point of an idle probe (after the drain and the hold)."""

    pid: int
    name: str
    rss_bytes: float
    vram_bytes: float | None = None
    fds: float | None = None
    swap_bytes: float | None = None

    @property
    def held_bytes(self) -> float:
        """Resident + swapped, as `ProcessSeries.held_bytes` (RSS alone when swap was not read)."""
        return self.rss_bytes + (self.swap_bytes or 0.0)


@dataclass(frozen=True)
class ProbeReading:
    """What an idle probe read after arrivals stopped and in-flight requests drained.

    `t_s` is when the reading was taken. `kv_usage` is `vllm:kv_cache_usage_perc` (0–1) or None
    when the server exposes no such gauge; `running`/`waiting` are the server's request gauges
    (None when not exposed). `drained` is False when the drain hit its timeout before the client's
    in-flight requests finished — a hang signal. `processes` holds per-PID readings taken at the
    same moment.
    """

    t_s: float
    kv_usage: float | None
    running: float | None
    waiting: float | None
    drained: bool = True
    processes: tuple[ProcessReading, ...] = ()


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles of one latency metric over one window, in milliseconds; `count` is the sample count.

    For ITL a sample is one gap between content chunks, for TTFT and E2E one request.
    """

    count: int
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float

    def percentile_ms(self, level: str) -> float:
        """The value for "p50", "p90", "p95" or "p99"."""
        return float(getattr(self, f"{level}_ms"))



@dataclass(frozen=True)
class WindowLatency:
    """Client-measured latency of the requests that finished in window `index`, every scenario together: the
    checks' view of the stored rows (`soak.samples.LatencyWindow`, one per metric and scenario).

    TTFT = intended send → first content token; ITL = gap between content chunks; E2E = intended
    send → last byte (docs/load.md, "Measurements"). A metric with no samples in the window is None.
    """

    index: int
    start_s: float
    end_s: float
    ttft: LatencyStats | None = None
    itl: LatencyStats | None = None
    e2e: LatencyStats | None = None

    def stats(self, metric: str) -> LatencyStats | None:
        """The stats of "ttft", "itl" or "e2e"."""
        return getattr(self, metric)


@dataclass(frozen=True)
class WindowRequests:
    """Request counts of window `index`, as the checks read them (from `soak.samples.RequestWindow` rows, with
    the window's offered load and schedule lag beside them).

    `requests` counts requests that finished in the window, successes and errors, not `cancelled`
    ones (a deliberate client cancel is not an error and not a completion). `errors` maps an error
    class (connect, timeout, http_4xx, http_5xx, bad_stream, invalid_output) to its count. `sends` counts planned
    arrivals whose intended send time fell in the window (the offered load), `late_sends_1s` those
    sent more than 1 s after their intended time, `lag_p99_ms` the window's P99 schedule lag
    (None when not measured). `output_tokens` counts content tokens received. `slo_met` counts the requests that
    met every `--slo` target (failed ones never do); None when the run set no SLO.
    """

    index: int
    start_s: float
    end_s: float
    requests: int
    errors: Mapping[str, int] = field(default_factory=dict)
    cancelled: int = 0
    output_tokens: int = 0
    sends: int | None = None
    late_sends_1s: int | None = None
    lag_p99_ms: float | None = None
    slo_met: int | None = None

    @property
    def error_count(self) -> int:
        return int(sum(self.errors.values()))


@dataclass(frozen=True, eq=False)  # numpy arrays do not compare as one bool
class ServerSeries:
    """The server's own gauges and counters, scraped from /metrics, plus the health probe.

    `running`/`waiting` are request gauges, `kv_usage` 0–1, `generation_tokens_total` and
    `preemptions_total` monotonic counters (a drop means the server restarted), `itl_sum_s`/`itl_count` the
    running sum and count of the server's own inter-token latency histogram, `health_ok` 1.0
    when /health answered 200 and 0.0 otherwise. Any array may be None when not scraped; `nan`
    marks a failed scrape.
    """

    t_s: np.ndarray
    running: np.ndarray | None = None
    waiting: np.ndarray | None = None
    kv_usage: np.ndarray | None = None
    generation_tokens_total: np.ndarray | None = None
    preemptions_total: np.ndarray | None = None
    health_ok: np.ndarray | None = None
    itl_sum_s: np.ndarray | None = None
    itl_count: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "t_s", _array(self.t_s))
        for name in ("running", "waiting", "kv_usage", "generation_tokens_total",
                     "preemptions_total", "health_ok", "itl_sum_s", "itl_count"):
            object.__setattr__(self, name, _optional_array(getattr(self, name)))


@dataclass(frozen=True, eq=False)  # numpy arrays do not compare as one bool
class HostSeries:
    """The headroom the server has: host memory available (MemAvailable) and, per sample, the
    free memory of the GPUs serving it summed (None without a GPU), in bytes, sampled at `t_s`."""

    t_s: np.ndarray
    available_bytes: np.ndarray
    gpu_free_bytes: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "t_s", _array(self.t_s))
        object.__setattr__(self, "available_bytes", _array(self.available_bytes))
        object.__setattr__(self, "gpu_free_bytes", _optional_array(self.gpu_free_bytes))


@dataclass(frozen=True, eq=False)  # numpy arrays do not compare as one bool
class ClientSeries:
    """The load generator's own health.

    Arrays: `cpu_percent` of the busiest load-generating process (100 = one core busy; a gevent
    process cannot use more than one core) and `rss_bytes` of the client, sampled at `t_s`.
    Run-level schedule lag: `sends` (all planned arrivals sent), `late_sends_1s` (sent > 1 s after their
    intended time), `lag_p99_ms` (P99 of sent − intended over the whole run).
    Run-level values may be None; the check then falls back to summing `WindowRequests` counts.
    `loop_lag_p99_ms`, `loop_lag_max_ms`: how late the client's event loop woke while the load ran (P99 and
    max), the delay any reply it received could have been stamped with; None for runs stored without them.
    """

    t_s: np.ndarray
    cpu_percent: np.ndarray | None = None
    rss_bytes: np.ndarray | None = None
    sends: int | None = None
    late_sends_1s: int | None = None
    lag_p99_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "t_s", _array(self.t_s))
        object.__setattr__(self, "cpu_percent", _optional_array(self.cpu_percent))
        object.__setattr__(self, "rss_bytes", _optional_array(self.rss_bytes))


@dataclass(frozen=True, eq=False)  # numpy arrays do not compare as one bool
class RunData:
    """Everything the analysis needs about one run.

    `planned_duration_s` is what was asked for (warm-up and probes included), `actual_duration_s`
    how long it ran; `stopped_early` is True when it was interrupted. `gpu_seen` says whether NVML
    saw a GPU serving the tree (or a dcgm-exporter page showed one), `probes_ran` whether idle probes were
    scheduled and at least one ran. `server_managed` is True when soak started the server (so an exit would be an event; it
only changes wording — `crashes` needs a server event, a health series or process samples to PASS).
    `total_requests` counts finished requests over the run (cancelled excluded).
    `scenario_windows` maps each scenario's name to its own per-window counts (the same windows as
    `request_windows`, which hold all scenarios together); empty when not recorded. `host` is the
    headroom series; `horizon_s` the service horizon leak thresholds and projections use
    (`soak start --horizon`). `slo` holds the run's `--slo` targets in ms by metric (`ttft`, `itl`, `tpot`, `e2e`),
    None when it set none.
    """

    planned_duration_s: float
    actual_duration_s: float
    warmup_s: float
    window_s: float
    windows: tuple[WindowInfo, ...]
    stopped_early: bool = False
    gpu_seen: bool = False
    probes_ran: bool = False
    server_managed: bool = True
    processes: tuple[ProcessSeries, ...] = ()
    gpu_processes: tuple[GpuProcessSeries, ...] = ()
    probes: tuple[ProbeReading, ...] = ()
    latency_windows: tuple[WindowLatency, ...] = ()
    request_windows: tuple[WindowRequests, ...] = ()
    server: ServerSeries | None = None
    client: ClientSeries | None = None
    # Kinds the analysis reads: "server_start", "crash" (data may carry "exit_code" and "log_tail"), "restart",
    # "probe_drain_timeout", "server_log_error" and "server_log_scanned" (server.log_errors), "canary",
    # "canary_mismatch", "canary_timeout" and "canary_error" (canary). Other kinds are ignored.
    events: tuple[Event, ...] = ()
    total_requests: int = 0
    scenario_windows: Mapping[str, tuple[WindowRequests, ...]] = field(default_factory=dict)
    host: HostSeries | None = None
    # Each GPU's own series (NVML and dcgm-exporter): gpu.xid, gpu.ecc, and leak.vram when NVML saw no process.
    gpus: tuple[GpuSeries, ...] = ()
    horizon_s: float = 7 * 86400.0
    slo: Mapping[str, float] | None = None
    # A replica behind a --router: sent no load of its own, so only the server's own evidence is judged.
    observe_only: bool = False
    # (start, end) of each network outage: the route to the server lost, not the server (network_outage_* events)
    network_outages: tuple[tuple[float, float], ...] = ()

    def judged_windows(self) -> list[WindowInfo]:
        """Windows that trends use: not excluded and starting after the warm-up."""
        return [w for w in self.windows if w.excluded is None and w.start_s >= self.warmup_s - 1e-9]

    def judged_indices(self) -> set[int]:
        return {w.index for w in self.judged_windows()}

    def load_clock(self, t_s: np.ndarray) -> np.ndarray:
        """Times with the network outages after the warm-up taken out: arrivals paused then, so memory that grows
        with the requests reads one straight line across an outage on this clock (the leak trends fit on it)."""
        t_s = np.asarray(t_s, dtype=float)
        paused = np.zeros_like(t_s)
        for start_s, end_s in self.network_outages:
            start_s = max(start_s, self.warmup_s)
            paused += np.clip(t_s - start_s, 0.0, max(end_s - start_s, 0.0))
        return t_s - paused

    @property
    def swap_seen(self) -> bool:
        """Whether memory of a server process was found in swap (a sample or an idle-probe reading)."""
        return (any(p.swapped for p in self.processes)
                or any((r.swap_bytes or 0) > 0 for probe in self.probes for r in probe.processes))
