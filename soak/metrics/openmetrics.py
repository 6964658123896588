"""A stored run as OpenMetrics text with timestamps, which `promtool tsdb create-blocks-from openmetrics` imports as
it is: past runs (and runs from before this export) drawn in Prometheus beside production data.

Every series has its name, type and labels from `catalog.py`, as the live `/metrics` page has them, so one dashboard
draws a live run and a backfilled one. What each series is made from, and what a stored run cannot give:
docs/observability.md, "History into Prometheus (backfill)".

The text follows the OpenMetrics rules promtool and Prometheus's parser hold it to: each family written whole under
one `# HELP`/`# TYPE` (families are never split), each series (a family's label set) whole inside its family, its
points in time order, and `# EOF` at the end. So the database is read one family at a time, each query ordered by
series and time, streamed in batches: a 72 h run never sits in memory. prometheus_client renders the lines.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit

import numpy as np
from hdrh.histogram import HdrHistogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.samples import Timestamp
from prometheus_client.utils import floatToGoString
from sqlalchemy import Select, select
from sqlalchemy.exc import SQLAlchemyError

from soak import __version__
from soak.contracts import EventKind, loads_summary
from soak.errors import StorageError
from soak.metrics import catalog
from soak.metrics.catalog import RUN_LABELS, Kind, MetricSpec
from soak.samples import ProcessStats, process_role
from soak.store.histograms import decode_histogram
from soak.store.models import (
    ALL_SCENARIOS,
    ERROR_CLASSES,
    EventRow,
    GpuProcessSample,
    GpuSample,
    LatencyWindowRow,
    ProcessSample,
    RequestWindowRow,
    ServerSample,
)
from soak.store.records import StoredRun
from soak.store.store import Store

SUFFIX = ".om.txt"
BATCH_ROWS = 20_000  # rows fetched from the database at a time
RUN_STEP_S = 30.0  # the run's constant gauges repeat this often: Prometheus forgets a series 5 min after its last point
EOF = b"# EOF\n"

Labels = tuple[str, ...]
Step = TypeVar("Step")


# -- what is written ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class HistogramState:
    """A histogram at one time: counts of values ≤ each bound (the spec's buckets, none for the tokens), the count
    (the +Inf bucket) and the sum."""

    buckets: tuple[int, ...]
    count: int
    sum: float

    def __add__(self, other: HistogramState) -> HistogramState:
        buckets = tuple(a + b for a, b in zip(self.buckets, other.buckets, strict=True))
        return HistogramState(buckets, self.count + other.count, self.sum + other.sum)

    def __bool__(self) -> bool:
        return self.count > 0


@dataclass(frozen=True, slots=True)
class Point:
    """One point of one series: the spec's own label values (in its label order), seconds since the run's start,
    and the value (a number, or a histogram's state)."""

    labels: Labels
    t_s: float
    value: float | HistogramState


@dataclass(frozen=True)
class Scope:
    """What every family of one run needs: the run, its RUN_LABELS values, how far its series reach (seconds since
    its start), whether it ended, and the server's root pids (for process_role)."""

    run: StoredRun
    labels: Labels
    end_s: float
    ended: bool
    roots: tuple[int, ...]


@dataclass(frozen=True)
class Exported:
    """What one export wrote: the file, its families and its sample lines."""

    path: Path
    families: int
    samples: int


# -- the run's labels and reach ----------------------------------------------------------------------------------
def target_label(url: str | None) -> str:
    """The `target` label: the server's `host:port` as the run's URL wrote it, as the live page labels it (the
    first URL of a fleet's list; never a user or password it carried); "" when the run stored no URL."""
    urls = (url or "").split()
    if not urls:
        return ""
    return urlsplit(urls[0]).netloc.rpartition("@")[2] or urls[0]


def run_labels(run: StoredRun) -> Labels:
    """The values of catalog.RUN_LABELS: the soak that made the run where its environment recorded one, else this one."""
    version = run.environment.get("soak") or __version__
    return run.id, target_label(run.target_url), run.replica or "", str(version)


def run_end_s(run: StoredRun) -> float:
    """How far the run's series reach, in seconds since its start: its duration once it ended, else its last
    heartbeat (a run still running, or one whose soak was killed)."""
    if run.duration_s is not None:
        return run.duration_s
    for stamp in (run.ended_at, run.heartbeat_at):
        if stamp:
            moment = datetime.fromisoformat(stamp)
            moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # older rows stored UTC without a zone
            return max(moment.timestamp() - run.t0_epoch_s, 0.0)
    return 0.0


def server_roots(store: Store, run: StoredRun) -> tuple[int, ...]:
    """The server's root pids over the whole run: its process group, and every pid a server_start, restart or
    server_processes event named. One set for the run, so a process's role label never changes within it."""
    kinds = (EventKind.SERVER_START, EventKind.RESTART, EventKind.SERVER_PROCESSES)
    query = select(EventRow.data_json).where(EventRow.run_id == run.id, EventRow.kind.in_([str(k) for k in kinds]))
    pids = {run.server_pgid} if run.server_pgid else set()
    for (data_json,) in _rows(store, query):
        data = json.loads(data_json) if data_json else {}
        pids.update(pid for pid in [data.get("pid"), *(data.get("pids") or [])] if isinstance(pid, int))
    return tuple(sorted(pids))


def scope_of(store: Store, run: StoredRun) -> Scope:
    """The run's labels, reach, end and server roots."""
    return Scope(run, run_labels(run), run_end_s(run), run.ended_at is not None, server_roots(store, run))


# -- reading ---------------------------------------------------------------------------------------------------
def _rows(store: Store, query: Select) -> Iterator[tuple]:
    """A select's rows, streamed in batches; a database error is one StorageError line."""
    try:
        with store.engine.connect() as connection:
            result = connection.execution_options(yield_per=BATCH_ROWS).execute(query)
            for part in result.partitions():
                yield from part
    except SQLAlchemyError as exc:
        raise StorageError(f"cannot read the database: {getattr(exc, 'orig', None) or exc}") from None


def _cumulative(steps: Iterable[tuple[Labels, float, float, Step | None]], zero: Step) -> Iterator[Point]:
    """A counter's or histogram's points from what each interval (start_s, end_s) added, in series order.

    A series starts, as on the live page, once it first counts: 0 at the start of that interval (nothing had
    counted before it), then its running total at the end of every interval from there on.
    """
    key: Labels | None = None
    total: Any = None
    for labels, start_s, end_s, step in steps:
        if labels != key:
            key, total = labels, None
        if total is None:
            if not step:
                continue
            total = zero
            yield Point(labels, start_s, zero)
        if step:
            total = total + step
        yield Point(labels, end_s, total)


# -- counters and histograms from the windows --------------------------------------------------------------------
def _window_steps(store: Store, scope: Scope, column: Any, per_scenario: bool = True,
                  extra: Labels = ()) -> Iterator[tuple[Labels, float, float, float | None]]:
    """(labels, start_s, end_s, count) of each request window, series by series: one scenario's windows in order
    (the "*" rows alone, for a series without a scenario label, so no request counts twice)."""
    table = RequestWindowRow
    query = select(table.scenario, table.start_s, table.end_s, column).where(table.run_id == scope.run.id)
    query = query.where(table.scenario != ALL_SCENARIOS) if per_scenario else query.where(table.scenario == ALL_SCENARIOS)
    for scenario, start_s, end_s, count in _rows(store, query.order_by(table.scenario, table.window_index)):
        labels = ((scenario,) if per_scenario else ()) + extra
        yield labels, start_s, min(end_s, scope.end_s), count  # the open window ends in the future: cut it at the run's reach


ERRORS_SUM = functools.reduce(operator.add, [getattr(RequestWindowRow, f"err_{name}") for name in ERROR_CLASSES])
OUTCOME_COLUMNS = {"ok": RequestWindowRow.ok, "error": ERRORS_SUM, "cancelled": RequestWindowRow.cancelled,
                   "expected_error": RequestWindowRow.expected_errors}


def requests_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_requests_total{scenario, outcome}: a window's outcomes as the live page counts them (error: every class)."""
    for outcome, column in OUTCOME_COLUMNS.items():
        yield from _cumulative(_window_steps(store, scope, column, extra=(outcome,)), 0.0)


def errors_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_request_errors_total{scenario, error_class}."""
    for name in ERROR_CLASSES:
        column = getattr(RequestWindowRow, f"err_{name}")
        yield from _cumulative(_window_steps(store, scope, column, extra=(name,)), 0.0)


def late_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_requests_late_total: requests sent more than 1 s late, every scenario (the "*" rows)."""
    return _cumulative(_window_steps(store, scope, RequestWindowRow.late_sends_1s, per_scenario=False), 0.0)


def within_slo_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_requests_within_slo_total{scenario}: only a run with --slo stored it (NULL otherwise: no series)."""
    return _cumulative(_window_steps(store, scope, RequestWindowRow.slo_met), 0.0)


def token_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """gen_ai_client_token_usage{scenario, gen_ai_token_type}: the windows store each scenario's token sums and
    request counts, not tokens per request, so the histogram has its +Inf bucket, count and sum, and no other bucket."""
    for token_type, column in (("input", RequestWindowRow.prompt_tokens), ("output", RequestWindowRow.output_tokens)):
        yield from _cumulative(_token_steps(store, scope, column, token_type), HistogramState((), 0, 0.0))


def _token_steps(store: Store, scope: Scope, column: Any,
                 token_type: str) -> Iterator[tuple[Labels, float, float, HistogramState]]:
    """Each window's tokens of one type as a histogram step: every finished request counted, its tokens summed."""
    table = RequestWindowRow
    query = (select(table.scenario, table.start_s, table.end_s, table.requests, column)
             .where(table.run_id == scope.run.id, table.scenario != ALL_SCENARIOS)
             .order_by(table.scenario, table.window_index))
    for scenario, start_s, end_s, requests, tokens in _rows(store, query):
        yield (scenario, token_type), start_s, min(end_s, scope.end_s), HistogramState((), requests, float(tokens))


# Latency windows' metric names → the histogram each feeds (TPOT is not stored: docs/observability.md).
LATENCY_SPECS = {catalog.TTFT: "ttft", catalog.ITL: "itl", catalog.E2E: "e2e", catalog.LAG: "lag"}


def latency_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """A latency histogram{scenario}, cumulative over the windows' stored HDR histograms (per scenario: the "*"
    rows would count every request twice)."""
    table = LatencyWindowRow
    query = (select(table.scenario, table.start_s, table.end_s, table.hist, table.mean_ms)
             .where(table.run_id == scope.run.id, table.metric == LATENCY_SPECS[spec], table.scenario != ALL_SCENARIOS)
             .order_by(table.scenario, table.window_index))
    steps = (((scenario,), start_s, min(end_s, scope.end_s), hdr_state(hist, mean_ms, spec.buckets) if hist else None)
             for scenario, start_s, end_s, hist, mean_ms in _rows(store, query))
    return _cumulative(steps, HistogramState((0,) * len(spec.buckets), 0, 0.0))


def hdr_state(text: str, mean_ms: float | None, bounds_s: tuple[float, ...]) -> HistogramState:
    """One window's stored HDR histogram (microseconds) as bucket counts: values ≤ each bound in seconds, to HDR's
    precision (3 significant digits: the HDR bucket holding a bound counts as ≤ it). The sum is the stored mean
    × count, which is how the window's mean was made from the same histogram."""
    histogram = decode_histogram(text)
    counts = np.ctypeslib.as_array(histogram.counts)[: histogram.counts_len]
    cumulative = np.cumsum(counts, dtype=np.int64)
    layout = (histogram.lowest_trackable_value, histogram.highest_trackable_value, histogram.significant_figures)
    total = int(cumulative[-1])
    buckets = tuple(int(count) for count in cumulative[_bound_indices(*layout, bounds_s)])
    return HistogramState(buckets, total, (mean_ms or 0.0) * total / 1000.0)


@functools.cache
def _bound_indices(lowest_us: int, highest_us: int, digits: int, bounds_s: tuple[float, ...]) -> np.ndarray:
    """The counts-array index holding each bound (as whole microseconds: values are recorded so), for one layout."""
    layout = HdrHistogram(lowest_us, highest_us, digits)
    whole_us = [min(max(math.floor(round(bound * 1e6, 6)), lowest_us), highest_us) for bound in bounds_s]
    return np.array([layout.get_counts_array_index(value) for value in whole_us], dtype=np.int64)


# -- gauges at their own sample times ----------------------------------------------------------------------------
def _gauge(store: Store, query: Select, labels_of: Callable[[tuple], Labels]) -> Iterator[Point]:
    """Points of a gauge from a select of (series key…, t_s, value) ordered by series and time."""
    key: tuple | None = None
    labels: Labels = ()
    for row in _rows(store, query):
        if row[:-2] != key:  # once per series: a process's role is worked out once, not at each sample
            key, labels = row[:-2], labels_of(row[:-2])
        yield Point(labels, row[-2], float(row[-1]))


def server_memory_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_server_process_{resident_memory,swap}_bytes{process_role, process, pid}."""
    table = ProcessSample
    column = table.rss_bytes if spec is catalog.SERVER_RSS else table.swap_bytes
    query = (select(table.pid, table.name, table.t_s, column)
             .where(table.run_id == scope.run.id, table.role == "server", column.is_not(None))
             .order_by(table.pid, table.name, table.t_s))
    roots = list(scope.roots)

    def labels_of(key: tuple) -> Labels:
        pid, name = key
        return process_role(ProcessStats(pid=pid, name=name, rss_bytes=None), roots), name, str(pid)

    return _gauge(store, query, labels_of)


def client_memory_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_client_resident_memory_bytes: soak's own process (role client)."""
    table = ProcessSample
    query = (select(table.t_s, table.rss_bytes)
             .where(table.run_id == scope.run.id, table.role == "client", table.rss_bytes.is_not(None))
             .order_by(table.t_s))
    return _gauge(store, query, lambda key: ())


SERVER_COLUMNS = {catalog.KV_USAGE: ServerSample.kv_usage, catalog.RUNNING: ServerSample.running,
                  catalog.WAITING: ServerSample.waiting}


def server_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """KV-cache usage, running and waiting requests{source}, from each scrape that read them."""
    table, column = ServerSample, SERVER_COLUMNS[spec]
    query = (select(table.source, table.t_s, column)
             .where(table.run_id == scope.run.id, column.is_not(None))
             .order_by(table.source, table.t_s))
    return _gauge(store, query, lambda key: (key[0],))


def gpu_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_gpu_memory_used_bytes{gpu}."""
    table = GpuSample
    query = (select(table.gpu_index, table.t_s, table.mem_used_bytes)
             .where(table.run_id == scope.run.id, table.mem_used_bytes.is_not(None))
             .order_by(table.gpu_index, table.t_s))
    return _gauge(store, query, lambda key: (str(key[0]),))


def gpu_process_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_gpu_process_memory_used_bytes{gpu, pid}."""
    table = GpuProcessSample
    query = (select(table.gpu_index, table.pid, table.t_s, table.used_bytes)
             .where(table.run_id == scope.run.id, table.used_bytes.is_not(None))
             .order_by(table.gpu_index, table.pid, table.t_s))
    return _gauge(store, query, lambda key: (str(key[0]), str(key[1])))


# -- the run's own gauges, its verdicts and its events -----------------------------------------------------------
def _grid(end_s: float) -> Iterator[float]:
    """0, RUN_STEP_S, 2·RUN_STEP_S … and the end itself: a constant repeated often enough to stay in a query."""
    steps = int(end_s // RUN_STEP_S)
    yield from (index * RUN_STEP_S for index in range(steps + 1))
    if end_s > steps * RUN_STEP_S:
        yield end_s


def run_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_run_info, _start_time_seconds, _planned_duration_seconds and _warmup_seconds over the run's span."""
    run = scope.run
    labels, value = {
        catalog.RUN_INFO: ((run.model or "", run.target_kind), 1.0),
        catalog.RUN_START: ((), run.t0_epoch_s),
        catalog.RUN_PLANNED: ((), run.planned_duration_s),
        catalog.RUN_WARMUP: ((), run.warmup_s),
    }[spec]
    return (Point(labels, t_s, value) for t_s in _grid(scope.end_s))


def finished_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_run_finished: 0 while the run went on, 1 at its end once it ended."""
    for t_s in _grid(scope.end_s):
        yield Point((), t_s, 1.0 if scope.ended and t_s >= scope.end_s else 0.0)


def verdict_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_check_verdict{check}: each check's final verdict at the run's end (a run not yet judged has none)."""
    try:
        summary = loads_summary(scope.run.summary_json) or {}
    except ValueError as exc:
        raise StorageError(f"run {scope.run.id}: its stored summary cannot be read: {exc}") from None
    verdicts = {f.get("check"): f.get("verdict") for f in summary.get("findings") or [] if f.get("check")}
    for check in sorted(verdicts):
        yield Point((str(check),), scope.end_s, float(catalog.VERDICT_VALUES.get(str(verdicts[check]), -1)))


def event_points(store: Store, scope: Scope, spec: MetricSpec) -> Iterator[Point]:
    """soak_events_total{kind}: each kind's running count at each of its events (0 at the run's start)."""
    query = (select(EventRow.kind, EventRow.t_s).where(EventRow.run_id == scope.run.id)
             .order_by(EventRow.kind, EventRow.t_s, EventRow.id))
    return _cumulative((((kind,), min(t_s, 0.0), t_s, 1.0) for kind, t_s in _rows(store, query)), 0.0)


# -- the families, in the catalog's order ------------------------------------------------------------------------
# Each family's points: (store, scope, spec) → its points in series and time order.
Source = Callable[[Store, Scope, MetricSpec], Iterable[Point]]
SOURCES: dict[MetricSpec, Source] = {
    catalog.RUN_INFO: run_points, catalog.RUN_START: run_points, catalog.RUN_PLANNED: run_points,
    catalog.RUN_WARMUP: run_points, catalog.FINISHED: finished_points,
    catalog.REQUESTS: requests_points, catalog.ERRORS: errors_points, catalog.LATE: late_points,
    catalog.LAG: latency_points, catalog.TTFT: latency_points, catalog.ITL: latency_points, catalog.E2E: latency_points,
    catalog.TOKENS: token_points, catalog.WITHIN_SLO: within_slo_points, catalog.EVENTS: event_points,
    catalog.CLIENT_RSS: client_memory_points, catalog.SERVER_RSS: server_memory_points,
    catalog.SERVER_SWAP: server_memory_points, catalog.KV_USAGE: server_points, catalog.RUNNING: server_points,
    catalog.WAITING: server_points, catalog.GPU_USED: gpu_points, catalog.GPU_PROCESS: gpu_process_points,
    catalog.CHECK_VERDICT: verdict_points,
}
# What a stored run cannot give (docs/observability.md says why): a family of the catalog in neither is a mistake.
NOT_STORED = (catalog.HEARTBEAT, catalog.IN_FLIGHT, catalog.OFFERED, catalog.SENT, catalog.TPOT, catalog.CLIENT_CPU,
              catalog.LOOKS, catalog.OTLP_FAILURES)
EXPORTED = tuple(spec for spec in catalog.CATALOG if spec in SOURCES)


# -- rendering ---------------------------------------------------------------------------------------------------
class _Registry:
    """What `generate_latest` reads: one family."""

    def __init__(self, family: Metric):
        self.family = family

    def collect(self) -> list[Metric]:
        return [self.family]


def stamped(points: Iterable[Point], t0_epoch_s: float) -> Iterator[tuple[int, Point]]:
    """Each point with its Unix time in whole milliseconds (Prometheus's resolution), one point per series and
    millisecond: where two share one (a window cut at the run's end, two events at once), the later wins, since it
    holds the count so far and promtool would keep the first."""
    held: tuple[int, Point] | None = None
    for point in points:
        at_ms = round((t0_epoch_s + point.t_s) * 1000.0)
        if held is not None and (held[1].labels != point.labels or at_ms > held[0]):
            yield held
        held = (at_ms, point)
    if held is not None:
        yield held


def _family(spec: MetricSpec, scope: Scope, stamped: list[tuple[int, Point]]) -> Metric:
    """A prometheus_client family of the spec holding the given points."""
    names = [*RUN_LABELS, *spec.labels]
    kinds = {Kind.COUNTER: CounterMetricFamily, Kind.GAUGE: GaugeMetricFamily, Kind.HISTOGRAM: HistogramMetricFamily}
    family = kinds[spec.kind](spec.prom, spec.help, labels=names)
    for at_ms, point in stamped:
        labels, timestamp = [*scope.labels, *point.labels], _timestamp(at_ms)
        if isinstance(point.value, HistogramState):
            family.add_metric(labels, _buckets(spec, point.value), point.value.sum, timestamp=timestamp)
        else:
            family.add_metric(labels, point.value, timestamp=timestamp)
    return family


def _timestamp(at_ms: int) -> Timestamp:
    return Timestamp(at_ms // 1000, at_ms % 1000 * 1_000_000)


def _buckets(spec: MetricSpec, state: HistogramState) -> list[tuple[str, float]]:
    """(le, count) pairs: the spec's bounds the state has counts for, then +Inf (the count)."""
    bounds = [(floatToGoString(bound), count) for bound, count in zip(spec.buckets, state.buckets)]
    return [*bounds, ("+Inf", state.count)]


def _values(value: float | HistogramState) -> list[float]:
    """A point's sample values in the order prometheus_client writes its lines: a histogram's buckets, +Inf, the
    count and the sum."""
    if isinstance(value, HistogramState):
        return [*value.buckets, value.count, value.count, value.sum]
    return [value]


def render(spec: MetricSpec, scope: Scope, stamped: list[tuple[int, Point]]) -> bytes:
    """The family as prometheus_client writes it: metadata, the points' lines, `# EOF`."""
    return generate_latest(_Registry(_family(spec, scope, stamped)))


class _Lines:
    """A family's sample lines, series by series. prometheus_client renders a series' first point; its later points
    reuse those lines' names and escaped labels with their own values and timestamps (escaping each label of each
    sample again cost 85 % of an export's time)."""

    def __init__(self, spec: MetricSpec, scope: Scope, metadata: bytes):
        self.spec, self.scope, self.metadata = spec, scope, metadata
        self.labels: Labels | None = None
        self.prefixes: list[bytes] = []

    def of(self, at_ms: int, point: Point) -> list[bytes]:
        """The point's lines (each ending in a newline)."""
        if point.labels != self.labels:
            body = render(self.spec, self.scope, [(at_ms, point)]).removeprefix(self.metadata).removesuffix(EOF)
            lines = body.splitlines(keepends=True)
            self.labels, self.prefixes = point.labels, [line.rsplit(b" ", 2)[0] for line in lines]
            return lines
        stamp = b" " + str(_timestamp(at_ms)).encode() + b"\n"
        return [b"%s %s%s" % (prefix, floatToGoString(value).encode(), stamp)
                for prefix, value in zip(self.prefixes, _values(point.value), strict=True)]


def write_family(handle: IO[bytes], spec: MetricSpec, scope: Scope, points: Iterable[Point]) -> int:
    """One family whole: its metadata once, then every series' points; returns its sample lines (0: the run stored
    nothing for it, and nothing is written)."""
    metadata = render(spec, scope, []).removesuffix(EOF)
    lines, samples = _Lines(spec, scope, metadata), 0
    for at_ms, point in stamped(points, scope.run.t0_epoch_s):
        if not samples:
            handle.write(metadata)
        written = lines.of(at_ms, point)
        handle.writelines(written)
        samples += len(written)
    return samples


def write_run(store: Store, run: StoredRun, handle: IO[bytes],
              on_family: Callable[[str], None] | None = None) -> tuple[int, int]:
    """The run's series as OpenMetrics text, `# EOF` last; `on_family` hears each family's name before it is read.
    Returns (families written, sample lines)."""
    scope = scope_of(store, run)
    families = samples = 0
    for spec in EXPORTED:
        if on_family:
            on_family(spec.prom)
        written = write_family(handle, spec, scope, SOURCES[spec](store, scope, spec))
        families, samples = families + bool(written), samples + written
    handle.write(EOF)
    return families, samples


def export_openmetrics(store: Store, run_id: str, folder: Path,
                       on_family: Callable[[str], None] | None = None) -> Exported:
    """Write run `run_id` to `folder/<run_id>.om.txt`, through a temporary file: a failed export leaves no half
    file behind for promtool to import."""
    run = store.get_run(run_id)
    path = folder / f"{run.id}{SUFFIX}"
    partial = path.with_name(path.name + ".partial")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as handle:
            families, samples = write_run(store, run, handle, on_family)
        os.replace(partial, path)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        with suppress(OSError):  # renamed away once written; what a failure left is dropped
            partial.unlink(missing_ok=True)
    return Exported(path, families, samples)
