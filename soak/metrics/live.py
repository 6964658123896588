"""The run's series as they stand now, fed while the run goes on, read by the `/metrics` page and the OTLP push.

One object holds the numbers (`LiveSeries`): counters and histograms the finished requests add to, gauges the
samples, looks and the run's own clock replace. The conductor hands it every finished request (a load worker's
too: they reach the conductor like every other record), each early-stop look and each tick; the recorder hands
it the samples and events it queues. Reading it (`snapshot`) copies the numbers at one instant, so a scrape never
sees a half-updated request. Names, labels and buckets: `catalog.py`.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil

from soak.load.health import LoadCounters
from soak.load.records import CANCELLED, RequestRecord
from soak.metrics import catalog
from soak.metrics.catalog import MetricSpec
from soak.samples import GpuProcessReading, GpuReading, ProcessReading, Sample, ServerReading, process_role
from soak.slo import SloTargets

Labels = tuple[str, ...]
STALE_SAMPLES = 3  # sample intervals without a reading before a sampled series leaves the page


@dataclass(frozen=True)
class RunIdentity:
    """What every series says of its run (catalog.RUN_LABELS), and the run's constants."""

    run_id: str
    target: str
    replica: str
    soak_version: str
    model: str
    target_kind: str
    start_s: float
    planned_s: float
    warmup_s: float

    @property
    def labels(self) -> dict[str, str]:
        return {"run_id": self.run_id, "target": self.target, "replica": self.replica,
                "soak_version": self.soak_version}


class Histogram:
    """Counts per bucket (the last one past every bound), sum, count, min and max of one labelled series."""

    __slots__ = ("bounds", "counts", "sum", "count", "min", "max")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum, self.count = 0.0, 0
        self.min, self.max = float("inf"), float("-inf")

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # bisect_left: a value on a bound belongs to it (le)
        self.sum += value
        self.count += 1
        self.min, self.max = min(self.min, value), max(self.max, value)

    def observe_all(self, values: list[float]) -> None:
        """Several values at once (a request's inter-token gaps): the counts `observe` would give, without a call
        per value."""
        if not values:
            return
        counts, bounds = self.counts, self.bounds
        for value in values:
            counts[bisect_left(bounds, value)] += 1
        self.sum += sum(values)
        self.count += len(values)
        self.min, self.max = min(self.min, min(values)), max(self.max, max(values))

    def copy(self) -> Histogram:
        twin = Histogram(self.bounds)
        twin.counts, twin.sum, twin.count, twin.min, twin.max = list(self.counts), self.sum, self.count, self.min, self.max
        return twin

    def cumulative(self) -> list[int]:
        """Counts of values ≤ each bound, then the total (Prometheus's `le` buckets, +Inf last)."""
        total, out = 0, []
        for count in self.counts:
            total += count
            out.append(total)
        return out


@dataclass
class Snapshot:
    """The series at one instant: spec → {label values (in the spec's label order) → value}."""

    at_s: float
    values: dict[MetricSpec, dict[Labels, Any]] = field(default_factory=dict)

    def series(self, spec: MetricSpec) -> dict[Labels, Any]:
        return self.values.get(spec, {})


class LiveSeries:
    """Counters, histograms and gauges by spec and label values; every method is cheap and never raises on data."""

    def __init__(self) -> None:
        self._values: dict[MetricSpec, dict[Labels, Any]] = {spec: {} for spec in catalog.CATALOG}

    def add(self, spec: MetricSpec, labels: Labels, by: float = 1.0) -> None:
        series = self._values[spec]
        series[labels] = series.get(labels, 0.0) + by

    def observe(self, spec: MetricSpec, labels: Labels, value: float) -> None:
        series = self._values[spec]
        histogram = series.get(labels)
        if histogram is None:
            histogram = series[labels] = Histogram(spec.buckets)
        histogram.observe(value)

    def observe_all(self, spec: MetricSpec, labels: Labels, values: list[float]) -> None:
        """Several values into one series, looked up once: hashing a spec (a frozen dataclass, its bucket bounds
        included) costs more than placing a value."""
        series = self._values[spec]
        histogram = series.get(labels)
        if histogram is None:
            histogram = series[labels] = Histogram(spec.buckets)
        histogram.observe_all(values)

    def set(self, spec: MetricSpec, labels: Labels, value: float) -> None:
        self._values[spec][labels] = value

    def snapshot(self) -> Snapshot:
        """A copy: the numbers go on changing while a scrape or a push reads it."""
        copied = {spec: {labels: value.copy() if isinstance(value, Histogram) else value
                         for labels, value in list(series.items())}
                  for spec, series in list(self._values.items())}
        return Snapshot(at_s=time.time(), values=copied)


def outcome_of(record: RequestRecord) -> str:
    """ok, error, cancelled or expected_error (catalog.REQUESTS)."""
    if record.error_class == CANCELLED:
        return "cancelled"
    if record.expected_error:
        return "expected_error"
    return "ok" if record.error_class is None else "error"


class LiveMetrics:
    """What `soak start` feeds while it runs; `snapshot()` is what the page and the push read."""

    def __init__(self, identity: RunIdentity, slo: SloTargets | None = None,
                 counters: Callable[[], LoadCounters | None] | None = None, roots: Callable[[], list[int]] = list,
                 sample_every_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.identity, self.slo, self.counters, self.roots, self.clock = identity, slo, counters, roots, clock
        self.series = LiveSeries()
        # The server's own readings: spec → labels → (value, when read, monotonic); dropped once stale.
        self._sampled: dict[MetricSpec, dict[Labels, tuple[float, float]]] = {}
        self.stale_after_s = STALE_SAMPLES * sample_every_s + 1.0
        self._me = psutil.Process(os.getpid())
        self._constants()

    def _constants(self) -> None:
        identity, series = self.identity, self.series
        series.set(catalog.RUN_INFO, (identity.model, identity.target_kind), 1.0)
        series.set(catalog.RUN_START, (), identity.start_s)
        series.set(catalog.RUN_PLANNED, (), identity.planned_s)
        series.set(catalog.RUN_WARMUP, (), identity.warmup_s)
        series.set(catalog.FINISHED, (), 0.0)
        series.set(catalog.HEARTBEAT, (), time.time())
        series.set(catalog.LOOKS, (), 0.0)
        series.set(catalog.OTLP_FAILURES, (), 0.0)

    # -- fed by the conductor -------------------------------------------------------------------------------------
    def request(self, record: RequestRecord) -> None:
        """One finished request, from this process or a load worker."""
        series, scenario = self.series, (record.scenario,)
        outcome = outcome_of(record)
        series.add(catalog.REQUESTS, (record.scenario, outcome))
        if outcome == "error":
            series.add(catalog.ERRORS, (record.scenario, str(record.error_class)))
        series.observe(catalog.LAG, scenario, max(record.lag_ms, 0.0) / 1000.0)
        self._tokens(record)
        if outcome == "ok":
            self._latencies(record)
        if self.slo is not None and self.slo.met(record):
            series.add(catalog.WITHIN_SLO, scenario)

    def _tokens(self, record: RequestRecord) -> None:
        if record.prompt_tokens is not None:
            self.series.observe(catalog.TOKENS, (record.scenario, "input"), float(record.prompt_tokens))
        self.series.observe(catalog.TOKENS, (record.scenario, "output"), float(record.output_tokens or 0))

    def _latencies(self, record: RequestRecord) -> None:
        series, scenario = self.series, (record.scenario,)
        series.observe(catalog.E2E, scenario, record.e2e_ms / 1000.0)
        if record.ttft_ms is not None:
            series.observe(catalog.TTFT, scenario, record.ttft_ms / 1000.0)
            if record.output_tokens > 1:
                tpot_ms = (record.e2e_ms - record.ttft_ms) / (record.output_tokens - 1)
                series.observe(catalog.TPOT, scenario, max(tpot_ms, 0.0) / 1000.0)
        if record.itl_ms:
            series.observe_all(catalog.ITL, scenario, [gap_ms / 1000.0 for gap_ms in record.itl_ms])

    def look(self, verdicts: dict[str, str]) -> None:
        """The verdict of every check an early-stop look judged."""
        for check, verdict in verdicts.items():
            self.series.set(catalog.CHECK_VERDICT, (check,), float(catalog.VERDICT_VALUES.get(verdict, -1)))
        self.series.add(catalog.LOOKS, ())

    def tick(self) -> None:
        """The run's main loop went round: the heartbeat, the load's counters, soak's own CPU and memory."""
        series = self.series
        series.set(catalog.HEARTBEAT, (), time.time())
        counters = self.counters() if self.counters is not None else None
        if counters is not None:
            series.set(catalog.IN_FLIGHT, (), float(counters.in_flight))
            series.set(catalog.SENT, (), float(counters.sends))
            series.set(catalog.OFFERED, (), float(counters.sends + counters.skipped))
            series.set(catalog.LATE, (), float(counters.late_sends_1s))
        cpu = self._me.cpu_times()
        series.set(catalog.CLIENT_CPU, (), cpu.user + cpu.system)
        series.set(catalog.CLIENT_RSS, (), float(self._me.memory_info().rss))

    def finish(self, verdicts: dict[str, str]) -> None:
        """The run ended: its final verdicts replace the looks'."""
        for check, verdict in verdicts.items():
            self.series.set(catalog.CHECK_VERDICT, (check,), float(catalog.VERDICT_VALUES.get(verdict, -1)))
        self.series.set(catalog.FINISHED, (), 1.0)
        self.tick()

    def export_failed(self) -> None:
        self.series.add(catalog.OTLP_FAILURES, ())

    # -- fed by the recorder --------------------------------------------------------------------------------------
    def samples(self, samples: Iterable[Sample], t_s: float) -> None:
        """A round of samples (the sampler queues processes, each /metrics source and the GPUs apart): each reading
        sets its own series, which stays until STALE_SAMPLES sample intervals pass without one (a process that
        ended, a GPU gone, a server page that stopped answering)."""
        roots, now = self.roots(), self.clock()
        for sample in samples:
            for spec, labels, value in self._readings(sample, roots):
                self._sampled.setdefault(spec, {})[labels] = (value, now)

    def _readings(self, sample: Sample, roots: list[int]) -> Iterable[tuple[MetricSpec, Labels, float]]:
        if isinstance(sample, ProcessReading) and sample.role == "server":
            stats = sample.stats
            labels = (process_role(stats, roots), stats.name, str(stats.pid))
            if stats.rss_bytes is not None:
                yield catalog.SERVER_RSS, labels, float(stats.rss_bytes)
            if stats.swap_bytes is not None:
                yield catalog.SERVER_SWAP, labels, float(stats.swap_bytes)
        elif isinstance(sample, ServerReading):
            for spec, value in ((catalog.KV_USAGE, sample.kv_usage), (catalog.RUNNING, sample.running),
                                (catalog.WAITING, sample.waiting)):
                if value is not None:
                    yield spec, (sample.source,), float(value)
        elif isinstance(sample, GpuReading) and sample.mem_used_bytes is not None:
            yield catalog.GPU_USED, (str(sample.gpu_index),), float(sample.mem_used_bytes)
        elif isinstance(sample, GpuProcessReading) and sample.used_bytes is not None:
            yield catalog.GPU_PROCESS, (str(sample.gpu_index), str(sample.pid)), float(sample.used_bytes)

    def event(self, kind: str) -> None:
        self.series.add(catalog.EVENTS, (str(kind),))

    def snapshot(self) -> Snapshot:
        """Every series now; a sampled one only while its readings are fresh."""
        snapshot = self.series.snapshot()
        oldest = self.clock() - self.stale_after_s
        for spec, series in list(self._sampled.items()):
            fresh = {labels: value for labels, (value, at) in list(series.items()) if at >= oldest}
            if fresh:
                snapshot.values[spec] = fresh
        return snapshot
