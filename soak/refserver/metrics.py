"""Prometheus metrics under vLLM V1's names (or, with `--dialect`, SGLang's, TGI's or llama.cpp's), so soak
scrapes this server exactly as it scrapes that server."""

from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

# vLLM's buckets, with finer low ends: a tiny CPU model answers in milliseconds.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                   60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
FINISH_REASONS = ("stop", "length", "abort")
DIALECTS = ("vllm", "sglang", "tgi", "llamacpp")

# What each server calls the six gauges and counters soak reads (soak/telemetry/dialects.py says where each was
# read); None where that server exposes nothing. TGI's token "counters" are the `_sum` of per-request
# histograms, exposed here as gauges that only grow; its KV usage is used tokens over the pool's tokens.
DIALECT_NAMES: dict[str, dict[str, str | None]] = {
    "vllm": {"running": "vllm:num_requests_running", "waiting": "vllm:num_requests_waiting",
             "kv_usage": "vllm:kv_cache_usage_perc", "preemptions": "vllm:num_preemptions_total",
             "prompt_tokens": "vllm:prompt_tokens_total", "generation_tokens": "vllm:generation_tokens_total"},
    "sglang": {"running": "sglang:num_running_reqs", "waiting": "sglang:num_queue_reqs",
               "kv_usage": "sglang:token_usage", "preemptions": "sglang:num_retracted_requests_total",
               "prompt_tokens": "sglang:prompt_tokens_total", "generation_tokens": "sglang:generation_tokens_total"},
    "tgi": {"running": "tgi_batch_current_size", "waiting": "tgi_queue_size",
            "kv_usage": "tgi_batch_current_max_tokens", "preemptions": None,
            "prompt_tokens": "tgi_request_input_length_sum", "generation_tokens": "tgi_request_generated_tokens_sum"},
    # Current llama-server builds expose no KV-usage gauge (removed in llama.cpp PR #13660) and never preempt.
    "llamacpp": {"running": "llamacpp:requests_processing", "waiting": "llamacpp:requests_deferred",
                 "kv_usage": None, "preemptions": None,
                 "prompt_tokens": "llamacpp:prompt_tokens_total", "generation_tokens": "llamacpp:tokens_predicted_total"},
}
LABELLED = ("vllm", "sglang")  # these label every series with model_name; TGI and llama.cpp use no labels


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's gauges at one moment."""

    running: int
    waiting: int
    kv_cache_usage: float


class _Unexposed:
    """Stands in for a series the dialect's server does not expose: updates go nowhere."""

    def inc(self, amount: float = 1.0) -> None:
        """Drop the increment."""

    def set(self, value: float) -> None:
        """Drop the value."""


class ServerMetrics:
    """One registry per server: the dialect's gauges and counters, vLLM's histograms and, for vLLM, the process
    collector (the other servers expose no process_* series)."""

    def __init__(self, model_name: str, dialect: str = "vllm", kv_tokens: int = 0) -> None:
        if dialect not in DIALECT_NAMES:
            raise ValueError(f"unknown dialect {dialect!r}; known: {', '.join(DIALECTS)}")
        disable_created_metrics()  # vLLM's exposition has no *_created series either
        self.dialect, self.kv_tokens = dialect, kv_tokens
        self.registry = registry = CollectorRegistry()
        # vLLM's own series exist only in its dialect: any other server would be detected as vLLM by them.
        vllm_registry = registry if dialect == "vllm" else CollectorRegistry()
        if dialect == "vllm":
            ProcessCollector(registry=registry)
        self._build_readings(model_name, registry)
        self._build_vllm_extras(model_name, vllm_registry)

    def _build_readings(self, model_name: str, registry: CollectorRegistry) -> None:
        """The six readings soak takes, under this dialect's names."""
        names = DIALECT_NAMES[self.dialect]
        labels = ["model_name"] if self.dialect in LABELLED else []

        def series(key: str, doc: str, kind: type = Gauge):
            name = names[key]
            if name is None:
                return _Unexposed()
            if kind is Counter:  # prometheus_client adds `_total` to counter names itself
                name = name.removesuffix("_total")
            metric = kind(name, doc, labels, registry=registry)
            return metric.labels(model_name) if labels else metric

        counter = Gauge if self.dialect == "tgi" else Counter  # TGI: histogram sums, exposed as growing gauges
        self.running = series("running", "Requests in the running batch.")
        self.waiting = series("waiting", "Requests waiting to be scheduled.")
        self.kv_usage = series("kv_usage", "KV-cache usage (0-1; TGI: tokens held by the running batch).")
        self.kv_total = Gauge("tgi_batch_max_total_tokens", "KV budget in tokens.", registry=registry) \
            if self.dialect == "tgi" else _Unexposed()
        self.preemptions = series("preemptions", "Preemptions (recompute).", Counter)
        self.prompt_tokens = series("prompt_tokens", "Prompt tokens prefilled.", counter)
        self.generation_tokens = series("generation_tokens", "Tokens generated.", counter)

    def _build_vllm_extras(self, model_name: str, registry: CollectorRegistry) -> None:
        """vLLM's prefix-cache counters, finish reasons and latency histograms (exposed in its dialect only)."""
        label = ["model_name"]

        def counter(name: str, doc: str):
            return Counter(name.removesuffix("_total"), doc, label, registry=registry).labels(model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]):
            return Histogram(name, doc, label, buckets=buckets, registry=registry).labels(model_name)

        self.prefix_queries = counter("vllm:prefix_cache_queries_total", "Tokens looked up in the prefix cache.")
        self.prefix_hits = counter("vllm:prefix_cache_hits_total", "Tokens found in the prefix cache.")
        success = Counter("vllm:request_success", "Finished requests by finish reason.",
                          ["model_name", "finished_reason"], registry=registry)
        self.finished = {reason: success.labels(model_name, reason) for reason in FINISH_REASONS}
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Time between tokens.", ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Arrival to finish.", REQUEST_BUCKETS)
        self.queue_time = histogram("vllm:request_queue_time_seconds", "Arrival to first scheduling.",
                                    REQUEST_BUCKETS)

    def render(self, snapshot: EngineSnapshot) -> bytes:
        """Prometheus text exposition, with the gauges read from `snapshot`."""
        self.running.set(snapshot.running)
        self.waiting.set(snapshot.waiting)
        if self.dialect == "tgi":
            self.kv_total.set(self.kv_tokens)
            self.kv_usage.set(round(snapshot.kv_cache_usage * self.kv_tokens))
        else:
            self.kv_usage.set(snapshot.kv_cache_usage)
        return generate_latest(self.registry)
