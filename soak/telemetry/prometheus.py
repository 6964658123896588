"""Scraping a server's /metrics (parsed with prometheus_client) and probing /health."""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Wide-row fields of ServerSample ← Prometheus sample names (vLLM V1).
KNOWN_SERIES: dict[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
    "vllm:request_success_total": "request_success_total",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits_total",
}
# Older vLLM (V0) spelled KV usage differently; read it into the same field.
ALIASES = {"vllm:gpu_cache_usage_perc": "kv_usage"}
SCRAPE_TIMEOUT_S = 5.0


def known_lines_only(text: str) -> str:
    """The exposition lines of the known series (and their TYPE/HELP), so the 1 Hz parse stays cheap.

    prometheus_client's parser costs ≈0.1 ms a line; vLLM exposes hundreds of histogram buckets a scrape. The
    full text is parsed only when the other series are due (once a minute).
    """
    prefixes = tuple(KNOWN_SERIES) + tuple(ALIASES)
    wanted = []
    for line in text.splitlines():
        name = line.split(" ", 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else line
        if name.startswith(prefixes) and "_bucket" not in line:
            wanted.append(line)
    return "\n".join(wanted) + "\n"


def parse_metrics(text: str) -> tuple[dict[str, float], list[tuple[str, dict[str, str], float]]]:
    """Split exposition text into known fields (summed over label sets) and the other non-bucket series."""
    known: dict[str, float] = {}
    extra: list[tuple[str, dict[str, str], float]] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if math.isnan(sample.value):
                continue
            field = KNOWN_SERIES.get(sample.name) or ALIASES.get(sample.name)
            if field:
                known[field] = known.get(field, 0.0) + sample.value
            elif not sample.name.endswith(("_bucket", "_created")):
                extra.append((sample.name, dict(sample.labels), sample.value))
    return known, extra


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


def scrape(metrics_url: str, headers: dict[str, str] | None = None, with_extra: bool = True) -> dict[str, Any]:
    """One scrape: {"scrape_ok", known fields…, "extra": [...]}; a failed scrape is a row with scrape_ok False."""
    try:
        text = fetch_text(metrics_url, headers=headers)
        known, extra = parse_metrics(text if with_extra else known_lines_only(text))
    except (OSError, ValueError) as exc:
        return {"scrape_ok": False, "error": str(exc)[:200], "extra": []}
    return {"scrape_ok": True, **known, "extra": extra}
