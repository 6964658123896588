"""The OTLP push of `soak start --otlp-endpoint URL`: the same series as the `/metrics` page, sent over HTTP with
protobuf by OpenTelemetry's own exporter every `--otlp-every` (and once more at the end).

The series are built from the run's snapshot as the SDK's own data points (cumulative temporality, from the
run's start), with the OpenTelemetry names and units of `catalog.py`; the run id, target, replica and soak's
version are resource attributes. Headers (a token) come from OpenTelemetry's own environment variables,
`OTEL_EXPORTER_OTLP_HEADERS` or `OTEL_EXPORTER_OTLP_METRICS_HEADERS`. A failed push is counted
(`soak_otlp_export_failures_total`) and said in one log line a minute at most; it never stops the run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from soak.metrics.catalog import CATALOG, Kind, MetricSpec
from soak.metrics.live import Histogram as LiveHistogram
from soak.metrics.live import RunIdentity, Snapshot

log = logging.getLogger(__name__)

# Each label as an OpenTelemetry attribute: the semantic conventions' name where one exists, else `soak.…`.
ATTRIBUTES = {
    "scenario": "soak.scenario", "outcome": "soak.outcome", "error_class": "error.type",
    "gen_ai_token_type": "gen_ai.token.type", "kind": "soak.event.kind", "check": "soak.check",
    "process_role": "soak.process.role", "process": "process.executable.name", "pid": "process.pid",
    "source": "soak.scrape.source", "gpu": "soak.gpu.index", "model": "gen_ai.request.model",
    "target_kind": "soak.target.kind",
}
EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.metric_exporter"
FAILURE_LOG_EVERY_S = 60.0


def metrics_url(endpoint: str) -> str:
    """The URL pushes go to: an endpoint given without a path gets OTLP's `/v1/metrics` (before any query)."""
    parts = urlsplit(endpoint)
    return parts._replace(path="/v1/metrics").geturl() if parts.path in ("", "/") else endpoint


def run_resource(identity: RunIdentity) -> Resource:
    """Who pushes: soak, which run, against which server."""
    return Resource.create({
        "service.name": "soak", "service.version": identity.soak_version, "soak.run.id": identity.run_id,
        "soak.target": identity.target, "soak.replica": identity.replica, "soak.target.kind": identity.target_kind,
        "gen_ai.request.model": identity.model,
    })


def _attributes(spec: MetricSpec, labels: tuple[str, ...]) -> dict[str, Any]:
    return {ATTRIBUTES.get(name, f"soak.{name}"): value for name, value in zip(spec.labels, labels)}


def _histogram_point(spec: MetricSpec, labels: tuple[str, ...], value: LiveHistogram, start_ns: int,
                     now_ns: int) -> HistogramDataPoint:
    empty = value.count == 0
    return HistogramDataPoint(attributes=_attributes(spec, labels), start_time_unix_nano=start_ns,
                              time_unix_nano=now_ns, count=value.count, sum=value.sum,
                              bucket_counts=list(value.counts), explicit_bounds=list(value.bounds),
                              min=0.0 if empty else value.min, max=0.0 if empty else value.max)


def otel_metric(spec: MetricSpec, series: dict[tuple[str, ...], Any], start_ns: int, now_ns: int) -> Metric:
    """One instrument's points, as the SDK would have aggregated them (cumulative from the run's start)."""
    cumulative = AggregationTemporality.CUMULATIVE
    if spec.kind == Kind.HISTOGRAM:
        points = [_histogram_point(spec, labels, value, start_ns, now_ns) for labels, value in sorted(series.items())]
        data: Any = Histogram(data_points=points, aggregation_temporality=cumulative)
    else:
        points = [NumberDataPoint(attributes=_attributes(spec, labels), start_time_unix_nano=start_ns,
                                  time_unix_nano=now_ns, value=value) for labels, value in sorted(series.items())]
        data = (Sum(data_points=points, aggregation_temporality=cumulative, is_monotonic=True)
                if spec.kind == Kind.COUNTER else Gauge(data_points=points))
    return Metric(name=spec.otel, description=spec.help, unit=spec.unit, data=data)


def metrics_data(snapshot: Snapshot, identity: RunIdentity, resource: Resource | None = None) -> MetricsData:
    """The whole snapshot as one OTLP export (`resource`: the run's, made once by the caller, else here)."""
    start_ns, now_ns = int(identity.start_s * 1e9), int(snapshot.at_s * 1e9)
    metrics = [otel_metric(spec, snapshot.series(spec), start_ns, now_ns) for spec in CATALOG if snapshot.series(spec)]
    scope = ScopeMetrics(scope=InstrumentationScope("soak", identity.soak_version), metrics=metrics, schema_url="")
    return MetricsData(resource_metrics=[ResourceMetrics(resource=resource or run_resource(identity), scope_metrics=[scope],
                                                         schema_url="")])


class _LastFailure(logging.Filter):
    """Keeps the exporter's own failure lines out of the log (one line a minute says them), remembering the first
    of the latest push: the exporter says why (refused, timed out, HTTP status) before it says that it gave up."""

    def __init__(self) -> None:
        super().__init__()
        self.message = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self.message = self.message or record.getMessage().splitlines()[0][:300]
            return False
        return True


class OtlpPush:
    """Pushes `read()` every `every_s` seconds from a thread of its own until `close()`, which pushes once more."""

    def __init__(self, endpoint: str, identity: RunIdentity, read: Callable[[], Snapshot], every_s: float,
                 on_failure: Callable[[], None] = lambda: None, timeout_s: float = 10.0) -> None:
        self.url, self.identity, self.read, self.every_s = metrics_url(endpoint), identity, read, every_s
        self.on_failure = on_failure
        self.exporter = OTLPMetricExporter(endpoint=self.url, timeout=timeout_s)
        self.resource = run_resource(identity)  # ~1 ms to build: once, not at every push
        self.failures = self.pushes = 0
        self._unsaid, self._said_at = 0, 0.0
        self._last = _LastFailure()
        logging.getLogger(EXPORTER_LOGGER).addFilter(self._last)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-otlp", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.push()

    def push(self) -> bool:
        """One export of the snapshot now; False (counted, said at most once a minute) when it failed."""
        self._last.message = ""
        try:
            data = metrics_data(self.read(), self.identity, self.resource)
            ok = self.exporter.export(data) == MetricExportResult.SUCCESS
        except Exception as exc:  # the exporter raises on what it cannot encode or send: counted like a refusal
            self._last.message, ok = f"{type(exc).__name__}: {exc}", False
        self.pushes += 1
        if not ok:
            self._failed()
        return ok

    def _failed(self) -> None:
        self.failures += 1
        self._unsaid += 1
        self.on_failure()
        if time.monotonic() - self._said_at >= FAILURE_LOG_EVERY_S:
            log.warning("OTLP push to %s failed %d time(s) since the last word (%s); the run goes on",
                        self.url, self._unsaid, self._last.message or "no reason given")
            self._unsaid, self._said_at = 0, time.monotonic()

    def close(self) -> None:
        """Stop the loop and push the final numbers once (bounded by the exporter's timeout)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.every_s + 1)
        self.push()
        if self._unsaid:  # failures since the last line, which no later failure said
            log.warning("OTLP push to %s failed %d more time(s) before the end (%d of %d pushes in all)",
                        self.url, self._unsaid, self.failures, self.pushes)
        self.exporter.shutdown()
        logging.getLogger(EXPORTER_LOGGER).removeFilter(self._last)
