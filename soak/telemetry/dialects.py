"""Server "dialects": where each inference server puts the few numbers soak reads from its /metrics.

soak needs six readings from a server, whatever the server: requests running, requests waiting, KV-cache usage
as a fraction (0..1), preemptions (a counter), and prompt and generation token counters — and, where the server
measures it, its own time between tokens (a total and a count). Each server spells them
differently, some with label selectors (Triton's TensorRT-LLM backend puts five quantities in one family told
apart by a label), some as a percentage, a ratio or used/total blocks, and some not at all. A `Dialect` is one
server's spelling; `DIALECTS` holds the known ones; `detect_dialect` picks one from the metric names a /metrics
page shows; `read_gauges` turns parsed samples into the readings; `context_length_from` reads the context
length from the JSON the server's info endpoints return.

Every name below was read in the server's own source (or its own documentation where so marked); the comment
beside it says where. Nothing here does I/O: the caller fetches and parses (see `samples_of`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


class Kind(StrEnum):
    """How a series behaves over time, so the caller knows whether to take it as is or as a rate."""

    GAUGE = "gauge"
    COUNTER = "counter"
    # The `_sum` of a histogram of per-request sizes: only ever grows, read like a counter. It moves when a
    # request finishes (or is validated), not token by token.
    HISTOGRAM_SUM = "histogram_sum"


class KvScale(StrEnum):
    """What the KV-usage number means, and so how it becomes a fraction."""

    RATIO = "ratio"  # already 0..1 (vLLM's "_perc" gauges are ratios despite the name)
    PERCENT = "percent"  # 0..100, divided by 100
    USED_OVER_TOTAL = "used_over_total"  # two series, used / total (blocks or tokens)


@dataclass(frozen=True)
class Selector:
    """One series: a sample name as exposed on the wire and the label values it must carry (others are free)."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return _same_name(self.name, name) and all(labels.get(k) == v for k, v in self.labels)

    def __str__(self) -> str:
        if not self.labels:
            return self.name
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in self.labels) + "}"


@dataclass(frozen=True)
class Series:
    """How to read one count or counter. `minus`, when set, is subtracted (TRT-LLM's waiting before v0.18)."""

    selector: Selector
    kind: Kind
    source: str
    minus: Selector | None = None


@dataclass(frozen=True)
class KvSeries:
    """How to read KV-cache usage; `total` is the denominator when `scale` is USED_OVER_TOTAL."""

    selector: Selector
    scale: KvScale
    source: str
    total: Selector | None = None


@dataclass(frozen=True)
class MeanSeries:
    """A running total and its count (a histogram's `_sum` and `_count`, or two counters): over any interval their
    changes give the mean — here the server's own time between two tokens."""

    total: Selector
    count: Selector
    source: str


@dataclass(frozen=True)
class Dialect:
    """One server's spelling of the readings soak needs.

    Each reading is a tuple of alternatives tried in order (the first whose series are on the page wins), so
    one dialect covers a server's older and newer names; None where the server exposes nothing for it.
    """

    name: str
    server: str
    prefix: str  # every server-specific series on its /metrics starts with this
    running: tuple[Series, ...] | None
    waiting: tuple[Series, ...] | None
    kv_usage: tuple[KvSeries, ...] | None
    preemptions: tuple[Series, ...] | None
    prompt_tokens: tuple[Series, ...] | None
    generation_tokens: tuple[Series, ...] | None
    model_label: str | None  # the label naming the served model on its series, if any
    owned_by: str | None  # what /v1/models says in `owned_by`, when that names the server
    process_metrics: bool  # does its /metrics carry process_resident_memory_bytes / process_open_fds
    notes: str = ""
    # The generation-token counter moves when a request finishes, not token by token (SGLang's counters, TGI's
    # and Triton's histogram sums): a long request keeps it still while it streams.
    tokens_at_finish: bool = False
    # The server's own time between tokens, as a total and a count (None: the server exposes none).
    token_latency: tuple[MeanSeries, ...] | None = None


def _mean(name: str, source: str, total: str = "_sum", count: str = "_count") -> MeanSeries:
    """A histogram's (or a counter pair's) total and count, named `name` + the suffixes."""
    return MeanSeries(Selector(name + total), Selector(name + count), source)


def _s(name: str, kind: Kind, source: str, **labels: str) -> Series:
    return Series(Selector(name, tuple(sorted(labels.items()))), kind, source)


G, C, H = Kind.GAUGE, Kind.COUNTER, Kind.HISTOGRAM_SUM

# vLLM. V1: vllm/v1/metrics/loggers.py (PrometheusStatLogger); V0: vllm/engine/metrics.py (class Metrics).
# Labels: model_name (V0 and V1) and engine (V1). Counters are prometheus_client Counters, so the family
# `vllm:num_preemptions` is exposed as the sample `vllm:num_preemptions_total` (V0 named it with `_total`;
# the wire name is the same).
_VLLM_COMMON = {
    "running": (_s("vllm:num_requests_running", G, "vLLM v1/metrics/loggers.py; engine/metrics.py (V0)"),),
    "waiting": (_s("vllm:num_requests_waiting", G, "vLLM v1/metrics/loggers.py; engine/metrics.py (V0)"),),
    "preemptions": (_s("vllm:num_preemptions_total", C, "vLLM v1/metrics/loggers.py; engine/metrics.py (V0)"),),
    "prompt_tokens": (_s("vllm:prompt_tokens_total", C, "vLLM v1/metrics/loggers.py; engine/metrics.py (V0)"),),
    "generation_tokens": (
        _s("vllm:generation_tokens_total", C, "vLLM v1/metrics/loggers.py; engine/metrics.py (V0)"),
    ),
    # Histograms of the gaps between a request's tokens: named inter_token_latency since 0.11, before it
    # time_per_output_token (which 0.11 kept, deprecated, beside the new name).
    "token_latency": (
        _mean("vllm:inter_token_latency_seconds", "vLLM v1/metrics/loggers.py (0.11+)"),
        _mean("vllm:time_per_output_token_seconds", "vLLM v1/metrics/loggers.py; engine/metrics.py (V0)"),
    ),
}

VLLM = Dialect(
    name="vllm",
    server="vLLM (V1 engine, 0.9 and later)",
    prefix="vllm:",
    # "KV-cache usage. 1 means 100 percent usage." (vLLM v1/metrics/loggers.py, since 0.9).
    kv_usage=(KvSeries(Selector("vllm:kv_cache_usage_perc"), KvScale.RATIO, "vLLM v1/metrics/loggers.py"),),
    model_label="model_name",
    owned_by="vllm",  # vLLM entrypoints/openai protocol ModelCard
    process_metrics=True,  # prometheus_client default registry (one API server; absent in multiprocess mode)
    notes="0.9 and 0.10 also expose the deprecated vllm:gpu_cache_usage_perc next to kv_cache_usage_perc.",
    **_VLLM_COMMON,
)

VLLM_V0 = Dialect(
    name="vllm-v0",
    server="vLLM before 0.9 (V0 engine, or V1 before the rename)",
    prefix="vllm:",
    # "GPU KV-cache usage. 1 means 100 percent usage." (vLLM engine/metrics.py; early v1/metrics/loggers.py).
    kv_usage=(KvSeries(Selector("vllm:gpu_cache_usage_perc"), KvScale.RATIO, "vLLM engine/metrics.py (V0)"),),
    model_label="model_name",
    owned_by="vllm",
    process_metrics=True,
    notes="V0 also has vllm:num_requests_swapped and vllm:cpu_cache_usage_perc (CPU swap), not read.",
    **_VLLM_COMMON,
)

# SGLang, python/sglang/srt/metrics/collector.py: SchedulerMetricsCollector (scheduler gauges) and
# TokenizerMetricsCollector (token counters). Exposed only with --enable-metrics. Labels: model_name, and in
# newer versions engine_type, tp_rank, pp_rank, dp_rank, moe_ep_rank.
SGLANG = Dialect(
    name="sglang",
    server="SGLang",
    prefix="sglang:",
    running=(_s("sglang:num_running_reqs", G, "SGLang srt/metrics/collector.py SchedulerMetricsCollector"),),
    waiting=(_s("sglang:num_queue_reqs", G, "SGLang srt/metrics/collector.py SchedulerMetricsCollector"),),
    # "The token usage": used KV-pool tokens over the pool size (max_total_num_tokens), a ratio.
    kv_usage=(KvSeries(Selector("sglang:token_usage"), KvScale.RATIO, "SGLang srt/metrics/collector.py"),),
    # Retraction is SGLang's preemption. The counter is in newer releases only; the older
    # `sglang:num_retracted_reqs` is a gauge of the last step's retractions, not a running total, so it is
    # not read as one.
    preemptions=(
        _s("sglang:num_retracted_requests_total", C, "SGLang srt/metrics/collector.py (newer releases)"),
    ),
    prompt_tokens=(
        _s("sglang:prompt_tokens_total", C, "SGLang srt/metrics/collector.py TokenizerMetricsCollector"),
    ),
    generation_tokens=(
        _s("sglang:generation_tokens_total", C, "SGLang srt/metrics/collector.py TokenizerMetricsCollector"),
    ),
    model_label="model_name",
    owned_by="sglang",  # SGLang entrypoints/openai/protocol.py ModelCard
    # srt/utils add_prometheus_middleware serves a fresh registry with only the MultiProcessCollector.
    process_metrics=False,
    notes="Token counters move when a request finishes. Multiprocess gauges without mode get a pid label.",
    tokens_at_finish=True,
    # Observed per output token batch in the tokenizer manager (newer: inter_token_latency; older: per-request
    # time_per_output_token).
    token_latency=(
        _mean("sglang:inter_token_latency_seconds", "SGLang srt/metrics/collector.py TokenizerMetricsCollector"),
        _mean("sglang:time_per_output_token_seconds", "SGLang srt/metrics/collector.py (older releases)"),
    ),
)

# Hugging Face TGI: the Rust router (metrics crate, metrics-exporter-prometheus). Gauges in backends/v3/src
# (backend.rs, queue.rs, lib.rs); histograms in router/src (server.rs, validation.rs). No labels. Also on
# --prometheus-port (9000). TGI has no token counters: the `_sum` of its per-request histograms is used.
TGI = Dialect(
    name="tgi",
    server="Hugging Face Text Generation Inference",
    prefix="tgi_",
    running=(_s("tgi_batch_current_size", G, "TGI backends/v3/src/backend.rs"),),
    waiting=(_s("tgi_queue_size", G, "TGI backends/v3/src/queue.rs"),),
    # Tokens held by the running batch (flash models: its KV blocks x block size, server flash_causal_lm.py)
    # over the KV budget found at warm-up (`tgi_batch_max_total_tokens`, backends/v3/src/lib.rs; v3 only).
    kv_usage=(
        KvSeries(
            Selector("tgi_batch_current_max_tokens"),
            KvScale.USED_OVER_TOTAL,
            "TGI backends/v3/src/backend.rs and lib.rs (derived)",
            total=Selector("tgi_batch_max_total_tokens"),
        ),
    ),
    preemptions=None,
    # Recorded at validation (router/src/validation.rs), so it includes requests that later fail.
    prompt_tokens=(_s("tgi_request_input_length_sum", H, "TGI router/src/validation.rs"),),
    # Recorded when a request succeeds (router/src/server.rs).
    generation_tokens=(_s("tgi_request_generated_tokens_sum", H, "TGI router/src/server.rs"),),
    model_label=None,
    owned_by=None,  # TGI's /v1/models puts the model id in owned_by
    process_metrics=False,
    notes="Context length from GET /info (max_total_tokens).",
    tokens_at_finish=True,
    # Each successful request's mean time per token (router/src/server.rs): the mean over requests, not tokens.
    token_latency=(_mean("tgi_request_mean_time_per_token_duration", "TGI router/src/server.rs"),),
)

# llama.cpp llama-server: the /metrics handler in tools/server (server.cpp, later server-context.cpp) writes
# `llamacpp:` + name by hand. Only with --metrics. No labels.
LLAMACPP = Dialect(
    name="llamacpp",
    server="llama.cpp llama-server",
    prefix="llamacpp:",
    running=(_s("llamacpp:requests_processing", G, "llama.cpp tools/server metrics handler"),),
    waiting=(_s("llamacpp:requests_deferred", G, "llama.cpp tools/server metrics handler"),),
    # "KV-cache usage. 1 means 100 percent usage." Removed from llama-server in May 2025 (PR #13660, with
    # llamacpp:kv_cache_tokens); present only on older builds.
    kv_usage=(
        KvSeries(Selector("llamacpp:kv_cache_usage_ratio"), KvScale.RATIO, "llama.cpp server, older builds"),
    ),
    preemptions=None,
    prompt_tokens=(_s("llamacpp:prompt_tokens_total", C, "llama.cpp tools/server metrics handler"),),
    generation_tokens=(_s("llamacpp:tokens_predicted_total", C, "llama.cpp tools/server metrics handler"),),
    model_label=None,
    owned_by="llamacpp",  # llama.cpp tools/server /v1/models
    process_metrics=False,
    notes="Router mode needs ?model=NAME on /metrics.",
    # Seconds spent predicting and tokens predicted, two counters: seconds per generated token.
    token_latency=(_mean("llamacpp:tokens_predicted", "llama.cpp tools/server metrics handler",
                         total="_seconds_total", count="_total"),),
)

# NVIDIA Triton with the TensorRT-LLM backend: tensorrtllm_backend inflight_batcher_llm/src/
# custom_metrics_reporter/custom_metrics_reporter.cc (names, label keys) and model_instance_state.cc (values).
# Labels: model, version, plus the category label. Triton serves /metrics on port 8002; its OpenAI frontend
# (server repo python/openai) serves it on its own port too.
_TRT_REQ = "nv_trt_llm_request_metrics"
_TRT_KV = "nv_trt_llm_kv_cache_block_metrics"
_TRT_SRC = "tensorrtllm_backend custom_metrics_reporter.cc"
TRTLLM = Dialect(
    name="trtllm",
    server="NVIDIA Triton + TensorRT-LLM backend",
    prefix="nv_trt_llm_",
    # `scheduled` is the batch of the current iteration; `active` also counts requests the executor holds
    # but did not schedule, which is what `waiting` (v0.18+) is: active - scheduled.
    running=(_s(_TRT_REQ, G, _TRT_SRC, request_type="scheduled"),),
    waiting=(
        _s(_TRT_REQ, G, _TRT_SRC + " (v0.18+)", request_type="waiting"),
        Series(
            Selector(_TRT_REQ, (("request_type", "active"),)),
            G,
            _TRT_SRC + " (before v0.18: active - scheduled)",
            minus=Selector(_TRT_REQ, (("request_type", "scheduled"),)),
        ),
    ),
    kv_usage=(
        KvSeries(Selector(_TRT_KV, (("kv_cache_block_type", "fraction"),)), KvScale.RATIO, _TRT_SRC + " (v0.16+)"),
        KvSeries(
            Selector(_TRT_KV, (("kv_cache_block_type", "used"),)),
            KvScale.USED_OVER_TOTAL,
            _TRT_SRC,
            total=Selector(_TRT_KV, (("kv_cache_block_type", "max"),)),
        ),
    ),
    # `inflight_batcher_specific_metric="paused_requests"` is a per-iteration gauge, not a counter.
    preemptions=None,
    # Histograms of per-response token counts (v0.16+), observed when a request completes.
    prompt_tokens=(_s("nv_llm_input_token_len_sum", H, _TRT_SRC, response_metric_type="total_input_tokens"),),
    generation_tokens=(
        _s("nv_llm_output_token_len_sum", H, _TRT_SRC, response_metric_type="total_output_tokens"),
    ),
    model_label="model",
    owned_by=None,  # the OpenAI frontend says "Triton Inference Server" whatever the backend
    process_metrics=False,
    notes="Neither /v1/models nor the KServe API states the engine's max sequence length.",
    tokens_at_finish=True,
)

DIALECTS: dict[str, Dialect] = {d.name: d for d in (VLLM, VLLM_V0, SGLANG, TGI, LLAMACPP, TRTLLM)}

READINGS = ("running", "waiting", "kv_usage_fraction", "preemptions_total", "prompt_tokens_total",
            "generation_tokens_total", "token_latency_sum_s", "token_latency_count")


def _same_name(wanted: str, seen: str) -> bool:
    """Sample names match, ignoring a trailing `_total`.

    prometheus_client's parser adds `_total` to a counter sample that lacks it (TGI's metrics-exporter writes
    counters without it), and a family is named without it; the wire name may be either.
    """
    return wanted == seen or wanted.removesuffix("_total") == seen.removesuffix("_total")


def detect_dialect(metric_names: Iterable[str]) -> Dialect | None:
    """The dialect whose prefix most of the given metric (family or sample) names carry; None if none does.

    vLLM V1 and V0 share a prefix: `vllm:kv_cache_usage_perc` means V1 (0.9 and 0.10 show both KV names),
    `vllm:gpu_cache_usage_perc` alone means V0 (or V1 before 0.9, which reads the same).
    """
    names = set(metric_names)
    best: Dialect | None = None
    best_count = 0
    for dialect in DIALECTS.values():
        if dialect is VLLM_V0:
            continue
        count = sum(1 for name in names if name.startswith(dialect.prefix))
        if count > best_count:
            best, best_count = dialect, count
    if best is VLLM and "vllm:kv_cache_usage_perc" not in names and "vllm:gpu_cache_usage_perc" in names:
        return VLLM_V0
    return best


def detect_dialect_from_models(info: Mapping[str, Any]) -> Dialect | None:
    """The dialect a /v1/models answer names in `owned_by` (vLLM, SGLang, llama.cpp say who they are)."""
    owners = {card.get("owned_by") for card in _cards(info)}
    for dialect in DIALECTS.values():
        if dialect.owned_by and dialect.owned_by in owners:
            return dialect
    return None


def samples_of(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in exposition text, as prometheus_client parses it."""
    return [(s.name, dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples]


Sample = Sequence[Any]  # (name, labels, value, ...): a tuple or prometheus_client's Sample


def read_gauges(dialect: Dialect, samples: Iterable[Sample], model: str | None = None) -> dict[str, float | None]:
    """The readings (`READINGS`) from parsed samples; None for each the server does not expose (or this page lacks).

    Counts and counters are summed over the label sets that match (several engines, DP ranks or models);
    a KV ratio or percentage is averaged; used/total is summed on both sides before dividing. With `model`,
    only series whose model label (if they have one) names that model are read.
    """
    rows = []
    for sample in samples:
        name, labels, value = sample[0], sample[1], float(sample[2])
        if math.isnan(value):
            continue
        if model is not None and dialect.model_label and labels.get(dialect.model_label, model) != model:
            continue
        rows.append((name, labels, value))
    return {
        "running": _first_count(dialect.running, rows),
        "waiting": _first_count(dialect.waiting, rows),
        "kv_usage_fraction": _first_kv(dialect.kv_usage, rows),
        "preemptions_total": _first_count(dialect.preemptions, rows),
        "prompt_tokens_total": _first_count(dialect.prompt_tokens, rows),
        "generation_tokens_total": _first_count(dialect.generation_tokens, rows),
        **_first_mean(dialect.token_latency, rows),
    }


def _first_mean(options: tuple[MeanSeries, ...] | None, rows: list) -> dict[str, float | None]:
    """The total and count of the first option whose two series are both on the page, each summed over its
    label sets; both None when none is."""
    for mean in options or ():
        totals, counts = _values(mean.total, rows), _values(mean.count, rows)
        if totals and counts:
            return {"token_latency_sum_s": sum(totals), "token_latency_count": sum(counts)}
    return {"token_latency_sum_s": None, "token_latency_count": None}


def _values(selector: Selector, rows: list[tuple[str, Mapping[str, str], float]]) -> list[float]:
    return [value for name, labels, value in rows if selector.matches(name, labels)]


def _first_count(options: tuple[Series, ...] | None, rows: list) -> float | None:
    for series in options or ():
        values = _values(series.selector, rows)
        if not values:
            continue
        if series.minus is None:
            return sum(values)
        subtract = _values(series.minus, rows)
        if subtract:
            return max(sum(values) - sum(subtract), 0.0)
    return None


def _first_kv(options: tuple[KvSeries, ...] | None, rows: list) -> float | None:
    for kv in options or ():
        values = _values(kv.selector, rows)
        if not values:
            continue
        if kv.scale is KvScale.USED_OVER_TOTAL:
            totals = _values(kv.total, rows) if kv.total else []
            if not totals:
                continue
            total = sum(totals)
            return sum(values) / total if total > 0 else None
        mean = sum(values) / len(values)
        return mean / 100.0 if kv.scale is KvScale.PERCENT else mean
    return None


def _cards(info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Model cards of a /v1/models answer (or the single card of /v1/models/{id})."""
    data = info.get("data")
    if isinstance(data, list):
        return [card for card in data if isinstance(card, Mapping)]
    return [info] if "id" in info else []


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 and float(value).is_integer() else None


def _path(info: Mapping[str, Any], *keys: str) -> Any:
    node: Any = info
    for key in keys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def context_length_from(info: Mapping[str, Any], dialect_name: str | None, model: str | None = None) -> int | None:
    """The context length (prompt + output tokens a request may span) stated in a server-info answer.

    Shapes read, by dialect:
      vllm, vllm-v0, sglang: /v1/models `data[].max_model_len`; sglang also /get_server_info `context_length`
        (null unless --context-length was given; its `max_total_num_tokens` is the KV pool size, not this).
      tgi: /info `max_total_tokens`.
      llamacpp: /props `default_generation_settings.n_ctx` (per slot), else /v1/models `data[].meta.n_ctx`,
        else `meta.n_ctx_train` (what the model was trained for; the server may run with less).
      trtllm: Triton states none; a `max_model_len` card is still read if a frontend adds one.
    With `model`, the card whose id is `model` is read first. None when the answer does not say.
    """
    if dialect_name is not None and dialect_name not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect_name!r}; known: {', '.join(DIALECTS)}")
    cards = _cards(info)
    if model is not None:
        # The asked model's card first; a LoRA card says nothing of length, its base model's card does.
        cards = sorted(cards, key=lambda card: card.get("id") != model)
    candidates: list[Any] = [card.get("max_model_len") for card in cards]
    if dialect_name in (None, "sglang"):
        candidates.append(info.get("context_length"))
    if dialect_name in (None, "tgi"):
        candidates.append(info.get("max_total_tokens"))
    if dialect_name in (None, "llamacpp"):
        candidates.append(_path(info, "default_generation_settings", "n_ctx"))
        candidates += [_path(card, "meta", "n_ctx") for card in cards]
        candidates += [_path(card, "meta", "n_ctx_train") for card in cards]
    for candidate in candidates:
        length = _positive_int(candidate)
        if length is not None:
            return length
    return None
