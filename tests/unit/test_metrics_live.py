"""The run's live series (soak/metrics/live.py) and the two ways out of it: the Prometheus page (prometheus.py),
parsed back by prometheus_client's own parser, and the OTLP export (otlp.py), encoded by OpenTelemetry's own
encoder. Real records, real SLOs, real samples; `soak start --metrics-bind` on a taken port through the CLI."""

from __future__ import annotations

import logging
import socket
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from soak.errors import ConfigError
from soak.load.health import LoadCounters
from soak.load.records import RequestRecord
from soak.metrics import catalog
from soak.metrics.catalog import RUN_LABELS, VERDICT_VALUES
from soak.metrics.live import Histogram, LiveMetrics, RunIdentity, Snapshot, outcome_of
from soak.metrics.otlp import OtlpPush, metrics_data, metrics_url
from soak.metrics.prometheus import MetricsEndpoint, families
from soak.samples import GpuProcessReading, GpuReading, ProcessReading, ProcessStats, ServerReading
from soak.slo import parse_slo

REPO = Path(__file__).resolve().parents[2]
IDENTITY = RunIdentity(run_id="R1", target="127.0.0.1:8000", replica="", soak_version="9.9", model="tiny",
                       target_kind="reference", start_s=1_700_000_000.0, planned_s=600.0, warmup_s=60.0)
SOURCE = "http://127.0.0.1:8000/metrics"


def record(**fields) -> RequestRecord:
    """A successful streamed chat request: TTFT 100 ms, three gaps, E2E 400 ms, 4 output and 12 prompt tokens."""
    base = dict(scenario="chat", kind="chat", intended_t=1_700_000_010.0, sent_t=1_700_000_010.002,
                first_token_t=1_700_000_010.1, finish_t=1_700_000_010.4, ttft_ms=100.0, e2e_ms=400.0,
                itl_ms=(50.0, 100.0, 150.0), queue_ms=0.0, lag_ms=2.0, output_tokens=4, prompt_tokens=12)
    return RequestRecord(**(base | fields))


def failed(error_class: str, **fields) -> RequestRecord:
    """A request that ended in `error_class`, with no token and no gap."""
    return record(error_class=error_class, ttft_ms=None, first_token_t=None, itl_ms=(), output_tokens=0,
                  e2e_ms=30.0, **fields)


def live(slo: str | None = None, counters: LoadCounters | None = None, roots: list[int] | None = None) -> LiveMetrics:
    """A LiveMetrics of IDENTITY, with an SLO, the load's counters and the server's root PIDs as given."""
    return LiveMetrics(IDENTITY, parse_slo(slo) if slo else None, counters=(lambda: counters) if counters else None,
                       roots=lambda: list(roots or []))


def server_process(pid: int, name: str = "python", rss: int | None = 100, swap: int | None = 0) -> ProcessReading:
    return ProcessReading("server", ProcessStats(pid=pid, name=name, rss_bytes=rss, swap_bytes=swap))


# -- requests ---------------------------------------------------------------------------------------------------
def test_each_outcome_is_counted_under_its_name():
    metrics = live()
    for each in (record(), record(), failed("http_5xx", status_code=500), failed("timeout"), failed("cancelled"),
                 failed("http_4xx", status_code=400, expected_error=True)):
        metrics.request(each)
    series = metrics.snapshot().series
    assert series(catalog.REQUESTS) == {("chat", "ok"): 2.0, ("chat", "error"): 2.0, ("chat", "cancelled"): 1.0,
                                        ("chat", "expected_error"): 1.0}
    # only real errors have a class: a deliberate cancel and an expected 4xx are not errors
    assert series(catalog.ERRORS) == {("chat", "http_5xx"): 1.0, ("chat", "timeout"): 1.0}


def test_outcome_of_follows_the_windows_reading_of_a_record():
    assert [outcome_of(r) for r in (record(), failed("connect"), failed("cancelled"),
                                    failed("http_4xx", expected_error=True))] == ["ok", "error", "cancelled",
                                                                                   "expected_error"]


def test_a_successful_request_feeds_every_latency_histogram_in_seconds():
    metrics = live()
    metrics.request(record())
    series = metrics.snapshot().series
    ttft, e2e = series(catalog.TTFT)[("chat",)], series(catalog.E2E)[("chat",)]
    assert (ttft.count, ttft.sum) == (1, pytest.approx(0.1))
    assert (e2e.count, e2e.sum) == (1, pytest.approx(0.4))
    itl = series(catalog.ITL)[("chat",)]
    assert itl.count == 3 and itl.sum == pytest.approx(0.3)
    assert (itl.min, itl.max) == (pytest.approx(0.05), pytest.approx(0.15))
    tpot = series(catalog.TPOT)[("chat",)]
    assert tpot.sum == pytest.approx((0.4 - 0.1) / 3)  # (E2E − TTFT) / (tokens − 1)
    lag = series(catalog.LAG)[("chat",)]
    assert lag.sum == pytest.approx(0.002)


def test_failed_requests_add_lag_and_tokens_but_no_latency():
    metrics = live()
    for each in (failed("http_5xx"), failed("cancelled"), failed("http_4xx", expected_error=True)):
        metrics.request(each)
    series = metrics.snapshot().series
    for spec in (catalog.TTFT, catalog.E2E, catalog.ITL, catalog.TPOT):
        assert series(spec) == {}, spec.prom
    assert series(catalog.LAG)[("chat",)].count == 3
    assert series(catalog.TOKENS)[("chat", "output")].count == 3  # an answer of no tokens is still 0 tokens


def test_a_negative_lag_counts_as_none_and_one_token_has_no_tpot():
    metrics = live()
    metrics.request(record(lag_ms=-3.0, output_tokens=1, itl_ms=()))
    series = metrics.snapshot().series
    assert series(catalog.LAG)[("chat",)].sum == 0.0
    assert series(catalog.TPOT) == {} and series(catalog.ITL) == {}
    assert series(catalog.TTFT)[("chat",)].count == 1


def test_token_usage_counts_input_only_where_the_server_said_it():
    metrics = live()
    metrics.request(record(prompt_tokens=None, output_tokens=7))
    metrics.request(record(prompt_tokens=12, output_tokens=4))
    tokens = metrics.snapshot().series(catalog.TOKENS)
    assert (tokens[("chat", "input")].count, tokens[("chat", "input")].sum) == (1, 12.0)
    assert (tokens[("chat", "output")].count, tokens[("chat", "output")].sum) == (2, 11.0)


def test_a_non_streamed_answer_has_a_duration_but_no_first_chunk():
    metrics = live()
    metrics.request(record(ttft_ms=None, first_token_t=None, itl_ms=(), scenario="non_streaming"))
    series = metrics.snapshot().series
    assert series(catalog.E2E)[("non_streaming",)].count == 1
    assert series(catalog.TTFT) == {} and series(catalog.TPOT) == {}


def test_within_slo_counts_what_the_slo_itself_calls_good():
    metrics = live(slo="ttft=200ms,e2e=1s")
    slo = parse_slo("ttft=200ms,e2e=1s")
    requests = [record(), record(ttft_ms=300.0), record(e2e_ms=1500.0), failed("http_5xx"), failed("cancelled"),
                failed("http_4xx", expected_error=True), record(scenario="other")]
    for each in requests:
        metrics.request(each)
    within = metrics.snapshot().series(catalog.WITHIN_SLO)
    assert within == {("chat",): 2.0, ("other",): 1.0}  # the good one and the expected refusal; and other's
    assert sum(within.values()) == sum(slo.met(each) for each in requests)


def test_without_an_slo_nothing_is_counted_within_it():
    metrics = live()
    metrics.request(record())
    assert metrics.snapshot().series(catalog.WITHIN_SLO) == {}


def test_scenarios_are_series_of_their_own():
    metrics = live()
    metrics.request(record(scenario="a"))
    metrics.request(record(scenario="b"))
    metrics.request(record(scenario="b"))
    assert {labels: h.count for labels, h in metrics.snapshot().series(catalog.E2E).items()} == {("a",): 1, ("b",): 2}


# -- histograms -------------------------------------------------------------------------------------------------
def test_a_value_on_a_bound_falls_in_that_bounds_bucket():
    histogram = Histogram((1.0, 2.0, 4.0))
    for value in (0.5, 1.0, 1.5, 2.0, 4.0, 4.000001, 100.0):
        histogram.observe(value)
    assert histogram.counts == [2, 2, 1, 2]  # ≤1: 0.5, 1.0 | ≤2: 1.5, 2.0 | ≤4: 4.0 | +Inf: the rest
    assert histogram.cumulative() == [2, 4, 5, 7]
    assert histogram.count == 7 and histogram.sum == pytest.approx(113.000001)
    assert (histogram.min, histogram.max) == (0.5, 100.0)


def test_every_catalog_bound_is_its_own_buckets_upper_edge():
    for spec in (catalog.TTFT, catalog.ITL, catalog.LAG, catalog.TOKENS):
        histogram = Histogram(spec.buckets)
        for bound in spec.buckets:
            histogram.observe(bound)
        assert histogram.counts == [1] * len(spec.buckets) + [0], spec.prom


def test_observing_values_all_at_once_counts_as_one_by_one():
    values = [0.0004, 0.0005, 0.001, 0.0123, 2.0, 15.0, 16.0]
    one_by_one, at_once = Histogram(catalog.GAP_BUCKETS_S), Histogram(catalog.GAP_BUCKETS_S)
    for value in values:
        one_by_one.observe(value)
    at_once.observe_all(values)
    at_once.observe_all([])
    assert at_once.counts == one_by_one.counts and at_once.count == one_by_one.count == 7
    assert (at_once.min, at_once.max) == (one_by_one.min, one_by_one.max) == (0.0004, 16.0)
    assert at_once.sum == pytest.approx(one_by_one.sum)


def test_a_histogram_copy_does_not_move_with_the_original():
    histogram = Histogram((1.0,))
    histogram.observe(0.5)
    twin = histogram.copy()
    histogram.observe(3.0)
    assert (twin.counts, twin.count, twin.max) == ([1, 0], 1, 0.5)


def test_a_snapshot_is_a_copy_of_the_numbers_at_that_instant():
    metrics = live()
    metrics.request(record())
    before = metrics.snapshot()
    metrics.request(record())
    metrics.request(failed("timeout"))
    assert before.series(catalog.E2E)[("chat",)].count == 1
    assert before.series(catalog.REQUESTS) == {("chat", "ok"): 1.0}
    assert metrics.snapshot().series(catalog.E2E)[("chat",)].count == 2


# -- samples, events, looks, ticks ------------------------------------------------------------------------------
def test_a_process_that_ended_leaves_the_gauges_once_its_readings_are_stale():
    now = [0.0]
    metrics = LiveMetrics(IDENTITY, roots=lambda: [10], sample_every_s=1.0, clock=lambda: now[0])
    metrics.samples([server_process(10, rss=100, swap=5), server_process(11, "VLLM::EngineCore", rss=200),
                     ProcessReading("client", ProcessStats(pid=99, name="soak", rss_bytes=7))], t_s=1.0)
    rss = metrics.snapshot().series(catalog.SERVER_RSS)
    assert rss == {("api", "python", "10"): 100.0, ("engine", "VLLM::EngineCore", "11"): 200.0}  # soak is not one
    now[0] = metrics.stale_after_s - 1.0
    metrics.samples([server_process(10, rss=150)], t_s=2.0)
    now[0] = metrics.stale_after_s + 0.5
    series = metrics.snapshot().series
    assert series(catalog.SERVER_RSS) == {("api", "python", "10"): 150.0}  # the engine ended: it drops out
    assert series(catalog.SERVER_SWAP) == {("api", "python", "10"): 0.0}


def test_a_round_without_a_family_leaves_that_family_alone():
    metrics = live()
    metrics.samples([server_process(10, rss=100)], t_s=1.0)
    metrics.samples([ServerReading(source=SOURCE, scrape_ok=True, running=2.0, waiting=None, kv_usage=0.25)], t_s=1.0)
    series = metrics.snapshot().series
    assert series(catalog.SERVER_RSS) == {("process", "python", "10"): 100.0}
    assert series(catalog.RUNNING) == {(SOURCE,): 2.0} and series(catalog.KV_USAGE) == {(SOURCE,): 0.25}
    assert series(catalog.WAITING) == {}  # a gauge the page did not carry is absent, never 0


def test_unread_memory_is_left_out_not_zero():
    metrics = live()
    metrics.samples([server_process(10, rss=None, swap=None), server_process(11, rss=5, swap=None)], t_s=1.0)
    series = metrics.snapshot().series
    assert series(catalog.SERVER_RSS) == {("process", "python", "11"): 5.0}
    assert series(catalog.SERVER_SWAP) == {}


def test_gpu_readings_feed_the_gpu_gauges():
    metrics = live()
    metrics.samples([GpuReading(gpu_index=0, mem_used_bytes=1000), GpuReading(gpu_index=1),
                     GpuProcessReading(gpu_index=0, pid=10, used_bytes=600),
                     GpuProcessReading(gpu_index=0, pid=11, used_bytes=None)], t_s=1.0)
    series = metrics.snapshot().series
    assert series(catalog.GPU_USED) == {("0",): 1000.0}
    assert series(catalog.GPU_PROCESS) == {("0", "10"): 600.0}


def test_two_scrape_sources_sampled_one_after_the_other_both_stay():
    metrics = live()
    other = "http://127.0.0.1:9400/metrics"
    metrics.samples([ServerReading(source=SOURCE, scrape_ok=True, running=2.0)], t_s=1.0)  # as _sample_servers does
    metrics.samples([ServerReading(source=other, scrape_ok=True, running=5.0)], t_s=1.0)
    assert metrics.snapshot().series(catalog.RUNNING) == {(SOURCE,): 2.0, (other,): 5.0}


def test_when_every_server_process_is_gone_their_gauges_go_too():
    now = [0.0]
    metrics = LiveMetrics(IDENTITY, sample_every_s=1.0, clock=lambda: now[0])
    metrics.samples([server_process(10, rss=100)], t_s=1.0)
    metrics.samples([], t_s=2.0)  # _sample_processes after a crash: the tree is empty
    now[0] = metrics.stale_after_s - 0.5
    assert metrics.snapshot().series(catalog.SERVER_RSS) == {("process", "python", "10"): 100.0}  # not stale yet
    now[0] = metrics.stale_after_s + 0.5  # three sample intervals without a reading of it
    assert metrics.snapshot().series(catalog.SERVER_RSS) == {}


def test_events_are_counted_by_kind():
    metrics = live()
    for kind in ("restart", "canary_ok", "canary_ok"):
        metrics.event(kind)
    assert metrics.snapshot().series(catalog.EVENTS) == {("restart",): 1.0, ("canary_ok",): 2.0}


def test_a_look_sets_each_checks_verdict_value_and_counts_the_look():
    metrics = live()
    metrics.look({"leak.rss": "FAIL", "hang": "PASS", "creep.ttft_p99": "INCONCLUSIVE", "odd": "NEW_VERDICT"})
    metrics.look({"leak.rss": "SUSPECT"})
    series = metrics.snapshot().series
    assert series(catalog.CHECK_VERDICT) == {("leak.rss",): 2.0, ("hang",): 0.0, ("creep.ttft_p99",): 1.0,
                                             ("odd",): -1.0}
    assert series(catalog.LOOKS) == {(): 2.0}


def test_finish_sets_the_final_verdicts_and_the_finished_gauge():
    metrics = live()
    metrics.look({"leak.rss": "SUSPECT"})
    assert metrics.snapshot().series(catalog.FINISHED) == {(): 0.0}
    metrics.finish({verdict.lower(): verdict for verdict in VERDICT_VALUES} | {"leak.rss": "FAIL"})
    series = metrics.snapshot().series
    assert series(catalog.FINISHED) == {(): 1.0}
    assert series(catalog.CHECK_VERDICT)[("leak.rss",)] == 3.0
    assert {check: series(catalog.CHECK_VERDICT)[(check.lower(),)] for check in VERDICT_VALUES} == {
        verdict: float(value) for verdict, value in VERDICT_VALUES.items()}


def test_a_tick_reads_the_loads_counters_and_soaks_own_process():
    metrics = live(counters=LoadCounters(sends=40, skipped=2, late_sends_1s=1, in_flight=3))
    metrics.tick()
    series = metrics.snapshot().series
    assert series(catalog.SENT) == {(): 40.0} and series(catalog.OFFERED) == {(): 42.0}
    assert series(catalog.LATE) == {(): 1.0} and series(catalog.IN_FLIGHT) == {(): 3.0}
    assert series(catalog.CLIENT_RSS)[()] > 10 * 2**20 and series(catalog.CLIENT_CPU)[()] > 0
    assert series(catalog.HEARTBEAT)[()] >= IDENTITY.start_s


def test_a_tick_before_the_load_starts_leaves_its_counters_out():
    metrics = live()
    metrics.tick()
    assert metrics.snapshot().series(catalog.SENT) == {}


def test_the_runs_constants_are_there_from_the_start():
    series = live().snapshot().series
    assert series(catalog.RUN_INFO) == {("tiny", "reference"): 1.0}
    assert series(catalog.RUN_START) == {(): IDENTITY.start_s}
    assert series(catalog.RUN_PLANNED) == {(): 600.0} and series(catalog.RUN_WARMUP) == {(): 60.0}
    assert series(catalog.OTLP_FAILURES) == {(): 0.0} and series(catalog.LOOKS) == {(): 0.0}


# -- the Prometheus page ----------------------------------------------------------------------------------------
def a_busy_run() -> LiveMetrics:
    """A run with requests of every outcome, samples, an event, a look and a tick."""
    metrics = live(slo="ttft=200ms", counters=LoadCounters(sends=4), roots=[10])
    for each in (record(), record(itl_ms=(0.5, 15_000.0, 20_000.0)), failed("http_5xx"), failed("cancelled")):
        metrics.request(each)
    metrics.samples([server_process(10, rss=100), ServerReading(source=SOURCE, scrape_ok=True, kv_usage=0.5)], 1.0)
    metrics.event("restart")
    metrics.look({"leak.rss": "PASS"})
    metrics.tick()
    return metrics


class SnapshotCollector:
    """What the endpoint's collector does, over one snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self):
        return families(self.snapshot, IDENTITY.labels)


def page_of(snapshot: Snapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    return generate_latest(registry).decode()


def test_the_page_parses_back_with_the_catalogs_names_and_types():
    snapshot = a_busy_run().snapshot()
    parsed = {family.name: family for family in text_string_to_metric_families(page_of(snapshot))}
    expected = {spec.prom: spec for spec in catalog.CATALOG if snapshot.series(spec)}
    assert set(parsed) == set(expected)
    for name, spec in expected.items():
        assert parsed[name].type == spec.kind.value, name
        assert parsed[name].documentation == spec.help, name
    assert {s.name for s in parsed["soak_requests"].samples} == {"soak_requests_total"}
    assert parsed["soak_otlp_export_failures"].samples[0].value == 0.0


def test_every_family_puts_the_run_labels_first_then_its_own():
    for family in families(a_busy_run().snapshot(), IDENTITY.labels):
        spec = next(spec for spec in catalog.CATALOG if spec.prom == family.name)
        for sample in family.samples:
            names = [name for name in sample.labels if name != "le"]
            assert names == [*RUN_LABELS, *spec.labels], sample
            assert [sample.labels[name] for name in RUN_LABELS] == [IDENTITY.labels[name] for name in RUN_LABELS]


def test_every_sample_on_the_page_parses_back_with_the_run_labels_and_its_own():
    page = page_of(a_busy_run().snapshot())
    for family in text_string_to_metric_families(page):
        spec = next(spec for spec in catalog.CATALOG if spec.prom == family.name)
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == {*RUN_LABELS, *spec.labels}, sample
            assert {name: sample.labels[name] for name in RUN_LABELS} == IDENTITY.labels, sample
    # prometheus_client writes a sample's labels sorted by name, whatever order the family gave them in
    assert ('soak_requests_total{outcome="error",replica="",run_id="R1",scenario="chat",soak_version="9.9",'
            'target="127.0.0.1:8000"} 1.0') in page.splitlines()


def test_histogram_buckets_come_back_cumulative_with_the_catalogs_bounds():
    snapshot = a_busy_run().snapshot()
    parsed = {family.name: family for family in text_string_to_metric_families(page_of(snapshot))}
    itl = parsed[catalog.ITL.prom]
    buckets = [(s.labels["le"], s.value) for s in itl.samples if s.name.endswith("_bucket")]
    assert [le for le, _ in buckets] == [floatToGoString(b) for b in catalog.GAP_BUCKETS_S] + ["+Inf"]
    histogram = snapshot.series(catalog.ITL)[("chat",)]
    assert [count for _, count in buckets] == histogram.cumulative()
    # 0.5 ms lies on the first bound; 15 s on the last; 20 s beyond every bound
    assert buckets[0][1] == 1 and buckets[-2][1] == buckets[-1][1] - 1
    count = next(s.value for s in itl.samples if s.name.endswith("_count"))
    total = next(s.value for s in itl.samples if s.name.endswith("_sum"))
    assert count == histogram.count == 6 and total == pytest.approx(histogram.sum)


def test_an_empty_run_serves_only_its_constants():
    parsed = {family.name for family in text_string_to_metric_families(page_of(live().snapshot()))}
    assert catalog.RUN_INFO.prom in parsed and catalog.E2E.prom not in parsed and catalog.REQUESTS.prom not in parsed


def test_the_endpoint_serves_the_page_over_http_and_counts_the_scrapes():
    endpoint = MetricsEndpoint("127.0.0.1", 0)
    try:
        assert endpoint.url == f"http://127.0.0.1:{endpoint.port}/metrics"
        assert _get(endpoint.url) == ""  # no run attached yet: an empty page, not an error
        metrics = a_busy_run()
        endpoint.serve(lambda: families(metrics.snapshot(), IDENTITY.labels))
        page = _get(endpoint.url)
        assert "soak_requests_total{" in page and endpoint.scrapes == 2
        openmetrics = _get(endpoint.url, accept="application/openmetrics-text; version=1.0.0")
        assert openmetrics.rstrip().endswith("# EOF") and "# UNIT soak_schedule_lag_seconds seconds" in openmetrics
    finally:
        endpoint.close()


def _get(url: str, accept: str = "text/plain") -> str:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=10) as response:
        return response.read().decode()


def test_the_endpoint_on_a_taken_port_is_a_config_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--metrics-bind 127.0.0.1:{port}: cannot listen there"):
            MetricsEndpoint("127.0.0.1", port)


# -- the OTLP export --------------------------------------------------------------------------------------------
def encoded(metrics: LiveMetrics) -> ExportMetricsServiceRequest:
    """The snapshot as the exporter sends it: encoded, serialised and parsed back."""
    message = ExportMetricsServiceRequest()
    message.ParseFromString(encode_metrics(metrics_data(metrics.snapshot(), IDENTITY)).SerializeToString())
    return message


def attributes(items) -> dict[str, str]:
    return {item.key: item.value.string_value for item in items}


def test_the_export_names_the_run_in_its_resource():
    resource = encoded(live()).resource_metrics[0].resource
    assert attributes(resource.attributes).items() >= {
        "service.name": "soak", "service.version": "9.9", "soak.run.id": "R1", "soak.target": "127.0.0.1:8000",
        "soak.replica": "", "soak.target.kind": "reference", "gen_ai.request.model": "tiny"}.items()


def test_the_export_carries_the_catalogs_otel_names_and_units():
    metrics = a_busy_run()
    snapshot = metrics.snapshot()
    sent = {metric.name: metric for metric in encoded(metrics).resource_metrics[0].scope_metrics[0].metrics}
    expected = {spec.otel: spec for spec in catalog.CATALOG if snapshot.series(spec)}
    assert set(sent) == set(expected)
    for name, spec in expected.items():
        assert sent[name].unit == spec.unit, name
        assert sent[name].WhichOneof("data") == {"counter": "sum", "gauge": "gauge", "histogram": "histogram"}[spec.kind]
    assert sent["gen_ai.client.operation.duration"].unit == "s"
    assert sent["gen_ai.client.token.usage"].unit == "{token}"
    requests = sent["soak.requests"].sum
    assert requests.is_monotonic and requests.aggregation_temporality == 2  # CUMULATIVE
    points = {tuple(sorted(attributes(p.attributes).items())): p.as_double for p in requests.data_points}
    assert points[(("soak.outcome", "error"), ("soak.scenario", "chat"))] == 1.0
    errors = sent["soak.request.errors"].sum.data_points
    assert [attributes(p.attributes) for p in errors] == [{"soak.scenario": "chat", "error.type": "http_5xx"}]
    tokens = {attributes(p.attributes)["gen_ai.token.type"] for p in sent["gen_ai.client.token.usage"].histogram.data_points}
    assert tokens == {"input", "output"}
    rss = sent["soak.server.process.memory.resident"].gauge.data_points[0]
    assert attributes(rss.attributes) == {"soak.process.role": "api", "process.executable.name": "python",
                                          "process.pid": "10"}


def test_histogram_points_carry_per_bucket_counts_over_the_catalogs_bounds():
    metrics = a_busy_run()
    histogram = metrics.snapshot().series(catalog.ITL)[("chat",)]
    sent = {metric.name: metric for metric in encoded(metrics).resource_metrics[0].scope_metrics[0].metrics}
    point = sent[catalog.ITL.otel].histogram.data_points[0]
    assert list(point.explicit_bounds) == list(catalog.GAP_BUCKETS_S)
    assert list(point.bucket_counts) == histogram.counts  # per bucket, not cumulative; the last one past every bound
    assert len(point.bucket_counts) == len(point.explicit_bounds) + 1 and sum(point.bucket_counts) == point.count == 6
    assert point.sum == pytest.approx(histogram.sum)
    assert (point.min, point.max) == (pytest.approx(0.0005), pytest.approx(20.0))
    assert point.start_time_unix_nano == int(IDENTITY.start_s * 1e9) < point.time_unix_nano
    assert sent[catalog.ITL.otel].histogram.aggregation_temporality == 2  # CUMULATIVE


@pytest.mark.parametrize(("given", "pushed_to"), [
    ("http://collector:4318", "http://collector:4318/v1/metrics"),
    ("http://collector:4318/", "http://collector:4318/v1/metrics"),
    ("https://collector:4318/v1/metrics", "https://collector:4318/v1/metrics"),
    ("http://collector:4318/custom/path", "http://collector:4318/custom/path"),
])
def test_metrics_url_adds_the_otlp_path_only_to_a_bare_endpoint(given, pushed_to):
    assert metrics_url(given) == pushed_to


def test_metrics_url_puts_the_path_before_a_query_string():
    assert metrics_url("http://collector:4318?tenant=a") == "http://collector:4318/v1/metrics?tenant=a"


def test_a_push_nobody_takes_is_counted_and_said_once(caplog):
    with socket.socket() as bound:  # bound, never listening: every connection is refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        metrics = live()
        push = OtlpPush(url, IDENTITY, metrics.snapshot, every_s=60.0, on_failure=metrics.export_failed,
                        timeout_s=0.5)
        with caplog.at_level(logging.WARNING):
            assert push.push() is False and push.push() is False
        push.exporter.shutdown()
    assert push.failures == 2 and metrics.snapshot().series(catalog.OTLP_FAILURES) == {(): 2.0}
    said = [r.getMessage() for r in caplog.records if r.name == "soak.metrics.otlp"]
    assert len(said) == 1 and said[0].startswith(f"OTLP push to {url}/v1/metrics failed 1 time(s)")
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]  # the exporter's own lines


# -- the CLI ----------------------------------------------------------------------------------------------------
def test_start_on_a_taken_metrics_port_is_one_line_before_anything_runs(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "soak", "start", "--duration", "30s", "--metrics-bind",
                                 f"127.0.0.1:{port}", "--out", str(tmp_path)], capture_output=True, text=True,
                                timeout=180, cwd=REPO)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        f"soak: error: --metrics-bind 127.0.0.1:{port}: cannot listen there (Address already in use)"]
    runs = sqlite3.connect(tmp_path / "soak.db").execute("select count(*) from runs").fetchone()[0]
    assert runs == 0  # no server was started and no run was recorded
