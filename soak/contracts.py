"""The typed contracts between a run's stages: verdicts, run events and their kinds, `summary.json` and progress.

A leaf module (pydantic and the standard library only), so the analysis, the conductor, telemetry, the load
generator and the CLI can all share it without importing one another.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from soak.errors import StorageError

SUMMARY_SCHEMA = "soak.run.summary/1"
# Every schema summary.json was ever written in, oldest first (docs/summary.md, "Schema versions").
READABLE_SUMMARY_SCHEMAS = ("soak.summary/1", SUMMARY_SCHEMA)

# An int stays an int and a float a float, so summary.json reads back exactly as it was written.
Number = int | float


class EventSink(Protocol):
    """Where a stage records a run event: the run's Recorder (`soak/store/recorder.py`), or a test's list."""

    def event(self, kind: str, message: str = "", data: dict[str, Any] | None = None) -> None: ...


class RecordObserver(Protocol):
    """What else sees the records a run's Recorder queues (the exported metrics, `soak/metrics/live.py`)."""

    def samples(self, samples: Any, t_s: float) -> None: ...

    def event(self, kind: str) -> None: ...


class Verdict(StrEnum):
    """A check's verdict, and the run's (never SKIPPED; SUSPECT when a required check is: docs/gates.md)."""

    PASS = "PASS"
    SUSPECT = "SUSPECT"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    SKIPPED = "SKIPPED"
    INVALID = "INVALID"


class EventKind(StrEnum):
    """Every kind of run event (the `events` table); tests/unit/test_contracts_events.py checks each is emitted."""

    # the conductor
    SERVER_START = "server_start"
    CRASH = "crash"
    RESTART = "restart"
    RESTART_FAILED = "restart_failed"
    OUTAGE_START = "outage_start"
    OUTAGE_END = "outage_end"
    # /health failed and the route to the server was lost, not the server (soak/target/reachability.py)
    NETWORK_OUTAGE_START = "network_outage_start"
    NETWORK_OUTAGE_END = "network_outage_end"
    RUN_END = "run_end"
    EARLY_STOP = "early_stop"
    VRAM_NOT_RELEASED = "vram_not_released"
    # the database refused commits, or a volume was full: rows held in memory meanwhile (docs/robustness.md)
    STORAGE_OUTAGE_START = "storage_outage_start"
    STORAGE_OUTAGE_END = "storage_outage_end"
    # telemetry
    NO_GPU = "no_gpu"
    GPU_XID = "gpu_xid"
    GPU_DCGM = "gpu_dcgm"  # a dcgm-exporter page first read: its GPUs, and any XID already showing before the run
    PROBE_READING = "probe_reading"
    SERVER_LOG_ERROR = "server_log_error"
    # a matched line the server wrote answering a request soak sent to be refused (a capability probe): its answer
    SERVER_LOG_PROVOKED = "server_log_provoked"
    SERVER_LOG_SCANNED = "server_log_scanned"
    SERVER_DIALECT = "server_dialect"  # whose /metrics names were read: forced, detected, or none found
    SERVER_PROCESSES = "server_processes"  # which server processes are sampled, and how they were found
    # leak forensics (soak/run/forensics.py): a tracker's window, and what it found in each process it watched
    FORENSICS_START = "forensics_start"
    FORENSICS_END = "forensics_end"
    FORENSICS = "forensics"
    # the golden-output canary
    CANARY = "canary"
    CANARY_MISMATCH = "canary_mismatch"
    CANARY_TIMEOUT = "canary_timeout"
    CANARY_ERROR = "canary_error"
    # the load generator
    WARMUP_END = "warmup_end"
    PHASE = "phase"
    PROBE_START = "probe_start"
    PROBE_DRAINED = "probe_drained"
    PROBE_DRAIN_TIMEOUT = "probe_drain_timeout"
    PROBE_END = "probe_end"
    PROBE_DRAIN_STREAMING = "probe_drain_streaming"  # the conductor: chunks arrived during a timed-out drain
    LOAD_PAUSED = "load_paused"
    LOAD_RESUMED = "load_resumed"
    CONTEXT_LENGTH = "context_length"
    CAPABILITIES = "capabilities"  # what the server accepted when asked before load; scenarios dropped for it
    TRACE = "trace"  # the --trace replayed: its name, format, rows, speed, loops, its own rate and the sent one
    WORKERS_JOINED = "workers_joined"  # the load workers (local and `soak worker`) the run started with
    WORKER_LOST = "worker_lost"  # a load worker's process or heartbeat went away; its share moved to the rest
    # LoRA churn (soak/load/lora.py): an adapter unloaded or loaded on schedule, or the server's refusal of either
    LORA_LOAD = "lora_load"
    LORA_UNLOAD = "lora_unload"
    LORA_ERROR = "lora_error"
    # the conductor's outcome ledger (soak/run/ledger.py)
    ERROR_MESSAGE = "error_message"
    VALIDATION_GAP = "validation_gap"


@dataclass(frozen=True)
class Event:
    """A run event as the store reads it back (`Store.read_events`) and the analysis and report take it.

    `kind` is an `EventKind` (a kind written by an older soak stays a plain str; both compare equal to the
    string); `data` the decoded JSON, {} when none; `at` the wall-clock ISO time, when known.
    """

    t_s: float
    kind: EventKind | str
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The event as JSON-ready fields (`kind` as its plain string)."""
        return {"t_s": self.t_s, "at": self.at, "kind": str(self.kind), "message": self.message,
                "data": dict(self.data)}


class ServerLogClass(StrEnum):
    """What a matched server-log line is (`server_log_error` events; docs/gates.md, `server.log_errors`)."""

    OOM = "oom"  # an out-of-memory kill or allocation failure
    ENGINE_DEAD = "engine_dead"  # EngineDeadError: the engine loop died under the API server
    CUDA_ERROR = "cuda_error"
    FATAL = "fatal"  # a server's own fatal line (a dialect's table), a segfault, a fatal Python error
    TRACEBACK = "traceback"
    NAN = "nan"  # NaN/inf warnings


# The header vLLM and most servers log a request by: soak sends its own id there with each request that may be
# refused on purpose, so what the server logs for it is known as soak's doing.
REQUEST_ID_HEADER = "X-Request-Id"


def soak_request_id(purpose: str, what: str) -> str:
    """`soak-<purpose>-<what>-<12 hex>`: e.g. `soak-probe-images-…`, `soak-provoke-bad_input-…`, `soak-canary-golden-…`."""
    return f"soak-{purpose}-{what}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class ProvokedExchange:
    """A request soak sent expecting a refusal (a capability probe, a scenario's deliberately bad request) or one the
    server refused that soak judges elsewhere (a canary): its request id, and how its logged lines are known.

    A probe knows the bytes the server's log grew by while it was answered (offsets into the file with that inode).
    A request of the load, answered among others, knows the message the server refused it with and when soak saw
    the refusal (`noticed_t`, soak's wall clock): a line whose exception says that message, read within
    `MESSAGE_WINDOW_S` of it, is its answer. A line naming the request id is its answer in every case. What the
    server logs for it is the request's answer, not a server fault (docs/gates.md, `server.log_errors`)."""

    MESSAGE_WINDOW_S: ClassVar[float] = 15.0
    MIN_MESSAGE_CHARS: ClassVar[int] = 12  # a shorter message ("Bad Request") says too little to match a line by

    request_id: str
    what: str  # e.g. "capability probe images", "bad_input request expecting a refusal"
    log_inode: int | None = None
    log_from: int | None = None
    log_to: int | None = None
    message: str | None = None
    noticed_t: float | None = None

    def holds(self, inode: int | None, offset: int | None) -> bool:
        """Whether the log line at `offset` of the file `inode` was written while this request was answered."""
        if None in (self.log_inode, self.log_from, self.log_to, inode, offset):
            return False
        return inode == self.log_inode and self.log_from <= offset < self.log_to

    def names_in(self, texts: Iterable[str]) -> bool:
        """Whether one of `texts` (a logged line, its exception, the lines after it) names this request's id."""
        return bool(self.request_id) and any(self.request_id in text for text in texts)

    def says(self, exception: str | None, read_t: float | None) -> bool:
        """Whether a logged exception read at `read_t` states this refusal's message, near when soak saw it."""
        if not exception or self.message is None or self.noticed_t is None or read_t is None:
            return False
        if abs(read_t - self.noticed_t) > self.MESSAGE_WINDOW_S:
            return False
        text = " ".join(exception.split())
        return any(self._same_message(said) for said in (text, text.partition(": ")[2]))  # "ValueError: text"

    def _same_message(self, said: str) -> bool:
        shorter, longer = sorted((said, " ".join(self.message.split())), key=len)
        return len(shorter) >= self.MIN_MESSAGE_CHARS and shorter[:200] in longer


# -- summary.json ---------------------------------------------------------------------------------------------
class SummaryTarget(BaseModel):
    """The server the run loaded."""

    kind: str = Field(description="`reference`, `vllm` or `external`")
    url: str | None = Field(description="base URL (no /v1)")
    model: str | None = Field(description="the model name requests were sent with")
    dialect: str | None = Field(None, description="whose /metrics names were read (`vllm`, `sglang`, `tgi`, "
                                "`llamacpp`, …; docs/servers.md), from `--server-kind` or detected")
    not_measured: list[str] | None = Field(None, description="what the server did not let soak measure, and why")

    @model_serializer(mode="wrap")
    def _drop_unset_optionals(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Like a finding's optional keys, `dialect` and `not_measured` are left out rather than written as null.
        data = handler(self)
        return {key: value for key, value in data.items() if value is not None or key in ("kind", "url", "model")}


class SummaryTrend(BaseModel):
    """A finding's fitted line (`trend`): in "log" space exp(intercept + slope_per_s·(t − t0_s)), in "linear" space
    intercept + slope_per_s·(t − t0_s), t in seconds since the run's start."""

    slope_per_s: Number | None = Field(description="null when nothing could be fitted")
    intercept: Number | None
    t0_s: Number
    space: str = Field(description="`linear` or `log`")
    series: str | None = Field(None, description="the chart's series, when the check's name does not say it")

    @model_serializer(mode="wrap")
    def _drop_unset_series(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None or key != "series"}


class SummaryExhaustion(BaseModel):
    """When a leak's headroom runs out at the measured slope (`exhaustion`)."""

    resource: str = Field(description="e.g. `host memory`, `GPU memory`")
    headroom: Number = Field(description="in the resource's unit")
    hours: Number | None = Field(description="null when the slope is not upward")


class SummaryPerRequest(BaseModel):
    """A leak's slope divided by the request rate (`per_request`): what each request leaves behind."""

    value: Number
    ci: list[Number | None]
    unit: str = Field(description="e.g. `bytes/request`")


class SummaryScenarioGrowth(BaseModel):
    """One scenario's growth per request (`time`: per second) in a leak's attribution (`attribution[]`)."""

    scenario: str = Field(description="the scenario (`cancel (cancelled)` for its cancelled requests), or `time`")
    per_request: Number
    ci: list[Number | None]
    unit: str
    share: Number = Field(description="the share of the growth the attribution fit explains")


class SummaryStep(BaseModel):
    """The most likely upward step of a series and the gates it passed (`per_process[].step`)."""

    t_s: Number
    before: Number = Field(description="the median level before the step")
    after: Number = Field(description="the median level after it")
    shift: Number
    p_value: Number
    min_shift: Number = Field(description="the least shift that counts")
    found: bool = Field(description="every gate passed")
    gates: dict[str, bool]


class SummaryStair(BaseModel):
    """One lasting upward step of a staircase (`per_process[].net_growth.stairs[]`)."""

    t_s: Number
    before: Number
    after: Number
    shift: Number


class SummaryStaircase(BaseModel):
    """A series' levels split where its level changed, from the first settled level to the last
    (`per_process[].net_growth`)."""

    first: Number
    last: Number
    net: Number = Field(description="last − first")
    stepped: Number = Field(description="the stairs' shifts added up")
    within: Number = Field(description="growth inside the segments")
    min_step: Number
    levels_vs_line: Number | None = Field(None, description="squared residue around the levels ÷ around one "
                                          "straight line; absent from summaries written before soak measured it")
    is_staircase: bool
    stairs: list[SummaryStair]


class SummaryWarmupCut(BaseModel):
    """Where judging started on one series (`per_process[].warmup`)."""

    t_s: Number
    index: int = Field(description="the first point kept")
    still_settling: bool
    method: str = Field(description="`mser-5` (found in the data) or `configured`")
    floor_s: Number = Field(description="the configured warm-up")


class SummaryProcessGrowth(BaseModel):
    """One server process's own leak trend (`per_process[]`), per hour in `unit`; every key is written, null when
    unset (value, ci, detection_limit and trend: too few points were fitted)."""

    verdict: Verdict
    value: Number | None
    ci: list[Number | None] | None
    detection_limit: Number | None = Field(None, description="absent from summaries written before soak set it")
    mk_p: Number | None = Field(description="the Mann-Kendall p-value")
    points: int
    step: SummaryStep | None = Field(None, description="a step found; absent from the earliest summaries")
    net_growth: SummaryStaircase | None = Field(None, description="growth in lasting steps that failed; absent from "
                                                "the earliest summaries")
    warmup: SummaryWarmupCut | None = Field(None, description="absent from the earliest summaries")
    pid: int
    name: str
    unit: str
    floor: Number | None = Field(description="the lowest reading")
    trend: SummaryTrend | None


FIXED_FINDING_KEYS = ("check", "verdict", "value", "unit", "ci", "threshold", "evidence")


class SummaryFinding(BaseModel):
    """One check's verdict: seven fixed keys, then the optional ones a check sets (absent when unset)."""

    check: str = Field(description="the check's name, e.g. `leak.rss`")
    verdict: Verdict
    value: Number | None = Field(description="the number the verdict rests on, in `unit`")
    unit: str
    ci: list[Number | None] | None = Field(description="[low, high] confidence interval of `value`")
    threshold: Number | None = Field(description="the practical threshold `value` is judged against")
    evidence: str = Field(description="one or two sentences saying why")
    per_process: list[SummaryProcessGrowth] | None = Field(None, description="leak checks: each process's own trend")
    per_request: SummaryPerRequest | None = Field(None, description="leak checks: slope ÷ request rate, with CI")
    percentile_used: str | None = Field(None, description="creep checks: the percentile the series uses")
    trend: SummaryTrend | None = Field(None, description="the fitted line a chart draws")
    detection_limit: Number | None = Field(
        None, description="trend checks: the smallest change the run rules out, in `unit` (the CI's upper end)")
    exhaustion: SummaryExhaustion | None = Field(
        None, description="leak checks: resource, headroom, hours until it runs out at the slope")
    attribution: list[SummaryScenarioGrowth] | None = Field(
        None, description="leak checks: growth per request of each scenario, with CI")
    next_step: str | None = Field(
        None, description="any verdict but PASS and SKIPPED: one line saying what would settle the check or where to "
        "look, e.g. a run length that would rule the threshold out, or the flag that would measure it")
    details: dict[str, Any] | None = Field(None, description="check-specific figures")

    @model_serializer(mode="wrap")
    def _drop_unset_optionals(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # summary.json leaves an optional key out rather than writing null.
        data = handler(self)
        return {key: value for key, value in data.items() if value is not None or key in FIXED_FINDING_KEYS}


class ErrorsByClass(BaseModel):
    """Errors per class (soak.store.models.ERROR_CLASSES)."""

    connect: int
    timeout: int
    http_4xx: int
    http_5xx: int
    bad_stream: int
    invalid_output: int | None = Field(None, description="answers that failed their scenario's validation; "
                                                         "absent from summaries written before soak counted it")

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class Totals(BaseModel):
    """Request counts over every window of the run, warm-up included."""

    requests: int
    errors: int = Field(description="deliberate cancels and the expected 4xx of `bad_input` excluded")
    error_rate: float = Field(description="errors ÷ (requests − cancelled)")
    output_tokens: int
    cancelled: int
    errors_by_class: ErrorsByClass


class Percentiles(BaseModel):
    """Exact percentiles (ms) of the merged per-window HDR histograms after warm-up."""

    p50: float | None
    p95: float | None
    p99: float | None
    count: int = Field(description="samples merged")


class LatencyMs(BaseModel):
    """Run-wide latency percentiles per metric."""

    ttft: Percentiles
    itl: Percentiles
    e2e: Percentiles


class SummaryContext(BaseModel):
    """The context length every request was sized to fit (prompt + output tokens)."""

    tokens: int
    source: str = Field(description="`--max-context` (the setting), `GET /v1/models`, `GET /props`, … or the default")
    stated: int | None = Field(description="what the server states, when it states one")


class SummaryTrace(BaseModel):
    """The request trace the run replayed (`--trace`; docs/load.md, "Trace replay"), and what was sent of it."""

    name: str = Field(description="the trace file's name")
    format: str = Field(description="`mooncake`, `azure` or `burstgpt`")
    rows: int = Field(description="requests in one loop of the trace")
    speed: float = Field(description="`--trace-speed`")
    loops: float = Field(description="times the trace plays in the run at that speed")
    trace_rate_rps: float = Field(description="the trace's own mean arrival rate")
    planned_rate_rps: float = Field(description="trace_rate_rps × speed")
    sent_rate_rps: float | None = Field(description="requests sent ÷ the run's duration; null before it ends")
    trace_prompt_tokens: float = Field(description="the trace's mean prompt tokens per row")
    sent_prompt_tokens: float | None = Field(description="mean prompt tokens per answered request, as the server "
                                             "counted them; null without any")
    trace_output_tokens: float = Field(description="the trace's mean output tokens per row")
    sent_output_tokens: float | None = Field(description="mean output tokens per answered request; null without any")


class SummaryCapability(BaseModel):
    """One feature as the server answered when asked before the load (docs/load.md, "Capabilities")."""

    supported: bool | None = Field(description="accepted, refused (a 4xx), or null: the probe could not tell")
    answer: str = Field(description="what the server answered, e.g. `HTTP 400: …`")
    names: list[str] = Field(default_factory=list, description="adapters: the ones /v1/models listed")
    logged: list[str] = Field(default_factory=list, description="what the server logged answering the probe (a "
                              "traceback's exception line): its answer, never a `server.log_errors` finding")


class DroppedScenario(BaseModel):
    """A scenario left out of the mix (--skip-unsupported) because the server refused what it needs."""

    scenario: str
    feature: str = Field(description="what it needs: `json_schema`, `tools`, `images`, …")
    answer: str = Field(description="the server's answer to the feature's probe")


class SummaryCapabilities(BaseModel):
    """What the server accepted before the load, and the scenarios dropped for what it refused."""

    features: dict[str, SummaryCapability] = Field(description="by feature: `adapters`, `json_schema`, `tools`, "
                                                   "`images`")
    dropped: list[DroppedScenario] = Field(default_factory=list)


class SummaryHeldStack(BaseModel):
    """One line of the server's own code that allocated memory still held at a forensics window's end."""

    function: str
    file: str = Field(description="from its package on when installed (`vllm/v1/…`), else as the process saw it")
    line: int
    caller: str | None = Field(description="the frame that called it, `function (file:line)`")
    bytes: int = Field(description="allocated in the window and still held at its end")
    allocations: int
    share: Number = Field(description="of all the window still held")


class SummaryForensics(BaseModel):
    """One server process a forensics window watched (docs/forensics.md)."""

    pid: int | None = Field(description="null for a window that found no process to watch")
    process: str = Field(description="the process's name")
    role: str = Field(description="`engine`, `api`, `worker` or `process`")
    method: str = Field(description="`memray` (held stacks and mappings) or `smaps` (mappings only)")
    started_s: Number | None = Field(description="seconds into the run")
    ended_s: Number | None
    held_bytes: int | None = Field(description="allocated in the window and still held at its end (memray)")
    named: bool = Field(description="one line holds more than noise (it leads `stacks`)")
    stacks: list[SummaryHeldStack] = Field(description="the lines holding most, largest first")
    growth_by_mapping: str | None = Field(description="where the process grew, by kind of mapping (smaps)")
    sentence: str = Field(description="the sentence the report and the leak.rss finding give")
    flamegraph: str | None = Field(description="memray's flame graph of what was held, relative to the run folder")
    capture: str | None = Field(description="the memray capture, relative to the run folder")
    refusals: list[str] = Field(description="each reason part of the window could not be recorded")


@dataclass(frozen=True)
class SentCounts:
    """What a run's request windows (all scenarios, `*`) say was sent and answered, summed over the run."""

    requests: int
    answered: int
    prompt_tokens: int
    output_tokens: int


def trace_summary(trace: dict[str, Any], sent: SentCounts, duration_s: float | None) -> SummaryTrace:
    """A `trace` event's figures beside what the run sent (`sent`)."""
    answered = sent.answered
    return SummaryTrace(
        name=trace["name"], format=trace["format"], rows=trace["rows"], speed=trace["speed"], loops=trace["loops"],
        trace_rate_rps=trace["trace_rate_rps"], planned_rate_rps=trace["planned_rate_rps"],
        sent_rate_rps=sent.requests / duration_s if duration_s else None,
        trace_prompt_tokens=trace["mean_input_tokens"], trace_output_tokens=trace["mean_output_tokens"],
        sent_prompt_tokens=sent.prompt_tokens / answered if answered else None,
        sent_output_tokens=sent.output_tokens / answered if answered else None)


class ErrorMessage(BaseModel):
    """Failed requests with one exact (truncated, scrubbed) message."""

    count: int
    error_class: str = Field(description="an error class, or `other` for messages beyond the first 20 distinct ones")
    status_code: int | None
    message: str = Field(description="e.g. `HTTP 400: …` with the server's message, at most 300 characters")
    scenarios: list[str]


class ValidationGap(BaseModel):
    """Requests answered 200 where the scenario expected a refusal (`Expect`), per scenario and expectation."""

    count: int
    scenario: str
    expectation: str
    status_code: int | None
    max_output_tokens: int | None = Field(description="the most output tokens such an answer carried")


class LostWorker(BaseModel):
    """A load worker lost mid-run (its `worker_lost` event)."""

    index: int
    host: str
    pid: int
    why: str = Field(description="`its process exited with code N`, `it left the master` (`… after handing over its "
                     "last records` for a `soak worker` that drained on SIGINT/SIGTERM) or `its heartbeat stopped`")
    t_s: float = Field(description="when the master noticed, in seconds since the run's start")
    unseen_s: float | None = Field(description="how long it had been silent then: its share was not sent and its "
                                   "unreported requests are missing; windows overlapping that silence are left out "
                                   "of trends")
    on_loss: Literal["redistributed", "run_ended"] = Field(
        description="`redistributed`: its share went to the remaining workers; `run_ended`: none remained")


class SummaryWorkers(BaseModel):
    """The run's load workers (docs/load.md, "Workers on other hosts")."""

    joined: int = Field(description="workers that started the run")
    remote: int = Field(description="of them, `soak worker` processes that joined the master (the rest were local)")
    lost: list[LostWorker] = Field(default_factory=list)


class GoodputWindow(BaseModel):
    """One window after warm-up: how many of its finished requests met every SLO target."""

    index: int = Field(description="the window's index (0 is the first after warm-up)")
    start_s: float = Field(description="seconds since the run's start")
    end_s: float
    requests: int = Field(description="finished requests, all scenarios (cancelled ones left out)")
    good: int = Field(description="of them, those that met every target (failed ones never do)")
    share: float = Field(description="good ÷ requests")


class SummaryGoodput(BaseModel):
    """Goodput under `--slo`: the share of requests that met every target, over the run and per window."""

    slo_ms: dict[str, float] = Field(description="the targets in ms by metric: `ttft`, `itl`, `tpot`, `e2e`")
    requests: int = Field(description="finished requests after warm-up, all scenarios (cancelled ones left out)")
    good: int = Field(description="of them, those that met every target")
    share: float | None = Field(description="good ÷ requests (null without requests)")
    windows: list[GoodputWindow] = Field(description="each window after warm-up that had requests, in order")


class Summary(BaseModel):
    """`summary.json`: what scripts and CI read of a finished run."""

    model_config = ConfigDict(populate_by_name=True)

    # `schema` would shadow a BaseModel attribute, so the field goes by an alias.
    schema_id: Literal[SUMMARY_SCHEMA] = Field(SUMMARY_SCHEMA, alias="schema")
    run_id: str
    status: str = Field(description="`completed`, `aborted`, `crashed` (or `running` for a report mid-run)")
    started_at: str = Field(description="ISO-8601 UTC")
    ended_at: str | None
    duration_s: float | None
    planned_duration_s: float
    target: SummaryTarget
    labels: dict[str, str] | None = Field(None, description="the run's `--label` KEY=VALUE tags")
    verdict: Verdict
    verdict_reason: str
    findings: list[SummaryFinding]
    totals: Totals
    latency_ms: LatencyMs
    context: SummaryContext | None = Field(description="null for a run that did not record it")
    error_messages: list[ErrorMessage] = Field(default_factory=list, description="most frequent first")
    validation_gaps: list[ValidationGap] = Field(default_factory=list)
    workers: SummaryWorkers | None = Field(None, description="the load workers, for a run that had some")
    goodput: SummaryGoodput | None = Field(None, description="with `--slo`: the share of requests meeting it")
    trace: SummaryTrace | None = Field(None, description="with `--trace`: the trace replayed, and what was sent")
    capabilities: SummaryCapabilities | None = Field(None, description="what the server accepted when asked before "
                                                     "the load, and the scenarios dropped for it")
    forensics: list[SummaryForensics] | None = Field(None, description="leak forensics: each server process a "
                                                     "tracker watched, and where its memory went")
    report_html: str | None
    stop_reason: str | None = Field(None, description="why the run ended: `completed`, `stopped by SIGINT`, "
                                    "`server exited with code N`, `stopped early: …` (--stop-on-fail)")
    in_progress: bool | None = Field(None, description="true in the report of a run still under way (`soak report` "
                                     "or the live view); absent from a finished run's summary")

    @model_serializer(mode="wrap")
    def _drop_unset_labels(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A run without labels leaves the key out, so older summaries read back byte for byte.
        data = handler(self)
        if data.get("labels") is None:
            data.pop("labels", None)
        if not data.get("in_progress"):  # likewise `in_progress`, written only while a run is under way
            data.pop("in_progress", None)
        if data.get("stop_reason") is None:  # and `stop_reason`, absent from runs recorded before it
            data.pop("stop_reason", None)
        if data.get("workers") is None:  # and `workers`, for a run whose load ran in soak's own process
            data.pop("workers", None)
        if data.get("goodput") is None:  # and `goodput`, for a run without --slo
            data.pop("goodput", None)
        if data.get("trace") is None:  # and `trace`, for a run without --trace
            data.pop("trace", None)
        if data.get("capabilities") is None:  # and `capabilities`, for a run recorded before soak asked
            data.pop("capabilities", None)
        if not data.get("forensics"):  # and `forensics`, for a run no tracker watched
            data.pop("forensics", None)
        return data

    def finding(self, check: str) -> SummaryFinding | None:
        """The finding of `check`, if the run has one."""
        return next((finding for finding in self.findings if finding.check == check), None)

    def to_json_dict(self) -> dict[str, Any]:
        """The summary.json document as plain JSON values, keys in the documented order."""
        return self.model_dump(mode="json", by_alias=True)


# -- progress -------------------------------------------------------------------------------------------------
class Stage(StrEnum):
    """Where a run stands."""

    STARTING = "starting"
    WARM_UP = "warm-up"
    MEASURING = "measuring"
    FINALISING = "finalising"
    STORAGE_FAILURE = "storage_failure"


class P99Ms(BaseModel):
    """P99 latencies (ms) since the warm-up ended."""

    ttft: float | None = None
    e2e: float | None = None


class Progress(BaseModel):
    """A run's progress: the live line of `soak start` and `soak status` (read from the database) alike.

    Counts and P99s cover the requests since the warm-up ended. A field a source cannot know stays None:
    `in_flight` only the live run knows, `heartbeat_at` and `verdict` only the database.
    """

    stage: Stage | None = None
    run_id: str | None = None
    status: str | None = Field(None, description="the run row's status: running, completed, aborted, crashed")
    verdict: Verdict | None = None
    target: str | None = Field(None, description="the target's kind, while it starts")
    message: str | None = Field(None, description="what failed, at a storage failure")
    elapsed_s: float | None = None
    duration_s: float | None = Field(None, description="the planned duration")
    remaining_s: float | None = None
    requests: int | None = None
    errors: int | None = None
    rate_rps: float | None = None
    p99_ms: P99Ms | None = None
    server_rss_bytes: int | None = None
    in_flight: int | None = None
    heartbeat_at: str | None = None
    out_dir: str | None = None


def stage_at(elapsed_s: float, warmup_s: float) -> Stage:
    """The stage of a running run `elapsed_s` after its start."""
    return Stage.WARM_UP if elapsed_s < warmup_s else Stage.MEASURING


def measured_rate_rps(requests: int, elapsed_s: float, warmup_s: float) -> float | None:
    """Requests per second since the warm-up ended; None during it."""
    measured_s = elapsed_s - warmup_s
    return requests / measured_s if measured_s > 0 else None


def read_summary(data: dict[str, Any]) -> dict[str, Any]:
    """A summary.json of any schema soak ever wrote, in today's shape; ValueError for one it never wrote."""
    schema = data.get("schema")
    if schema == "soak.summary/1":  # the same fields, named before soak/run/ existed, and no `context` yet
        return {**data, "schema": SUMMARY_SCHEMA, "context": data.get("context")}
    if schema is not None and schema != SUMMARY_SCHEMA:  # a partial document without one is taken as today's
        raise ValueError(f"summary schema {schema!r} is not one soak writes or wrote "
                         f"({', '.join(READABLE_SUMMARY_SCHEMAS)})")
    return data


def loads_summary(text: str | None) -> dict[str, Any] | None:
    """`read_summary` of a stored summary's JSON text; None for none."""
    return read_summary(json.loads(text)) if text else None


def parse_summary(data: dict[str, Any]) -> Summary:
    """A summary.json document of any schema soak ever wrote, as today's typed `Summary` (ValueError for one
    that is not a summary)."""
    return Summary.model_validate(read_summary(data))


def stored_summary(text: str | None, run_id: str) -> Summary | None:
    """`parse_summary` of the JSON text stored with run `run_id`; None for none, StorageError (one line naming the
    run and the first field at fault) for text that is no summary soak wrote."""
    if not text:
        return None
    try:
        return parse_summary(json.loads(text))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise StorageError(f"the summary stored with run {run_id} cannot be read: {where}: {error['msg']}") from None
    except ValueError as exc:  # not JSON, or a schema soak never wrote
        raise StorageError(f"the summary stored with run {run_id} cannot be read: {exc}") from None



FLEET_SUMMARY_SCHEMA = "soak.fleet.summary/1"


class FleetOutlier(BaseModel):
    """A replica whose figure stands out among its peers' under the same load (docs/gates.md, "Fleets")."""

    metric: str = Field(description="`leak.rss slope`, `P99 TTFT` or `P99 E2E`")
    value: float
    median: float = Field(description="the median over the replicas that have the figure")
    robust_z: float = Field(description="(value − median) ÷ (1.4826 × MAD, at least the floor)")
    unit: str


class ReplicaOutcome(BaseModel):
    """One replica of a fleet run: its own run, verdict and the figures the fleet table compares."""

    name: str
    url: str
    weight: float
    role: Literal["replica", "router", "observed"] = Field(
        default="replica", description="replica: sent its share of the load; router: a --router's run, sent all of "
        "it; observed: a replica behind that router, sampled and judged on server evidence only")
    run_id: str | None = Field(description="null when the replica's run never opened")
    status: str | None
    verdict: Verdict = Field(description="its run's verdict, raised to SUSPECT when it is an outlier")
    verdict_reason: str
    leak_slope: float | None = Field(description="leak.rss's slope, in `leak_unit`")
    leak_unit: str | None
    ttft_p99_ms: float | None
    e2e_p99_ms: float | None
    latency_samples: int | None = Field(description="the fewer of the TTFT and E2E samples the P99s rest on")
    requests: int | None
    errors: int | None
    outliers: list[FleetOutlier] = Field(default_factory=list)
    report_html: str | None


class FleetSummary(BaseModel):
    """The summary.json of a fleet run (`soak start` with several targets): the worst replica's verdict, named."""

    model_config = ConfigDict(populate_by_name=True)

    schema_id: Literal[FLEET_SUMMARY_SCHEMA] = Field(FLEET_SUMMARY_SCHEMA, alias="schema")
    fleet_id: str
    status: str
    started_at: str
    ended_at: str | None
    planned_duration_s: float
    verdict: Verdict
    verdict_reason: str
    replicas: list[ReplicaOutcome]
    report_html: str | None

    def to_json_dict(self) -> dict[str, Any]:
        """The fleet's summary.json document as plain JSON values."""
        return self.model_dump(mode="json", by_alias=True)
