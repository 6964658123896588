"""Prometheus metrics under vLLM V1's names, so soak scrapes this server exactly as it scrapes vLLM."""

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


@dataclass(frozen=True)
class EngineSnapshot:
    """The engine's gauges at one moment."""

    running: int
    waiting: int
    kv_cache_usage: float


class ServerMetrics:
    """One registry per server: the vLLM metric family plus the process collector."""

    def __init__(self, model_name: str) -> None:
        disable_created_metrics()  # vLLM's exposition has no *_created series either
        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        label = ["model_name"]

        def gauge(name: str, doc: str):
            return Gauge(name, doc, label, registry=registry).labels(model_name)

        def counter(name: str, doc: str):
            # prometheus_client adds `_total` to counter names itself.
            return Counter(name.removesuffix("_total"), doc, label, registry=registry).labels(model_name)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]):
            return Histogram(name, doc, label, buckets=buckets, registry=registry).labels(model_name)

        self.running = gauge("vllm:num_requests_running", "Requests in the running batch.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0-1).")
        self.preemptions = counter("vllm:num_preemptions_total", "Preemptions (recompute).")
        self.prompt_tokens = counter("vllm:prompt_tokens_total", "Prompt tokens prefilled.")
        self.generation_tokens = counter("vllm:generation_tokens_total", "Tokens generated.")
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
        self.kv_usage.set(snapshot.kv_cache_usage)
        return generate_latest(self.registry)
