"""Scraping a server's /metrics (parsed with prometheus_client) in its dialect, and probing /health.

A `MetricsReader` reads one endpoint: the server's dialect (`soak/telemetry/dialects.py`) is forced by
`--server-kind` or detected from the first scrape whose series name one, and every later scrape reads the six
readings soak judges (running, waiting, KV usage, preemptions, prompt and generation tokens) through that
dialect's names. vLLM's extra counters and the process series (`process_resident_memory_bytes`,
`process_open_fds`, served by vLLM's own registry) are read by their fixed names.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from soak.samples import ServerReading
from soak.telemetry.dcgm import read_gpus
from soak.telemetry.dialects import DIALECTS, Dialect, detect_dialect, detect_dialect_from_models, read_gauges

# Readings of read_gauges → wide-row fields of ServerSample.
READING_FIELDS = {"running": "running", "waiting": "waiting", "kv_usage_fraction": "kv_usage",
                  "preemptions_total": "preemptions_total", "prompt_tokens_total": "prompt_tokens_total",
                  "generation_tokens_total": "generation_tokens_total", "token_latency_sum_s": "itl_sum_s",
                  "token_latency_count": "itl_count"}
# vLLM's counters beyond the six, read by name into their own ServerSample fields.
VLLM_EXTRAS: dict[str, str] = {
    "vllm:request_success_total": "request_success_total",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits_total",
}
# The fields of a scrape that are a server sample's (ServerReading), beside whether it succeeded.
SERVER_FIELDS = (*READING_FIELDS.values(), *VLLM_EXTRAS.values())
# The server process's own memory and open files, where its registry has the process collector (vLLM).
PROCESS_SERIES = {"process_resident_memory_bytes": "process_rss_bytes", "process_open_fds": "process_fds"}
SCRAPE_TIMEOUT_S = 5.0
DEFAULT_DIALECT = DIALECTS["vllm"]  # what a page naming no dialect is read as (its names are simply absent)


def dialect_names(dialect: Dialect | None) -> tuple[str, ...]:
    """Every sample name the dialect reads (all dialects' when None), plus vLLM's extras and the process series."""
    dialects = [dialect] if dialect is not None else list(DIALECTS.values())
    names: set[str] = set(VLLM_EXTRAS) | set(PROCESS_SERIES)
    for one in dialects:
        for options in (one.running, one.waiting, one.preemptions, one.prompt_tokens, one.generation_tokens):
            names.update(series.selector.name for series in options or ())
            names.update(series.minus.name for series in options or () if series.minus)
        for kv in one.kv_usage or ():
            names.update([kv.selector.name] + ([kv.total.name] if kv.total else []))
        names.update(name for mean in one.token_latency or () for name in (mean.total.name, mean.count.name))
    return tuple(sorted(names))


def known_lines_only(text: str, dialect: Dialect | None = None) -> str:
    """The exposition lines of the series the dialect reads (and their TYPE/HELP), so the 1 Hz parse stays cheap.

    prometheus_client's parser costs ≈0.1 ms a line; vLLM exposes hundreds of histogram buckets a scrape. The
    full text is parsed only when the other series are due (once a minute). A counter's family may be written
    without `_total`, so names are matched without it.
    """
    prefixes = tuple(name.removesuffix("_total") for name in dialect_names(dialect))
    wanted = []
    for line in text.splitlines():
        name = line.split(" ", 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else line
        if name.startswith(prefixes) and "_bucket" not in line:
            wanted.append(line)
    return "\n".join(wanted) + "\n"


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of exposition text that is a number."""
    return [(s.name, dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if not math.isnan(s.value)]


def read_known(samples: list[tuple[str, dict[str, str], float]], dialect: Dialect, model: str | None = None
               ) -> tuple[dict[str, float], list[tuple[str, dict[str, str], float]]]:
    """Known fields (a reading the page lacks is absent, never 0) and the other non-bucket series.

    Known fields are the dialect's readings in their wide-row names, vLLM's extra counters, and `process_rss_bytes` /
    `process_fds` from the process collector; each is summed over its label sets.
    """
    readings = read_gauges(dialect, samples, model)
    known = {READING_FIELDS[key]: value for key, value in readings.items() if value is not None}
    fixed = {**VLLM_EXTRAS, **PROCESS_SERIES}
    read = {name.removesuffix("_total") for name in dialect_names(dialect)} - set(PROCESS_SERIES)
    extra: list[tuple[str, dict[str, str], float]] = []
    for name, labels, value in samples:
        if name in fixed:
            known[fixed[name]] = known.get(fixed[name], 0.0) + value
        if name.removesuffix("_total") not in read and not name.endswith(("_bucket", "_created")):
            extra.append((name, labels, value))  # the process series too: the long table keeps them
    return known, extra


def read_page(samples: list[tuple[str, dict[str, str], float]], dialect: Dialect | None = None,
              model: str | None = None) -> tuple[Dialect | None, dict[str, float], list[tuple[str, dict[str, str], float]]]:
    """A page's parsed samples read in `dialect`, or when None in the one the page names (as vLLM's when it names
    none): (the dialect named, or None; the known readings; the extra series)."""
    found = dialect or detect_dialect(name for name, _, _ in samples)
    return (found, *read_known(samples, found or DEFAULT_DIALECT, model))


def fetch_text(url: str, timeout_s: float = SCRAPE_TIMEOUT_S, headers: dict[str, str] | None = None) -> str:
    """GET a URL and return its body as text; raises OSError/urllib errors on failure."""
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return response.read().decode("utf-8", errors="replace")


def probe_health(base_url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> bool | None:
    """True on 200 from /health, False on another status or no answer; None when the server has no /health."""
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=timeout_s) as response:
            return response.status == 200
    except urllib.error.HTTPError as exc:
        return None if exc.code == 404 else False
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Scrape:
    """One scrape of a /metrics page: whether it answered, the dialect its names showed (None when unknown or
    given), the known server fields it carried, the other series (`extra`: name, labels, value) and, on a
    dcgm-exporter page, one gpu_samples row per GPU (`dcgm.read_gpus`)."""

    ok: bool
    dialect: str | None = None
    known: dict[str, float] = field(default_factory=dict)
    extra: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def value(self, name: str) -> float | None:
        """A known field (`kv_usage`, `process_rss_bytes`, …), None when the page did not carry it."""
        return self.known.get(name)


def scrape(metrics_url: str, headers: dict[str, str] | None = None, with_extra: bool = True,
           dialect: Dialect | None = None, model: str | None = None) -> Scrape:
    """One scrape of `metrics_url`; a failed one is `ok` False with the reason in `error`.

    With no `dialect`, the page's own is detected and named in `dialect` (None when the page names none).
    """
    try:
        text = fetch_text(metrics_url, headers=headers)
        samples = parse_samples(text if with_extra else known_lines_only(text, dialect))
        gpus = read_gpus(text)  # a dcgm-exporter page's GPUs, read at every scrape
    except (OSError, ValueError) as exc:
        return Scrape(ok=False, error=str(exc)[:200])
    found, known, extra = read_page(samples, dialect, model)
    return Scrape(ok=True, dialect=found.name if found else None, known=known, extra=extra, gpus=gpus)


def server_reading(scraped: Scrape, source: str, health_ok: bool | None) -> ServerReading:
    """The server sample of one scrape of `source`, with what /health answered."""
    known = {name: scraped.known[name] for name in SERVER_FIELDS if scraped.known.get(name) is not None}
    return ServerReading(source=source, scrape_ok=scraped.ok, health_ok=health_ok, **known)


def models_dialect(base_url: str, headers: dict[str, str] | None = None) -> Dialect | None:
    """The dialect GET /v1/models names in `owned_by` (vLLM, SGLang, llama.cpp); None otherwise."""
    try:
        info = json.loads(fetch_text(base_url + "/v1/models", headers=headers))
    except (OSError, ValueError):
        return None
    return detect_dialect_from_models(info) if isinstance(info, dict) else None
