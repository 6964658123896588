"""SQLAlchemy models of soak's database: runs, events, wide sample rows, per-window latency histograms.

Known per-process, per-GPU and per-server readings are wide rows (one row per sample time and subject), so a
72 h run at 1 Hz stays small; only extra scraped Prometheus series go to the long `metric_samples` table.
Times: `t_s` is seconds since the run's start (wall clock); ISO-8601 UTC strings for absolute times.
"""

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base of every soak table."""


class Run(Base):
    """One soak run: its identity, plan, status, heartbeat and outcome."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    started_at: Mapped[str] = mapped_column(String(40))
    t0_epoch_s: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[str | None] = mapped_column(String(40))
    heartbeat_at: Mapped[str | None] = mapped_column(String(40))
    planned_duration_s: Mapped[float] = mapped_column(Float)
    duration_s: Mapped[float | None] = mapped_column(Float)
    warmup_s: Mapped[float] = mapped_column(Float)
    window_s: Mapped[float] = mapped_column(Float)
    soak_pid: Mapped[int | None] = mapped_column(Integer)
    server_pgid: Mapped[int | None] = mapped_column(Integer)
    server_cmd: Mapped[str | None] = mapped_column(Text)
    out_dir: Mapped[str] = mapped_column(Text)
    target_kind: Mapped[str] = mapped_column(String(16))
    target_url: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(Text)
    schedule_name: Mapped[str | None] = mapped_column(String(128))
    fleet_id: Mapped[str | None] = mapped_column(String(64), index=True)  # the fleet run of a replica's run
    replica: Mapped[str | None] = mapped_column(String(64))  # its replica's name in that fleet
    config_json: Mapped[str] = mapped_column(Text)
    environment_json: Mapped[str] = mapped_column(Text)
    verdict: Mapped[str | None] = mapped_column(String(16))
    verdict_reason: Mapped[str | None] = mapped_column(Text)
    summary_json: Mapped[str | None] = mapped_column(Text)


class RunLabel(Base):
    """One KEY=VALUE label of a run (`--label`), for finding and grouping runs (docs/history.md)."""

    __tablename__ = "run_labels"
    __table_args__ = (Index("ix_run_labels_key_value", "key", "value"),)

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(200))


class EventRow(Base):
    """Something that happened at a point in time: server start/crash, phase change, probe, error burst…"""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_run_t", "run_id", "t_s"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    t_s: Mapped[float] = mapped_column(Float)
    at: Mapped[str] = mapped_column(String(40))
    kind: Mapped[str] = mapped_column(String(40))
    message: Mapped[str] = mapped_column(Text, default="")
    data_json: Mapped[str | None] = mapped_column(Text)


class ProcessSample(Base):
    """One process at one sample time: a server-tree process (role "server") or soak itself ("client")."""

    __tablename__ = "process_samples"
    __table_args__ = (Index("ix_process_samples_run_t", "run_id", "t_s"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    t_s: Mapped[float] = mapped_column(Float)
    role: Mapped[str] = mapped_column(String(16))
    pid: Mapped[int] = mapped_column(Integer)
    ppid: Mapped[int | None] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(128))
    rss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    pss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    uss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # Memory of the process pushed out to swap (VmSwap): a leak written once and never read again leaves RSS.
    swap_bytes: Mapped[int | None] = mapped_column(BigInteger)
    fds: Mapped[int | None] = mapped_column(Integer)
    threads: Mapped[int | None] = mapped_column(Integer)
    cpu_percent: Mapped[float | None] = mapped_column(Float)


class GpuSample(Base):
    """One GPU at one sample time: read through NVML (`source` None) or from a dcgm-exporter page (`source` its URL).

    `xid_errors` counts XIDs seen since the run started, whichever the source; `last_xid` is dcgm-exporter's own
    gauge (the last XID code the GPU raised, 0 for none). The ECC and row-remap columns are the driver's counters.
    """

    __tablename__ = "gpu_samples"
    __table_args__ = (Index("ix_gpu_samples_run_t", "run_id", "t_s"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    t_s: Mapped[float] = mapped_column(Float)
    gpu_index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str | None] = mapped_column(String(128))
    mem_used_bytes: Mapped[int | None] = mapped_column(BigInteger)
    mem_total_bytes: Mapped[int | None] = mapped_column(BigInteger)
    util_pct: Mapped[float | None] = mapped_column(Float)
    temp_c: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)
    sm_clock_mhz: Mapped[float | None] = mapped_column(Float)
    throttle_reasons: Mapped[int | None] = mapped_column(Integer)
    ecc_errors: Mapped[int | None] = mapped_column(Integer)  # uncorrected (double-bit) ECC errors, volatile
    xid_errors: Mapped[int | None] = mapped_column(Integer)
    source: Mapped[str | None] = mapped_column(Text)
    uuid: Mapped[str | None] = mapped_column(String(96))
    last_xid: Mapped[int | None] = mapped_column(Integer)
    ecc_sbe_errors: Mapped[int | None] = mapped_column(BigInteger)  # corrected (single-bit) ECC errors, volatile
    remapped_rows_uncorrectable: Mapped[int | None] = mapped_column(Integer)
    remapped_rows_correctable: Mapped[int | None] = mapped_column(Integer)
    row_remap_failure: Mapped[int | None] = mapped_column(Integer)


class GpuProcessSample(Base):
    """VRAM held by one process of the server tree on one GPU at one sample time."""

    __tablename__ = "gpu_process_samples"
    __table_args__ = (Index("ix_gpu_process_samples_run_t", "run_id", "t_s"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    t_s: Mapped[float] = mapped_column(Float)
    gpu_index: Mapped[int] = mapped_column(Integer)
    pid: Mapped[int] = mapped_column(Integer)
    used_bytes: Mapped[int | None] = mapped_column(BigInteger)


class ServerSample(Base):
    """The server's known gauges and counters from one /metrics scrape, plus /health."""

    __tablename__ = "server_samples"
    __table_args__ = (Index("ix_server_samples_run_t", "run_id", "t_s"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    t_s: Mapped[float] = mapped_column(Float)
    source: Mapped[str] = mapped_column(Text)
    scrape_ok: Mapped[bool] = mapped_column(Boolean)
    health_ok: Mapped[bool | None] = mapped_column(Boolean)
    running: Mapped[float | None] = mapped_column(Float)
    waiting: Mapped[float | None] = mapped_column(Float)
    kv_usage: Mapped[float | None] = mapped_column(Float)
    preemptions_total: Mapped[float | None] = mapped_column(Float)
    prompt_tokens_total: Mapped[float | None] = mapped_column(Float)
    generation_tokens_total: Mapped[float | None] = mapped_column(Float)
    request_success_total: Mapped[float | None] = mapped_column(Float)
    prefix_cache_queries_total: Mapped[float | None] = mapped_column(Float)
    prefix_cache_hits_total: Mapped[float | None] = mapped_column(Float)
    # The server's own inter-token latency histogram, its running sum (seconds) and count (token gaps): the mean
    # time between tokens over any interval, as the server measured it (a replica behind a router has no other).
    itl_sum_s: Mapped[float | None] = mapped_column(Float)
    itl_count: Mapped[float | None] = mapped_column(Float)


# soak's own reading of the host's available memory (MemAvailable), stored among the scraped series under a name no
# server uses: the headroom a leak eats into.
HOST_AVAILABLE_METRIC = "soak_host_memory_available_bytes"
# soak's own event-loop lag over the load so far (run-level P99 and max, in ms), stored the same way at every sample:
# how late the client could have stamped a reply it received (`soak.load.health.LoopLagMonitor`).
CLIENT_LOOP_LAG_P99_METRIC = "soak_client_loop_lag_p99_ms"
CLIENT_LOOP_LAG_MAX_METRIC = "soak_client_loop_lag_max_ms"


class MetricSample(Base):
    """Any other scraped Prometheus series (long form), and `HOST_AVAILABLE_METRIC` at every sample."""

    __tablename__ = "metric_samples"
    __table_args__ = (Index("ix_metric_samples_run_name_t", "run_id", "name", "t_s"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    t_s: Mapped[float] = mapped_column(Float)
    name: Mapped[str] = mapped_column(String(200))
    labels_json: Mapped[str] = mapped_column(Text, default="{}")
    value: Mapped[float] = mapped_column(Float)


class LatencyWindowRow(Base):
    """A mergeable latency histogram (HDR, base64) of one metric, scenario and window; scenario "*" = all."""

    __tablename__ = "latency_windows"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    window_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    scenario: Mapped[str] = mapped_column(String(200), primary_key=True)
    metric: Mapped[str] = mapped_column(String(16), primary_key=True)
    start_s: Mapped[float] = mapped_column(Float)
    end_s: Mapped[float] = mapped_column(Float)
    count: Mapped[int] = mapped_column(Integer)
    mean_ms: Mapped[float | None] = mapped_column(Float)
    p50_ms: Mapped[float | None] = mapped_column(Float)
    p90_ms: Mapped[float | None] = mapped_column(Float)
    p95_ms: Mapped[float | None] = mapped_column(Float)
    p99_ms: Mapped[float | None] = mapped_column(Float)
    max_ms: Mapped[float | None] = mapped_column(Float)
    hist: Mapped[str | None] = mapped_column(Text)


class RequestWindowRow(Base):
    """Request counts of one scenario and window: outcomes by error class, tokens, and the client's sends."""

    __tablename__ = "request_windows"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    window_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    scenario: Mapped[str] = mapped_column(String(200), primary_key=True)
    start_s: Mapped[float] = mapped_column(Float)
    end_s: Mapped[float] = mapped_column(Float)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    ok: Mapped[int] = mapped_column(Integer, default=0)
    cancelled: Mapped[int] = mapped_column(Integer, default=0)
    expected_errors: Mapped[int] = mapped_column(Integer, default=0)
    err_connect: Mapped[int] = mapped_column(Integer, default=0)
    err_timeout: Mapped[int] = mapped_column(Integer, default=0)
    err_http_4xx: Mapped[int] = mapped_column(Integer, default=0)
    err_http_5xx: Mapped[int] = mapped_column(Integer, default=0)
    err_bad_stream: Mapped[int] = mapped_column(Integer, default=0)
    err_invalid_output: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    late_sends_1s: Mapped[int] = mapped_column(Integer, default=0)
    # Requests that met every --slo target (None: the run set no SLO).
    slo_met: Mapped[int | None] = mapped_column(Integer)


class RequestRow(Base):
    """One request, kept only with --keep-requests."""

    __tablename__ = "requests"
    __table_args__ = (Index("ix_requests_run_t", "run_id", "intended_s"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    scenario: Mapped[str] = mapped_column(String(200))
    intended_s: Mapped[float] = mapped_column(Float)
    lag_ms: Mapped[float | None] = mapped_column(Float)
    queue_ms: Mapped[float | None] = mapped_column(Float)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    e2e_ms: Mapped[float | None] = mapped_column(Float)
    output_tokens: Mapped[int | None] = mapped_column(BigInteger)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error_class: Mapped[str | None] = mapped_column(String(16))


ERROR_CLASSES = ("connect", "timeout", "http_4xx", "http_5xx", "bad_stream", "invalid_output")
LATENCY_METRICS = ("ttft", "itl", "e2e", "lag", "queue")
ALL_SCENARIOS = "*"
