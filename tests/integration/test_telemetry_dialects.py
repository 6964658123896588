"""The sampler against the real reference server speaking each dialect: the dialect is detected from the first
scrape (or forced), its gauges land in the wide row, and a server whose processes cannot be seen has its memory
and open files read from /metrics where it serves them."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from soak.contracts import EventKind
from soak.store.models import ProcessSample, ServerSample
from soak.telemetry.sampler import METRICS_PROCESS_NAME, Telemetry, TelemetrySources

pytestmark = pytest.mark.timeout(120)

READY = re.compile(r"^SOAK_REFSERVER_READY (http://\S+)$")


class Collector:
    """Keeps what telemetry records, in place of the database writer."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.rows_by_model: dict[type, list[dict]] = {}
        self.events: list[tuple[str, str, dict]] = []

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def rows(self, model: type, rows: list[dict], t_s: float | None = None) -> None:
        self.rows_by_model.setdefault(model, []).extend(rows)

    def event(self, kind: str, message: str = "", data: dict | None = None) -> None:
        self.events.append((kind, message, data or {}))

    def dialect_events(self) -> list[dict]:
        return [data for kind, _, data in self.events if kind == EventKind.SERVER_DIALECT]


@pytest.fixture
def refserver() -> Iterator:
    """Factory: a reference server speaking a dialect on 127.0.0.1; yields its base URL."""
    started: list[subprocess.Popen] = []

    def start(dialect: str) -> str:
        process = subprocess.Popen([sys.executable, "-m", "soak.refserver", "--port", "0", "--dialect", dialect],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        started.append(process)
        match = READY.match(process.stdout.readline().strip())
        assert match, "the reference server did not start"
        return match.group(1)

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=15)


def _telemetry(url: str, server_kind: str | None = None) -> tuple[Telemetry, Collector]:
    collector = Collector()
    sources = TelemetrySources(server_pids=lambda: [], metrics_urls=[url + "/metrics"], health_url=url,
                               server_kind=server_kind, model="soak-reference")
    return Telemetry(collector, sources, windows=None, sample_every_s=1.0, flush_every_s=1.0), collector


@pytest.mark.parametrize("dialect, kv", [("vllm", True), ("sglang", True), ("tgi", True), ("llamacpp", False)])
def test_the_dialect_is_detected_and_its_gauges_read(refserver, dialect, kv):
    telemetry, collector = _telemetry(refserver(dialect))
    telemetry.sample()
    telemetry.sample()
    [event] = collector.dialect_events()
    assert event["dialect"] == dialect and event["source"] == "the first /metrics scrape"
    rows = collector.rows_by_model[ServerSample]
    assert all(row["scrape_ok"] and row["running"] == 0 and row["waiting"] == 0 for row in rows)
    assert all((row.get("kv_usage") == 0) if kv else ("kv_usage" not in row) for row in rows)
    assert all(row["generation_tokens_total"] == 0 for row in rows)
    telemetry.dialects.close()  # the end of the run: recorded again with what no scrape carried
    assert ("KV-cache usage" in collector.dialect_events()[-1]["not_measured"]) is not kv


def test_server_kind_forces_the_dialect(refserver):
    telemetry, collector = _telemetry(refserver("sglang"), server_kind="sglang")
    telemetry.sample()
    [event] = collector.dialect_events()
    assert event["source"] == "--server-kind"
    assert collector.rows_by_model[ServerSample][0]["kv_usage"] == 0


def test_memory_and_fds_come_from_metrics_when_no_process_is_seen(refserver):
    telemetry, collector = _telemetry(refserver("vllm"))  # as if on another host: no PIDs to sample
    telemetry.sample()
    [row] = [row for row in collector.rows_by_model[ProcessSample] if row["role"] == "server"]
    assert row["role"] == "server" and row["pid"] == 0 and row["name"] == METRICS_PROCESS_NAME
    assert row["rss_bytes"] > 10_000_000 and row["fds"] > 0
    assert "process_rss_bytes" not in collector.rows_by_model[ServerSample][0]


def test_a_server_serving_no_process_series_gives_no_process_row(refserver):
    telemetry, collector = _telemetry(refserver("llamacpp"))
    telemetry.sample()
    assert [row for row in collector.rows_by_model[ProcessSample] if row["role"] == "server"] == []
