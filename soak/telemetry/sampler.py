"""The run's telemetry: APScheduler jobs that sample the server tree, GPUs (NVML, and any dcgm-exporter page among
the scraped ones), /metrics and soak itself, flush latency windows and beat the run's heartbeat."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
from apscheduler.schedulers.background import BackgroundScheduler

from soak.contracts import EventKind
from soak.samples import MetricReading, ProcessReading, ProcessStats, ServerReading
from soak.store.models import HOST_AVAILABLE_METRIC
from soak.store.recorder import Recorder, utc_now_iso
from soak.telemetry.dcgm import GpuClaim, XidChanges, gpu_reading
from soak.telemetry.dialects import DIALECTS, Dialect
from soak.telemetry.gpu import GpuSampler
from soak.telemetry.latency import LatencyWindows
from soak.telemetry.process import ProcessTreeSampler, SelfSampler, off_loop
from soak.telemetry.prometheus import Scrape, models_dialect, probe_health, scrape, server_reading

log = logging.getLogger(__name__)

EXTRA_METRICS_EVERY_S = 60.0  # the long table grows fast: other series at most once a minute
HEARTBEAT_EVERY_S = 5.0


@dataclass
class Snapshot:
    """The latest readings, for the live display and for idle-probe readings."""

    t_s: float = 0.0
    server_processes: list[ProcessStats] = field(default_factory=list)
    server: ServerReading | None = None  # the server's own /metrics (or the first other page with its gauges)
    client: ProcessStats | None = None
    gpu_process_bytes: int = 0
    host_available_bytes: int | None = None

    @property
    def server_rss_bytes(self) -> int:
        """Total RSS of the server tree."""
        return sum(row.rss_bytes or 0 for row in self.server_processes)


@dataclass
class TelemetrySources:
    """Where to read from: the server tree's root PIDs (a callable, since restarts change them), its URLs."""

    server_pids: Callable[[], list[int]]
    metrics_urls: list[str]
    health_url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    server_kind: str | None = None  # --server-kind: the dialect to read, instead of detecting it
    model: str | None = None  # the served model, so a labelled /metrics is read for it alone
    gpu_claim: GpuClaim = field(default_factory=GpuClaim)  # which GPUs of a dcgm-exporter page are this run's


METRICS_PROCESS_NAME = "server (from /metrics)"  # the process row read from process_* series, pid 0


class DialectWatch:
    """Whose /metrics names the server speaks: forced by --server-kind, else detected once and recorded.

    Detection takes the first scrape of the server's own /metrics whose series name a dialect; while /metrics
    fails, GET /v1/models is asked once (`owned_by` names vLLM, SGLang and llama.cpp). The event lists the
    readings the dialect never has; `close` records it again with those no scrape of the run carried (a
    llama.cpp build without the KV gauge, a TGI v2 backend), which is what the analysis reads.
    """

    def __init__(self, recorder: Recorder, sources: TelemetrySources):
        self.recorder, self.sources = recorder, sources
        self.dialect: Dialect | None = DIALECTS[sources.server_kind] if sources.server_kind else None
        self.source = "--server-kind"
        self.seen: set[str] = set()  # ServerSample fields some successful scrape carried
        self._asked_models = False
        if self.dialect is not None:
            self._record(self.dialect, self.source, not_measured(self.dialect))

    def _record(self, dialect: Dialect | None, source: str, missing: list[str]) -> None:
        name, server = (dialect.name, dialect.server) if dialect else (None, "the server")
        message = f"server dialect {name} ({server}), from {source}" if dialect else f"no server dialect: {source}"
        if missing:
            message += f"; not exposed: {', '.join(missing)}"
        log.info("%s", message)
        self.recorder.event(EventKind.SERVER_DIALECT, message, {
            "dialect": name, "server": server, "source": source, "not_measured": missing,
            "tokens_at_finish": bool(dialect and dialect.tokens_at_finish)})

    def describe(self) -> str:
        """One line for the user at start: whose names /metrics is read in, or that none was recognised yet."""
        if self.dialect is None:
            return ("the server's /metrics named no known server at the first scrape: its gauges are not read "
                    "until one does (name it with --server-kind; docs/servers.md)")
        return f"reading /metrics as {self.dialect.name} ({self.dialect.server}), from {self.source}"

    def close(self) -> None:
        """Record the dialect once more with the readings no scrape of the run carried (all six when /metrics
        never answered, or named no known server)."""
        missing = [text for key, text in GAUGE_TEXT.items() if key not in self.seen]
        if self.dialect is not None:
            self._record(self.dialect, self.source, missing)
        else:
            self._record(None, "the server's /metrics never named a known server (see --server-kind)", missing)

    def observe(self, reading: Scrape) -> None:
        """Note what a scrape carried; take the dialect it named, or ask /v1/models once when it failed."""
        if reading.ok:
            self.seen.update(key for key in GAUGE_TEXT if reading.value(key) is not None)
        if self.dialect is not None:
            return
        named = DIALECTS.get(reading.dialect or "")
        if named is not None:
            self.dialect, self.source = named, "the first /metrics scrape"
            self._record(named, self.source, not_measured(named))
        elif not reading.ok and not self._asked_models and self.sources.health_url:
            self._asked_models = True
            found = models_dialect(self.sources.health_url, self.sources.headers)
            if found is not None:
                self.dialect, self.source = found, "GET /v1/models (owned_by)"
                self._record(found, self.source, not_measured(found))


# ServerSample field → what it is, as the summary and the checks name it when missing.
GAUGE_TEXT = {"running": "running requests", "waiting": "waiting requests", "kv_usage": "KV-cache usage",
              "preemptions_total": "preemptions", "prompt_tokens_total": "prompt tokens",
              "generation_tokens_total": "generation tokens"}
DIALECT_FIELD = {"running": "running", "waiting": "waiting", "kv_usage": "kv_usage", "preemptions_total": "preemptions",
                 "prompt_tokens_total": "prompt_tokens", "generation_tokens_total": "generation_tokens"}


def not_measured(dialect: Dialect) -> list[str]:
    """What this server's /metrics never exposes, one phrase each (e.g. "preemptions")."""
    return [text for key, text in GAUGE_TEXT.items() if getattr(dialect, DIALECT_FIELD[key]) is None]


class Telemetry:
    """Samples on a schedule into the recorder; also aggregates finished requests into windows."""

    def __init__(self, recorder: Recorder, sources: TelemetrySources, windows: LatencyWindows,
                 sample_every_s: float, flush_every_s: float):
        self.recorder = recorder
        self.sources = sources
        self.windows = windows
        self.sample_every_s = sample_every_s
        self.flush_every_s = flush_every_s
        self.latest = Snapshot()
        self.tree = ProcessTreeSampler()
        self.me = SelfSampler()
        self.gpus = GpuSampler()
        self.dialects = DialectWatch(recorder, sources)
        self._last_extra_s = -EXTRA_METRICS_EVERY_S
        self.dcgm_xids = XidChanges()
        self._unclaimed_pages: set[str] = set()  # dcgm-exporter pages none of whose GPUs are this run's (said once)
        self._scheduler: BackgroundScheduler | None = None
        if not self.gpus.available:
            recorder.event(EventKind.NO_GPU, self.gpus.reason)

    # -- schedule --------------------------------------------------------------------------------
    def start(self) -> None:
        """Take a first sample now and start the periodic jobs."""
        self.sample()
        scheduler = BackgroundScheduler(timezone="UTC", job_defaults={
            "coalesce": True, "max_instances": 1, "misfire_grace_time": 30})
        scheduler.add_job(self._guard(self.sample), "interval", seconds=self.sample_every_s, id="sample")
        scheduler.add_job(self._guard(self.flush), "interval", seconds=self.flush_every_s, id="flush")
        scheduler.add_job(self._guard(self.heartbeat), "interval", seconds=HEARTBEAT_EVERY_S, id="heartbeat")
        scheduler.start()
        self._scheduler = scheduler

    def stop(self) -> None:
        """Stop the jobs, then take a final sample and flush the windows."""
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None
        self._guard(self.sample)()
        self._guard(self.flush)()
        self._guard(self.dialects.close)()
        self.gpus.close()

    @staticmethod
    def _guard(job: Callable[[], Any]) -> Callable[[], None]:
        """A job that logs its failure instead of dying, so one bad reading never stops sampling."""
        def run() -> None:
            try:
                job()
            except Exception:  # a sampler must survive anything a reading throws
                log.exception("telemetry job %s failed", getattr(job, "__name__", job))
        return run

    # -- jobs ------------------------------------------------------------------------------------
    def sample(self) -> Snapshot:
        """One reading of everything, written as wide rows at the same t_s."""
        t_s = self.recorder.elapsed_s()
        snapshot = Snapshot(t_s=t_s)
        self._sample_processes(snapshot, t_s)
        self._sample_host(snapshot, t_s)
        self._sample_gpus(snapshot, t_s)
        self._sample_servers(snapshot, t_s)
        self.latest = snapshot
        return snapshot

    def _sample_processes(self, snapshot: Snapshot, t_s: float) -> None:
        self.tree.set_roots(self.sources.server_pids())
        snapshot.server_processes = off_loop(self.tree.sample)  # PSS reads block for tens of ms a process
        snapshot.client = client = self.me.sample()
        self.recorder.samples([ProcessReading("server", stats) for stats in snapshot.server_processes], t_s)
        self.recorder.samples([ProcessReading("client", client)], t_s)

    def _sample_host(self, snapshot: Snapshot, t_s: float) -> None:
        """The host's available memory (MemAvailable), the headroom a leak eats into.

        Only while server processes were sampled on this host: without them the server may run elsewhere, and this
        host's memory would say nothing about its headroom.
        """
        if not snapshot.server_processes:
            return
        available = int(psutil.virtual_memory().available)
        snapshot.host_available_bytes = available
        self.recorder.samples([MetricReading(HOST_AVAILABLE_METRIC, available)], t_s)

    def _sample_gpus(self, snapshot: Snapshot, t_s: float) -> None:
        if not self.gpus.available:
            return
        gpus, processes = self.gpus.sample(self.tree.tree_pids())
        snapshot.gpu_process_bytes = sum(process.used_bytes or 0 for process in processes)
        self.recorder.samples([*gpus, *processes], t_s)
        for xid in self.gpus.drain_xid_events():
            self.recorder.event(EventKind.GPU_XID, f"XID error on GPU {xid.gpu_index}", xid.to_dict())

    def _sample_servers(self, snapshot: Snapshot, t_s: float) -> None:
        health_ok = probe_health(self.sources.health_url) if self.sources.health_url else None
        keep_extra = t_s - self._last_extra_s >= EXTRA_METRICS_EVERY_S
        for index, url in enumerate(self.sources.metrics_urls):
            dialect = self.dialects.dialect  # extra endpoints too; until it is known, each page's own names
            reading = scrape(url, self.sources.headers, with_extra=keep_extra or dialect is None, dialect=dialect,
                             model=self.sources.model)
            if index == 0:  # the first source is the server's own /metrics
                self.dialects.observe(reading)
                self._sample_metrics_process(snapshot, reading, t_s)
            self._record_dcgm(url, reading.gpus, t_s)
            server = server_reading(reading, url, health_ok)
            self.recorder.samples([server], t_s)
            if snapshot.server is None or (snapshot.server.running is None and server.running is not None):
                snapshot.server = server  # the server's own /metrics, unless only another source has its gauges
            if keep_extra:
                self.recorder.samples([MetricReading(name[:200], value, labels)
                                       for name, labels, value in reading.extra], t_s)
        if keep_extra:
            self._last_extra_s = t_s

    def _record_dcgm(self, url: str, gpus: list[dict[str, Any]], t_s: float) -> None:
        """A dcgm-exporter page's GPUs this run claims as gpu_samples rows of that source, and each new XID as a
        gpu_xid event."""
        claim = self.sources.gpu_claim
        mine = [row for row in gpus if claim.keeps(row)]
        if gpus and not mine and url not in self._unclaimed_pages:
            self._unclaimed_pages.add(url)
            self.recorder.event(EventKind.GPU_DCGM, claim.describe_none(url, len(gpus)),
                                {"source": url, "gpus": [], "xid_before_run": {}, "unclaimed": len(gpus)})
        gpus = mine
        if not gpus:
            return
        first = self.dcgm_xids.first_seen(url, gpus)
        if first is not None:
            before = "".join(f"; GPU {uuid} showed XID {code} before the run" for uuid, code in
                             first["xid_before_run"].items())
            self.recorder.event(EventKind.GPU_DCGM, f"dcgm-exporter {url}: {len(gpus)} GPU(s){before}", first)
        for xid in self.dcgm_xids.observe(url, gpus):
            log.warning("dcgm-exporter %s: GPU %s raised XID %d", url, xid["uuid"], xid["xid"])
            self.recorder.event(EventKind.GPU_XID, f"XID {xid['xid']} on GPU {xid['uuid']} (dcgm-exporter)", xid)
        self.recorder.samples([gpu_reading(row, url) for row in gpus], t_s)

    def _sample_metrics_process(self, snapshot: Snapshot, reading: Scrape, t_s: float) -> None:
        """The server's memory and open files from its /metrics, when none of its processes can be seen here."""
        rss, fds = reading.value("process_rss_bytes"), reading.value("process_fds")
        if snapshot.server_processes or (rss is None and fds is None):
            return
        stats = ProcessStats(pid=0, name=METRICS_PROCESS_NAME, rss_bytes=None if rss is None else int(rss),
                             fds=None if fds is None else int(fds))
        snapshot.server_processes = [stats]
        self.recorder.samples([ProcessReading("server", stats)], t_s)

    def flush(self) -> None:
        """Write every latency and request window that changed since the last flush."""
        latency, requests = self.windows.flush_windows(self.recorder.elapsed_s())
        self.recorder.windows([*latency, *requests])

    def heartbeat(self) -> None:
        """Mark the run alive, so a killed soak's run reads as aborted."""
        self.recorder.update_run(heartbeat_at=utc_now_iso())

    # -- idle probes -----------------------------------------------------------------------------
    def probe_reading(self, index: int, drained: bool) -> None:
        """Sample now, at the end of an idle probe's hold, and record the floor as a `probe_reading` event."""
        snapshot = self.sample()
        server = snapshot.server
        gauges = {name: getattr(server, name) if server else None for name in ("kv_usage", "running", "waiting")}
        data = {
            "index": index, "drained": drained, **gauges,
            "processes": [{"pid": row.pid, "name": row.name, "rss_bytes": row.rss_bytes, "swap_bytes": row.swap_bytes,
                           "pss_bytes": row.pss_bytes, "fds": row.fds} for row in snapshot.server_processes],
            "gpu_process_bytes": snapshot.gpu_process_bytes,
        }
        self.recorder.event(EventKind.PROBE_READING, f"idle probe {index}: kv={data['kv_usage']} running={data['running']}",
                            data)
