"""The live `/metrics` page of `soak start --metrics-bind ADDR:PORT`: the run's series in Prometheus exposition
format (OpenMetrics to a scraper that asks for it), served by `prometheus_client`'s own HTTP server.

Histograms are classic `le` buckets: the Python client writes native histograms only in the experimental
OpenMetrics 2.0 text, which Prometheus does not scrape. The page is built from one snapshot per scrape; a run
not yet open (or a fleet's parent before its replicas report) serves an empty page, never an error.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from soak.errors import ConfigError
from soak.metrics.catalog import CATALOG, RUN_LABELS, Kind, MetricSpec
from soak.metrics.live import Histogram, Snapshot
from soak.telemetry.process import off_loop

log = logging.getLogger(__name__)

UNIT_SUFFIXES = ("seconds", "bytes", "ratio")
PEER = "soak.peer"  # the WSGI environ key of the request's connection


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

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for metric in self.sources():
            if metric.name in merged:
                merged[metric.name].samples.extend(metric.samples)
            else:
                merged[metric.name] = metric
        yield from merged.values()


def scraped_families(urls: Iterable[str], timeout_s: float = 2.0) -> Iterator[Metric]:
    """The families of other soak pages (a fleet's replicas), parsed; a page that cannot be read now is left out
    of this scrape (logged), never an error of the whole page."""
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                text = response.read().decode("utf-8")
        except (OSError, ValueError) as exc:
            log.info("metrics: %s not read this time: %s", url, exc)
            continue
        yield from text_string_to_metric_families(text)


class _Families:
    """A registry of the given families, for prometheus_client's encoders."""

    def __init__(self, *metrics: Metric) -> None:
        self.metrics = list(metrics)

    def collect(self) -> list[Metric]:
        return self.metrics


def _alike(metric: Metric, samples: list[Any]) -> Metric:
    """A family of `metric`'s name, type, help and unit holding `samples`."""
    twin = Metric(metric.name, metric.documentation, metric.type, metric.unit)
    twin.samples = samples
    return twin


class PageLines:
    """The page exactly as prometheus_client's encoder writes it, at a fraction of its cost: the encoder renders
    each family's metadata and each series' line once; later pages reuse those escaped names and labels with the
    values of now (escaping and checking every label of every line again was 90 % of a page's time, 20 ms and more
    for one scenario's few hundred lines). tests/unit/test_metrics_page.py holds the bytes equal."""

    def __init__(self) -> None:
        self._rendered: dict[tuple, bytes] = {}

    def render(self, encoder: Callable[[Any], bytes], encoding: str, metrics: Iterable[Metric]) -> bytes:
        """The page of `metrics` as `encoder` (the one prometheus_client chose for `encoding`) would write it."""
        eof = self._eof(encoder, encoding)
        parts: list[bytes] = []
        for metric in metrics:
            metadata = self._metadata(encoder, encoding, metric, eof)
            parts.append(metadata)
            parts.extend(self._line(encoder, encoding, metric, sample, metadata, eof) for sample in metric.samples)
        parts.append(eof)
        return b"".join(parts)

    def _eof(self, encoder: Callable[[Any], bytes], encoding: str) -> bytes:
        """What the encoder writes after the last family: OpenMetrics' `# EOF`, nothing for the text format."""
        key = (encoding, "eof")
        if key not in self._rendered:
            self._rendered[key] = encoder(_Families())
        return self._rendered[key]

    def _metadata(self, encoder: Callable[[Any], bytes], encoding: str, metric: Metric, eof: bytes) -> bytes:
        """A family's lines before its samples (help, type, unit)."""
        key = (encoding, "metadata", metric.name, metric.type, metric.documentation, metric.unit)
        if key not in self._rendered:
            self._rendered[key] = encoder(_Families(_alike(metric, []))).removesuffix(eof)
        return self._rendered[key]

    def _line(self, encoder: Callable[[Any], bytes], encoding: str, metric: Metric, sample: Any, metadata: bytes,
              eof: bytes) -> bytes:
        """One sample's line: its cached name and labels, its value now. A timestamped or exemplar-carrying sample
        (the live page has none) is rendered whole."""
        key = (encoding, metric.name, sample.name, tuple(sample.labels.items()))
        prefix = self._rendered.get(key)
        if prefix is None or sample.timestamp is not None or sample.exemplar is not None:
            page = encoder(_Families(_alike(metric, [sample])))
            line = page[len(metadata):len(page) - len(eof)]
            if sample.timestamp is not None or sample.exemplar is not None:
                return line
            prefix = self._rendered[key] = line.rsplit(b" ", 1)[0] + b" "
        return prefix + floatToGoString(sample.value).encode() + b"\n"


class _Handler(WSGIRequestHandler):
    """Hands the page its request's connection (PEER), and logs nothing."""

    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        environ[PEER] = self.connection
        return environ

    def log_message(self, *args: Any) -> None:
        pass


def still_waiting(connection: socket.socket) -> bool:
    """Whether the client of a request still waits for its answer. A scraper whose timeout passed while this
    process was too busy to answer (the analysis at a run's end holds the gevent loop for seconds) has closed its
    end, and the request it left queued reads as end-of-file; a waiting one has nothing more to send."""
    try:
        readable = select.select([connection], [], [], 0)[0]
        return not readable or connection.recv(1, socket.MSG_PEEK) != b""
    except OSError:
        return False


class MetricsEndpoint:
    """The HTTP server behind `--metrics-bind`, bound at start so a taken port is a clear error before anything
    runs; it serves an empty page until the run's series are attached.

    `scrapes` counts pages written out whole to a scraper that was still waiting for them: the run's end waits for
    one more (soak/run/metrics.py), and a request a timed-out scraper left queued, or a page cut off, is not one."""

    def __init__(self, host: str, port: int) -> None:
        self.collector = RunCollector()
        self.scrapes = 0
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
            server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
            self._server = make_server(host, port, self._counted(self._page_app(registry)), server_class, _Handler)
        except OSError as exc:
            raise ConfigError(f"--metrics-bind {host}:{port}: cannot listen there ({exc.strerror or exc})") from exc
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.host, self.port = host, self._server.server_address[1]

    @staticmethod
    def _page_app(registry: CollectorRegistry) -> Callable[..., Iterable[bytes]]:
        """The WSGI app of the page: the format prometheus_client's negotiation picks, written by `PageLines`."""
        lines = PageLines()

        def page(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                start_response("405 Method Not Allowed", [("Allow", "GET")])
                return [b""]
            encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
            body = lines.render(encoder, content_type, registry.collect())
            start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
            return [body]
        return page

    def _counted(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterator[bytes]]:
        """`app`, counting each page once its last byte is written (the server asks for more only then)."""
        def counted(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
            waiting = PEER not in environ or still_waiting(environ[PEER])
            # Built on a real OS thread: a page of a few thousand lines takes 10-100 ms of CPU, which on the gevent
            # loop would hold every arrival and every stream read for as long.
            yield from off_loop(lambda: list(app(environ, start_response)))
            if waiting:
                self.scrapes += 1
        return counted

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
