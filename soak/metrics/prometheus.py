"""The live `/metrics` page of `soak start --metrics-bind ADDR:PORT`: the run's series in Prometheus exposition
format (OpenMetrics to a scraper that asks for it), served by `prometheus_client`'s own HTTP server.

Histograms are classic `le` buckets: the Python client writes native histograms only in the experimental
OpenMetrics 2.0 text, which Prometheus does not scrape. The page is built from one snapshot per scrape; a run
not yet open (or a fleet's parent before its replicas report) serves an empty page, never an error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from soak.errors import ConfigError
from soak.metrics.catalog import CATALOG, RUN_LABELS, Kind, MetricSpec
from soak.metrics.live import Histogram, Snapshot

log = logging.getLogger(__name__)

UNIT_SUFFIXES = ("seconds", "bytes", "ratio")


def unit_of(spec: MetricSpec) -> str:
    """The OpenMetrics unit a family declares: its name's base-unit suffix, or none."""
    return next((unit for unit in UNIT_SUFFIXES if spec.prom.endswith(f"_{unit}")), "")


def family(spec: MetricSpec, run_labels: dict[str, str], series: dict[tuple[str, ...], Any]) -> Metric:
    """One family of the page: every labelled series of `spec`, with the run's labels first."""
    names = [*RUN_LABELS, *spec.labels]
    constant = [run_labels[name] for name in RUN_LABELS]
    if spec.kind == Kind.HISTOGRAM:
        metric = HistogramMetricFamily(spec.prom, spec.help, labels=names, unit=unit_of(spec))
        for labels, histogram in sorted(series.items()):
            metric.add_metric([*constant, *labels], _buckets(histogram), histogram.sum)
        return metric
    kind = CounterMetricFamily if spec.kind == Kind.COUNTER else GaugeMetricFamily
    metric = kind(spec.prom, spec.help, labels=names, unit=unit_of(spec))
    for labels, value in sorted(series.items()):
        metric.add_metric([*constant, *labels], value)
    return metric


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    cumulative = histogram.cumulative()
    return [*((repr(bound), count) for bound, count in zip(histogram.bounds, cumulative)), ("+Inf", cumulative[-1])]


def families(snapshot: Snapshot, run_labels: dict[str, str]) -> Iterator[Metric]:
    """The page's families in the catalog's order; a family with no series yet is left out."""
    for spec in CATALOG:
        series = snapshot.series(spec)
        if series:
            yield family(spec, run_labels, series)


class RunCollector:
    """A `prometheus_client` collector over whatever the run is now: `sources()` gives its families — one run's,
    or a fleet parent's replicas' pages, parsed — and families of one name are merged into one."""

    def __init__(self) -> None:
        self.sources: Callable[[], Iterable[Metric]] = list
        self.scrapes = 0  # pages served: the run's end waits for one more (soak/run/metrics.py)

    def collect(self) -> Iterator[Metric]:
        self.scrapes += 1
        merged: dict[str, Metric] = {}
        for metric in self.sources():
            if metric.name in merged:
                merged[metric.name].samples.extend(metric.samples)
            else:
                merged[metric.name] = metric
        yield from merged.values()


class MetricsEndpoint:
    """The HTTP server behind `--metrics-bind`, bound at start so a taken port is a clear error before anything
    runs; it serves an empty page until the run's series are attached."""

    def __init__(self, host: str, port: int) -> None:
        self.collector = RunCollector()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ConfigError(f"--metrics-bind {host}:{port}: cannot listen there ({exc.strerror or exc})") from exc
        self.host, self.port = host, self._server.server_address[1]

    @property
    def scrapes(self) -> int:
        return self.collector.scrapes

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def serve(self, sources: Callable[[], Iterable[Metric]]) -> None:
        """From now on the page shows what `sources()` gives."""
        self.collector.sources = sources

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
