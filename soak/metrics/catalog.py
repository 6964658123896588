"""Every series soak exports, in one table: its Prometheus name, its OpenTelemetry name, type, unit and labels.

The live `/metrics` page, the OTLP push and the OpenMetrics export of a stored run all name their series from
here, so a dashboard drawn on a live run draws a backfilled one too; docs/observability.md holds the same table
(a test keeps them together).

Names follow the OpenTelemetry GenAI semantic conventions where one exists for what soak measures on the client
side (the request's duration, time to first chunk, time per output chunk, token usage), translated to
Prometheus the way OpenTelemetry's own Prometheus exporter does (dots to underscores, the unit as a suffix);
everything else is `soak_…` / `soak.…` in base units (seconds, bytes, ratios).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# Labels every series carries: which run, against which server (host:port), which replica of a fleet ("" outside
# one) and which soak. Each is constant for one run, so they add no series within it.
RUN_LABELS = ("run_id", "target", "replica", "soak_version")

# Histogram bucket bounds grow by 2^(1/4) (≈ 19 %): a quantile Prometheus interpolates inside a bucket is within
# one bucket of the true value, at most 19 % above or below it (docs/observability.md, "Precision").
BUCKET_RATIO = 2 ** 0.25


def log_buckets(low_s: float, high_s: float) -> tuple[float, ...]:
    """Upper bounds from `low_s` up to the first bound at or above `high_s`, each BUCKET_RATIO above the last."""
    bounds, bound = [], low_s
    while bound < high_s * (1 - 1e-9):
        bounds.append(float(f"{bound:.6g}"))
        bound *= BUCKET_RATIO
    bounds.append(float(f"{bound:.6g}"))
    return tuple(bounds)


# First token and whole requests: 5 ms to about 11 min; gaps between chunks and per-token times: 0.5 ms to ~16 s;
# the client's own lateness: 1 ms to ~2 min; tokens per request: 1 to 131072.
REQUEST_BUCKETS_S = log_buckets(0.005, 600.0)
GAP_BUCKETS_S = log_buckets(0.0005, 15.0)
LAG_BUCKETS_S = log_buckets(0.001, 120.0)
TOKEN_BUCKETS = tuple(float(2 ** power) for power in range(18))


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


# eq=False: a spec is one module-level object, compared and hashed by identity; hashing its fields (the bucket
# bounds) at every lookup would cost more than placing a value in its histogram.
@dataclass(frozen=True, eq=False)
class MetricSpec:
    """One exported series: `prom` is its Prometheus family name (a counter's without `_total`), `otel` its
    OpenTelemetry instrument name, `unit` the UCUM unit OTLP carries, `labels` its own labels beyond RUN_LABELS."""

    prom: str
    otel: str
    kind: Kind
    unit: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()

    @property
    def sample_name(self) -> str:
        """The name its samples carry on a Prometheus page (a counter's ends in `_total`)."""
        return f"{self.prom}_total" if self.kind == Kind.COUNTER else self.prom


def _spec(prom: str, otel: str, kind: Kind, unit: str, help_text: str, labels: tuple[str, ...] = (),
          buckets: tuple[float, ...] = ()) -> MetricSpec:
    return MetricSpec(prom, otel, kind, unit, help_text, labels, buckets)


C, G, H = Kind.COUNTER, Kind.GAUGE, Kind.HISTOGRAM

# The value of a check's verdict gauge (soak_check_verdict): higher is worse, FAIL is 3.
VERDICT_VALUES = {"PASS": 0, "SKIPPED": -1, "INCONCLUSIVE": 1, "SUSPECT": 2, "FAIL": 3, "INVALID": 4}

RUN_INFO = _spec("soak_run_info", "soak.run.info", G, "1",
                 "Always 1; the run's model and the kind of server under test as labels.", ("model", "target_kind"))
RUN_START = _spec("soak_run_start_time_seconds", "soak.run.start_time", G, "s",
                  "When the run started, Unix time.")
RUN_PLANNED = _spec("soak_run_planned_duration_seconds", "soak.run.planned_duration", G, "s",
                    "How long the run was planned to last.")
RUN_WARMUP = _spec("soak_run_warmup_seconds", "soak.run.warmup", G, "s",
                   "The warm-up the checks leave out, from the run's start.")
HEARTBEAT = _spec("soak_run_heartbeat_timestamp_seconds", "soak.run.heartbeat", G, "s",
                  "The last time the run's main loop went round, Unix time; it stops moving when the run hangs.")
FINISHED = _spec("soak_run_finished", "soak.run.finished", G, "1",
                 "1 once the run has ended and its final verdicts are set, else 0.")
REQUESTS = _spec("soak_requests", "soak.requests", C, "{request}",
                 "Finished requests by outcome: ok, error, cancelled (a deliberate disconnect), expected_error "
                 "(a failure the scenario asked for).", ("scenario", "outcome"))
ERRORS = _spec("soak_request_errors", "soak.request.errors", C, "{request}",
               "Failed requests by error class (connect, timeout, http_4xx, http_5xx, bad_stream, invalid_output).",
               ("scenario", "error_class"))
IN_FLIGHT = _spec("soak_requests_in_flight", "soak.requests.in_flight", G, "{request}",
                  "Requests sent and not yet finished.")
OFFERED = _spec("soak_requests_offered", "soak.requests.offered", C, "{request}",
                "Arrivals the open-loop schedule made: sent, or skipped because the client could not send them.")
SENT = _spec("soak_requests_sent", "soak.requests.sent", C, "{request}", "Requests the client sent.")
LATE = _spec("soak_requests_late", "soak.requests.late", C, "{request}",
             "Requests sent more than 1 s after their intended time (the client's own delay).")
LAG = _spec("soak_schedule_lag_seconds", "soak.schedule.lag", H, "s",
            "How late the client sent each request after its intended time, not counting the concurrency cap.",
            ("scenario",), LAG_BUCKETS_S)
TTFT = _spec("gen_ai_client_operation_time_to_first_chunk_seconds", "gen_ai.client.operation.time_to_first_chunk",
             H, "s", "Time to first token (chunk) of each successful request, from its intended send time.",
             ("scenario",), REQUEST_BUCKETS_S)
ITL = _spec("gen_ai_client_operation_time_per_output_chunk_seconds", "gen_ai.client.operation.time_per_output_chunk",
            H, "s", "Each gap between consecutive content chunks of a successful stream (inter-token latency).",
            ("scenario",), GAP_BUCKETS_S)
E2E = _spec("gen_ai_client_operation_duration_seconds", "gen_ai.client.operation.duration", H, "s",
            "End-to-end duration of each successful request, from its intended send time to its last byte.",
            ("scenario",), REQUEST_BUCKETS_S)
TPOT = _spec("soak_request_time_per_output_token_seconds", "soak.request.time_per_output_token", H, "s",
             "Time per output token of each successful request after its first: (end-to-end − TTFT) / (tokens − 1).",
             ("scenario",), GAP_BUCKETS_S)
TOKENS = _spec("gen_ai_client_token_usage", "gen_ai.client.token.usage", H, "{token}",
               "Tokens per finished request, input (prompt, where the server reports it) or output; the sum is the "
               "tokens so far.",
               ("scenario", "gen_ai_token_type"), TOKEN_BUCKETS)
WITHIN_SLO = _spec("soak_requests_within_slo", "soak.requests.within_slo", C, "{request}",
                   "Requests that met every --slo target (goodput); only with --slo.", ("scenario",))
EVENTS = _spec("soak_events", "soak.events", C, "{event}",
               "Run events by kind: canary results, server restarts, outages, idle probes … (docs/observability.md).",
               ("kind",))
CLIENT_CPU = _spec("soak_client_cpu_seconds", "soak.client.cpu.time", C, "s",
                   "CPU time of the soak process that drives the load (user + system).")
CLIENT_RSS = _spec("soak_client_resident_memory_bytes", "soak.client.memory.resident", G, "By",
                   "Resident memory of the soak process that drives the load.")
SERVER_RSS = _spec("soak_server_process_resident_memory_bytes", "soak.server.process.memory.resident", G, "By",
                   "Resident memory of each process of the server under test, by its role.",
                   ("process_role", "process", "pid"))
SERVER_SWAP = _spec("soak_server_process_swap_bytes", "soak.server.process.memory.swap", G, "By",
                    "Swapped-out memory of each process of the server under test, by its role.",
                    ("process_role", "process", "pid"))
KV_USAGE = _spec("soak_server_kv_cache_usage_ratio", "soak.server.kv_cache.usage", G, "1",
                 "The server's KV-cache usage (0–1) as soak last scraped it.", ("source",))
RUNNING = _spec("soak_server_requests_running", "soak.server.requests.running", G, "{request}",
                "Requests the server says it is running, as soak last scraped it.", ("source",))
WAITING = _spec("soak_server_requests_waiting", "soak.server.requests.waiting", G, "{request}",
                "Requests the server says are waiting, as soak last scraped it.", ("source",))
GPU_USED = _spec("soak_gpu_memory_used_bytes", "soak.gpu.memory.used", G, "By", "Memory in use on each GPU.",
                 ("gpu",))
GPU_PROCESS = _spec("soak_gpu_process_memory_used_bytes", "soak.gpu.process.memory.used", G, "By",
                    "GPU memory each process of the server holds.", ("gpu", "pid"))
CHECK_VERDICT = _spec("soak_check_verdict", "soak.check.verdict", G, "1",
                      "Each check's verdict at the latest look (then the final verdict): PASS 0, INCONCLUSIVE 1, "
                      "SUSPECT 2, FAIL 3, INVALID 4, SKIPPED -1.", ("check",))
LOOKS = _spec("soak_check_looks", "soak.check.looks", C, "{look}", "Looks at the run so far that judged the checks.")
OTLP_FAILURES = _spec("soak_otlp_export_failures", "soak.otlp.export.failures", C, "{export}",
                      "OTLP pushes that failed (the run goes on; one log line a minute says so).")

CATALOG: tuple[MetricSpec, ...] = (
    RUN_INFO, RUN_START, RUN_PLANNED, RUN_WARMUP, HEARTBEAT, FINISHED, REQUESTS, ERRORS, IN_FLIGHT, OFFERED, SENT,
    LATE, LAG, TTFT, ITL, E2E, TPOT, TOKENS, WITHIN_SLO, EVENTS, CLIENT_CPU, CLIENT_RSS, SERVER_RSS, SERVER_SWAP,
    KV_USAGE, RUNNING, WAITING, GPU_USED, GPU_PROCESS, CHECK_VERDICT, LOOKS, OTLP_FAILURES,
)
