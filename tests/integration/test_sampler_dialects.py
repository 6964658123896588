"""The sampler against the real reference server speaking each dialect: the dialect is detected from the first
scrape (or forced), its gauges land in the wide row, and a server whose processes cannot be seen has its memory
and open files read from /metrics where it serves them."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from soak.samples import ProcessReading, ServerReading
from soak.telemetry.sampler import METRICS_PROCESS_NAME, Telemetry, TelemetrySources
from support.collector import Collector

pytestmark = pytest.mark.timeout(120)

READY = re.compile(r"^SOAK_REFSERVER_READY (http://\S+)$")


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
    rows = collector.samples_of(ServerReading)
    assert all(row.scrape_ok and row.running == 0 and row.waiting == 0 for row in rows)
    assert all((row.kv_usage == 0) if kv else (row.kv_usage is None) for row in rows)
    assert all(row.generation_tokens_total == 0 for row in rows)
    telemetry.dialects.close()  # the end of the run: recorded again with what no scrape carried
    assert ("KV-cache usage" in collector.dialect_events()[-1]["not_measured"]) is not kv


def test_server_kind_forces_the_dialect(refserver):
    telemetry, collector = _telemetry(refserver("sglang"), server_kind="sglang")
    telemetry.sample()
    [event] = collector.dialect_events()
    assert event["source"] == "--server-kind"
    assert collector.samples_of(ServerReading)[0].kv_usage == 0


def test_memory_and_fds_come_from_metrics_when_no_process_is_seen(refserver):
    telemetry, collector = _telemetry(refserver("vllm"))  # as if on another host: no PIDs to sample
    telemetry.sample()
    [row] = [sample.stats for sample in collector.samples_of(ProcessReading) if sample.role == "server"]
    assert row.pid == 0 and row.name == METRICS_PROCESS_NAME
    assert row.rss_bytes > 10_000_000 and row.fds > 0


def test_a_server_serving_no_process_series_gives_no_process_row(refserver):
    telemetry, collector = _telemetry(refserver("llamacpp"))
    telemetry.sample()
    assert [sample for sample in collector.samples_of(ProcessReading) if sample.role == "server"] == []


# A server whose /metrics is off (404), answering only /v1/models — as llama-server without --metrics.
NO_METRICS = """
import http.server, json, sys
OWNER = sys.argv[1]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/v1/models":
            body = json.dumps({"object": "list", "data": [{"id": "m", "owned_by": OWNER}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.fixture
def no_metrics_server() -> Iterator:
    """Factory: a server with /metrics off whose /v1/models names `owner`; yields its base URL."""
    started: list[subprocess.Popen] = []

    def start(owner: str) -> str:
        process = subprocess.Popen([sys.executable, "-c", NO_METRICS, owner], stdout=subprocess.PIPE, text=True)
        started.append(process)
        return f"http://127.0.0.1:{int(process.stdout.readline())}"

    yield start
    for process in started:
        process.kill()
        process.wait(10)


def test_with_metrics_off_the_dialect_comes_from_v1_models_and_every_gauge_is_unmeasured(no_metrics_server):
    telemetry, collector = _telemetry(no_metrics_server("llamacpp"))
    telemetry.sample()
    telemetry.sample()
    detected = collector.dialect_events()
    assert [(e["dialect"], e["source"]) for e in detected] == [("llamacpp", "GET /v1/models (owned_by)")]
    assert not collector.samples_of(ServerReading)[0].scrape_ok
    telemetry.dialects.close()
    assert len(collector.dialect_events()[-1]["not_measured"]) == 6


def test_a_server_that_names_no_dialect_is_recorded_as_such(no_metrics_server):
    telemetry, collector = _telemetry(no_metrics_server("someone"))
    telemetry.sample()
    assert collector.dialect_events() == []
    assert "named no known server" in telemetry.dialects.describe()
    telemetry.dialects.close()
    [event] = collector.dialect_events()
    assert event["dialect"] is None and event["server"] == "the server" and len(event["not_measured"]) == 6
