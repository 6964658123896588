"""The live page's fast writer (`PageLines`) writes the very bytes prometheus_client's own encoders write, in both
formats a scraper may ask for, page after page while the values move, and for a fleet's gathered pages."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families

from soak.load.records import RequestRecord
from soak.metrics.live import LiveMetrics, RunIdentity
from soak.metrics.prometheus import PageLines, RunCollector, families
from soak.samples import ProcessReading, ProcessStats, ServerReading

IDENTITY = RunIdentity(run_id="20261207T120000Z-ab12", target="127.0.0.1:8000", replica='a "quoted"\\replica',
                       soak_version="0.1.0", model="m\nodel", target_kind="reference", start_s=time.time(),
                       planned_s=3600.0, warmup_s=60.0)
ACCEPTS = ["", "text/plain;version=0.0.4", "application/openmetrics-text;version=1.0.0",
           "application/openmetrics-text; version=0.0.1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"]


def fed(requests: int) -> LiveMetrics:
    """LiveMetrics fed `requests` requests over two scenarios (one failing now and then), samples and a look."""
    live = LiveMetrics(IDENTITY)
    for index in range(requests):
        live.request(RequestRecord(
            scenario=("chat", "long prompt")[index % 2], kind="chat", intended_t=0.0, sent_t=0.0, first_token_t=0.1,
            finish_t=1.0, ttft_ms=5.0 + index, e2e_ms=50.0 + 3 * index, itl_ms=(1.0, 2.5, 40.0), queue_ms=0.0,
            lag_ms=index % 7, output_tokens=4, prompt_tokens=100 + index,
            error_class="http_5xx" if index % 9 == 0 else None))
    live.samples([ProcessReading("server", ProcessStats(pid=10, name="VLLM::EngineCore", rss_bytes=2**30 + requests)),
                  ServerReading(source="http://127.0.0.1:8000/metrics", scrape_ok=True, running=2.0, kv_usage=0.125)],
                 t_s=1.0)
    live.look({"leak.rss": "FAIL", "creep.ttft_p99": "PASS"})
    live.tick()
    return live


def registry_of(live: LiveMetrics) -> CollectorRegistry:
    collector = RunCollector()
    collector.sources = lambda: families(live.snapshot(), IDENTITY.labels)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


@pytest.mark.parametrize("accept", ACCEPTS)
def test_the_page_is_prometheus_clients_own_bytes_as_the_values_move(accept):
    encoder, content_type = choose_encoder(accept)
    lines, live = PageLines(), fed(40)
    registry = registry_of(live)
    for more in range(3):
        metrics = list(registry.collect())
        assert lines.render(encoder, content_type, metrics) == encoder(_Fixed(metrics))
        for index in range(7 * (more + 1)):  # new values, and (the first time) new series
            live.request(RequestRecord(scenario="another", kind="chat", intended_t=0.0, sent_t=0.0,
                                       first_token_t=None, finish_t=1.0, ttft_ms=None, e2e_ms=20.0 + index,
                                       itl_ms=(), queue_ms=0.0, lag_ms=1.0, output_tokens=0, prompt_tokens=None,
                                       error_class="timeout"))


def test_an_empty_page_is_the_encoders_empty_page():
    for accept in ACCEPTS:
        encoder, content_type = choose_encoder(accept)
        assert PageLines().render(encoder, content_type, []) == encoder(_Fixed([]))


def test_a_fleets_gathered_pages_are_written_alike():
    """Families parsed back from replicas' pages (as the fleet's page reads them) go through the same writer."""
    encoder, content_type = choose_encoder("")
    text = encoder(registry_of(fed(25))).decode()
    parsed = list(text_string_to_metric_families(text))
    assert PageLines().render(encoder, content_type, parsed) == encoder(_Fixed(parsed))


class _Fixed:
    def __init__(self, metrics: list) -> None:
        self.metrics = metrics

    def collect(self) -> list:
        return self.metrics
