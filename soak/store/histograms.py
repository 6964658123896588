"""The HDR histograms latency windows are stored in: their range, text encoding, and merged percentiles.

Telemetry records into them, the store keeps them as text (`latency_windows.hist`), and every reader —
the analysis's loader, the summary, the report, `soak status` — merges them back; so they live here, below all.
"""

from __future__ import annotations

import base64
import weakref
from collections.abc import Iterable
from typing import Any

from hdrh.codec import HdrHistogramEncoder
from hdrh.histogram import HdrHistogram

LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS = 1, 3_600_000_000, 3


class AcyclicHistogram(HdrHistogram):
    """An `HdrHistogram` that reference counting alone frees, the moment it is dropped.

    hdrh's encoder points back at its histogram. That cycle waits for the cyclic collector's oldest
    generation, which a long-lived process runs rarely: every closed window's 92 KiB count arrays piled up
    until then (+100 MiB per million requests, bench/harness_memory.py). The encoder gets a weak proxy instead.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.encoder.histogram = weakref.proxy(self)


def new_histogram() -> HdrHistogram:
    """An HDR histogram of microseconds from 1 µs to 1 h at 3 significant digits."""
    return AcyclicHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS, word_size=4)  # 4-byte counts: half the memory


def encode_histogram(histogram: HdrHistogram) -> str:
    """Compressed, base64 text form (what `HdrHistogram.decode` reads)."""
    encoded = histogram.encode()
    return encoded.decode("ascii") if isinstance(encoded, bytes) else base64.b64encode(encoded).decode("ascii")


def decode_histogram(text: str) -> HdrHistogram:
    """Inverse of `encode_histogram` (what `HdrHistogram.decode` does, into an `AcyclicHistogram`)."""
    payload = HdrHistogramEncoder.decode(text.encode("ascii"))
    header = payload.payload
    return AcyclicHistogram(header.lowest_trackable_value, header.highest_trackable_value,
                            header.significant_figures, hdr_payload=payload)


def merged_percentiles(hists: Iterable[str | None]) -> dict[str, float | int | None]:
    """P50/P95/P99 (ms) of the merged histograms of latency windows (their `hist` texts; None where empty)."""
    merged = new_histogram()
    for text in hists:
        if text:
            merged.add(decode_histogram(text))
    if merged.get_total_count() == 0:
        return {"p50": None, "p95": None, "p99": None, "count": 0}
    return {f"p{p}": round(merged.get_value_at_percentile(p) / 1000.0, 3) for p in (50, 95, 99)} | {
        "count": merged.get_total_count()}
