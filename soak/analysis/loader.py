"""The adapter from the database to the analysis's plain inputs (`RunData`); the checks themselves never read
the database."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from soak.analysis.inputs import (
    ClientSeries,
    Event,
    GpuProcessSeries,
    GpuSeries,
    HostSeries,
    LatencyStats,
    ProbeReading,
    ProcessReading,
    ProcessSeries,
    RunData,
    ServerSeries,
    WindowInfo,
    WindowLatency,
    WindowRequests,
)
from soak.contracts import EventKind
from soak.slo import stored_slo_ms
from soak.store.models import (
    ALL_SCENARIOS,
    CLIENT_LOOP_LAG_MAX_METRIC,
    CLIENT_LOOP_LAG_P99_METRIC,
    ERROR_CLASSES,
    HOST_AVAILABLE_METRIC,
    Base,
    GpuProcessSample,
    GpuSample,
    LatencyWindowRow,
    MetricSample,
    ProcessSample,
    RequestWindowRow,
    ServerSample,
)
from soak.store.records import StoredRun
from soak.store.store import Store

# "network" first: a window a network outage overlaps is labelled so even when a probe ran in it too, so the error
# budget can leave out what the lost route, not the server, failed.
INTERVAL_KINDS = {"network": ("network_outage_start", "network_outage_end"),
                  "probe": ("probe_start", "probe_end"), "outage": ("outage_start", "outage_end"),
                  "forensics": ("forensics_start", "forensics_end")}


def _intervals(events: list[Event], start_kind: str, end_kind: str, end_s: float) -> list[tuple[float, float]]:
    """(start, end) spans between paired events; an unclosed span runs to `end_s`. A start event may say its span
    began earlier (data `since_s`: a network outage is known only after /health failed three times)."""
    spans, opened = [], None
    for event in events:
        if event.kind == start_kind and opened is None:
            opened = min(event.t_s, float(event.data.get("since_s", event.t_s)))
        elif event.kind == end_kind and opened is not None:
            spans.append((opened, event.t_s))
            opened = None
    if opened is not None:
        spans.append((opened, end_s))
    return spans


def worker_loss_spans(events: list[Event]) -> list[tuple[float, float]]:
    """Each lost load worker's silence, from its last status to the loss: its share was not sent then and its
    unreported requests never came back (soak.load.distributed)."""
    return [(event.t_s - float(event.data.get("unseen_s") or 0.0), event.t_s)
            for event in events if event.kind == EventKind.WORKER_LOST]


def build_windows(run: StoredRun, actual_s: float, events: list[Event]) -> tuple[WindowInfo, ...]:
    """Complete windows after warm-up and within the planned duration, each marked when a probe, an outage, a
    forensics window or a lost load worker overlaps it. A run overruns its plan only to close a forensics window
    (and read its capture): what follows is the tracker's aftermath, never judged."""
    warmup_s, window_s = run.warmup_s, run.window_s
    end_s = min(actual_s, run.planned_duration_s) if run.planned_duration_s and run.planned_duration_s > 0 else actual_s
    count = max(int(math.floor((end_s - warmup_s) / window_s + 1e-9)), 0)
    spans = {reason: _intervals(events, *kinds, actual_s) for reason, kinds in INTERVAL_KINDS.items()}
    spans["worker_lost"] = worker_loss_spans(events)
    windows = [WindowInfo(-1, 0.0, warmup_s, "warmup")] if warmup_s > 0 else []
    for index in range(count):
        start_s, end_s = warmup_s + index * window_s, warmup_s + (index + 1) * window_s
        excluded = next((reason for reason, found in spans.items()
                         if any(a < end_s and b > start_s for a, b in found)), None)
        windows.append(WindowInfo(index, start_s, end_s, excluded))
    return tuple(windows)


def _column(rows: Sequence[Base | None], name: str) -> np.ndarray | None:
    """A column of stored rows as floats, NaN where missing (a None row: all its values missing)."""
    values = [None if row is None else getattr(row, name) for row in rows]
    if all(value is None for value in values):
        return None
    return np.array([np.nan if value is None else float(value) for value in values])


def load_processes(store: Store, run_id: str) -> tuple[ProcessSeries, ...]:
    """One series per server PID, its swap beside its RSS (`leak.rss` judges the two together)."""
    by_pid: dict[int, list[ProcessSample]] = defaultdict(list)
    for row in store.read_rows(ProcessSample, run_id, role="server"):
        by_pid[row.pid].append(row)
    return tuple(
        ProcessSeries(pid=pid, name=rows[-1].name, t_s=_column(rows, "t_s"), rss_bytes=_column(rows, "rss_bytes"),
                      pss_bytes=_column(rows, "pss_bytes"), fds=_column(rows, "fds"), threads=_column(rows, "threads"),
                      swap_bytes=_column(rows, "swap_bytes"))
        for pid, rows in sorted(by_pid.items()))


def load_gpu_processes(store: Store, run_id: str) -> tuple[GpuProcessSeries, ...]:
    """One series per (PID, GPU)."""
    by_key: dict[tuple[int, int], list[GpuProcessSample]] = defaultdict(list)
    for row in store.read_rows(GpuProcessSample, run_id):
        by_key[(row.pid, row.gpu_index)].append(row)
    return tuple(GpuProcessSeries(pid=pid, gpu_index=gpu, t_s=_column(rows, "t_s"),
                                  used_bytes=_column(rows, "used_bytes"))
                 for (pid, gpu), rows in sorted(by_key.items()))


def load_gpus(store: Store, run_id: str) -> tuple[GpuSeries, ...]:
    """One series per GPU of each source (NVML first, then each dcgm-exporter page)."""
    by_key: dict[tuple[str, str], list[GpuSample]] = defaultdict(list)
    for row in store.read_rows(GpuSample, run_id):
        by_key[(row.source or "", row.uuid or str(row.gpu_index))].append(row)
    return tuple(GpuSeries(source=rows[0].source, gpu_index=rows[0].gpu_index, uuid=rows[0].uuid,
                           t_s=_column(rows, "t_s"), mem_used_bytes=_column(rows, "mem_used_bytes"),
                           ecc_dbe=_column(rows, "ecc_errors"),
                           remapped_rows_uncorrectable=_column(rows, "remapped_rows_uncorrectable"),
                           row_remap_failure=_column(rows, "row_remap_failure"), xid_errors=_column(rows, "xid_errors"))
                 for _, rows in sorted(by_key.items()))


def gauge_source(rows: list[ServerSample]) -> str:
    """The scraped source whose gauges the checks read: the server's own /metrics (the first source), unless it
    never carried running requests or generated tokens and another source did (Triton's metrics port, given
    with --metrics-url)."""
    sources = list(dict.fromkeys(row.source for row in rows))

    def carries(source: str) -> bool:
        return any(row.source == source and (row.running is not None or row.generation_tokens_total is not None)
                   for row in rows)
    return next((source for source in sources if carries(source)), sources[0])


def followed_sources(rows: list[ServerSample], first: str) -> list[str]:
    """`first`, then each source that carried gauges only after the one before it stopped: the server followed to a
    new address (a Kubernetes pod replaced mid-run), whose gauges continue the series. A source read alongside
    (a metrics port beside the server's own) overlaps it and is not taken."""
    spans: dict[str, list[float]] = {}
    for row in rows:
        if row.running is not None or row.generation_tokens_total is not None:
            span = spans.setdefault(row.source, [row.t_s, row.t_s])
            span[0], span[1] = min(span[0], row.t_s), max(span[1], row.t_s)
    chosen = [first]
    for source, (start, _) in sorted(spans.items(), key=lambda item: item[1][0]):
        if source not in chosen and first in spans and start > spans[chosen[-1]][1]:
            chosen.append(source)
    return chosen


def load_server(store: Store, run_id: str) -> ServerSeries | None:
    """The gauges and counters of the source that carries them (`gauge_source`), and of each address the server
    was followed to after it (`followed_sources`)."""
    rows = store.read_rows(ServerSample, run_id)
    if not rows:
        return None
    sources = followed_sources(rows, gauge_source(rows))
    rows = sorted((row for row in rows if row.source in sources), key=lambda row: row.t_s)
    scraped = [row if row.scrape_ok else None for row in rows]  # a failed scrape's gauges read as missing
    health = [None if row.health_ok is None else float(row.health_ok) for row in rows]
    return ServerSeries(
        t_s=_column(rows, "t_s"), running=_column(scraped, "running"), waiting=_column(scraped, "waiting"),
        kv_usage=_column(scraped, "kv_usage"), generation_tokens_total=_column(scraped, "generation_tokens_total"),
        preemptions_total=_column(rows, "preemptions_total"),
        itl_sum_s=_column(scraped, "itl_sum_s"), itl_count=_column(scraped, "itl_count"),
        health_ok=None if all(h is None for h in health) else np.array([np.nan if h is None else h for h in health]))


def _stats(row: LatencyWindowRow | None) -> LatencyStats | None:
    if not row or not row.count:
        return None
    return LatencyStats(count=row.count, p50_ms=row.p50_ms, p90_ms=row.p90_ms, p95_ms=row.p95_ms, p99_ms=row.p99_ms)


def load_latency(store: Store, run_id: str) -> tuple[tuple[WindowLatency, ...], dict[int, float]]:
    """Per-window latency of all scenarios, and each window's schedule-lag P99."""
    by_index: dict[int, dict[str, LatencyWindowRow]] = defaultdict(dict)
    for row in store.read_rows(LatencyWindowRow, run_id, scenario=ALL_SCENARIOS):
        by_index[row.window_index][row.metric] = row
    windows, lag_p99 = [], {}
    for index, metrics in sorted(by_index.items()):
        any_row = next(iter(metrics.values()))
        windows.append(WindowLatency(index=index, start_s=any_row.start_s, end_s=any_row.end_s,
                                     ttft=_stats(metrics.get("ttft")), itl=_stats(metrics.get("itl")),
                                     e2e=_stats(metrics.get("e2e"))))
        if (lag := metrics.get("lag")) and lag.count:
            lag_p99[index] = lag.p99_ms
    return tuple(windows), lag_p99


def _request_window(row: RequestWindowRow, lag_p99: dict[int, float]) -> WindowRequests:
    """One stored request_windows row (requests exclude cancelled ones; sends include them)."""
    return WindowRequests(index=row.window_index, start_s=row.start_s, end_s=row.end_s,
                         requests=row.requests - row.cancelled,
                         errors={name: getattr(row, "err_" + name) for name in ERROR_CLASSES}, cancelled=row.cancelled,
                         output_tokens=row.output_tokens, sends=row.requests, late_sends_1s=row.late_sends_1s,
                         lag_p99_ms=lag_p99.get(row.window_index), slo_met=row.slo_met)


def load_request_windows(store: Store, run_id: str, lag_p99: dict[int, float]) -> tuple[WindowRequests, ...]:
    """Per-window counts of all scenarios."""
    return tuple(_request_window(row, lag_p99)
                 for row in store.read_rows(RequestWindowRow, run_id, scenario=ALL_SCENARIOS))


def load_scenario_windows(store: Store, run_id: str) -> dict[str, tuple[WindowRequests, ...]]:
    """Per-window counts of each scenario on its own, with that scenario's schedule-lag P99."""
    lag_p99: dict[str, dict[int, float]] = defaultdict(dict)
    for row in store.read_rows(LatencyWindowRow, run_id, metric="lag"):
        if row.scenario != ALL_SCENARIOS and row.count:
            lag_p99[row.scenario][row.window_index] = row.p99_ms
    by_scenario: dict[str, list[WindowRequests]] = defaultdict(list)
    for row in store.read_rows(RequestWindowRow, run_id):  # in window order, so each list is too
        if row.scenario != ALL_SCENARIOS:
            by_scenario[row.scenario].append(_request_window(row, lag_p99[row.scenario]))
    return {name: tuple(windows) for name, windows in sorted(by_scenario.items())}


def load_host(store: Store, run_id: str) -> HostSeries | None:
    """The headroom series: host memory available per sample and, with GPUs, their free memory summed per sample.

    None when the host was not sampled (a run stored before it was, or a server soak could not see). GPU free memory
    is aligned to the host samples by sample time, which telemetry takes together (nan where one is missing).
    """
    rows = store.read_rows(MetricSample, run_id, name=HOST_AVAILABLE_METRIC)
    if not rows:
        return None
    t_s = [row.t_s for row in rows]
    gpu_free = _gpu_free_by_time(store, run_id)
    return HostSeries(t_s=t_s, available_bytes=[row.value for row in rows],
                      gpu_free_bytes=[gpu_free.get(t, np.nan) for t in t_s] if gpu_free else None)


def _gpu_free_by_time(store: Store, run_id: str) -> dict[float, float]:
    """Total minus used memory of the GPUs serving the tree, summed per sample time.

    The serving GPUs are those on which a server process held memory; when NVML named none, every GPU counts. A GPU
    missing either reading is skipped. NVML's readings are taken where there are any, else dcgm-exporter's.
    """
    serving = {row.gpu_index for row in store.read_rows(GpuProcessSample, run_id) if row.used_bytes}
    free: dict[float, float] = defaultdict(float)
    rows = store.read_rows(GpuSample, run_id)
    nvml = [row for row in rows if not row.source]
    for row in nvml or rows:
        if serving and row.gpu_index not in serving:
            continue
        if row.mem_total_bytes is not None and row.mem_used_bytes is not None:
            free[row.t_s] += row.mem_total_bytes - row.mem_used_bytes
    return dict(free)


def stored_horizon(run: StoredRun) -> dict[str, float]:
    """{"horizon_s": the service horizon stored with the run's config}, or {} for a run stored before `--horizon`
    existed, which then gets RunData's default (7 days, the same as `soak start`'s)."""
    horizon_s = run.config.get("horizon_s")
    return {"horizon_s": float(horizon_s)} if horizon_s else {}


def stored_slo(run: StoredRun) -> dict[str, Any]:
    """{"slo": {metric: target ms}} of the `--slo` stored with the run's config, or {} for a run that set none."""
    targets = stored_slo_ms(run.config)
    return {"slo": targets} if targets else {}


def load_client(store: Store, run_id: str, outage_indices: set[int]) -> ClientSeries | None:
    """soak's own CPU and RSS, and the run's schedule-lag figures from the merged lag histograms.

    Outage and forensics windows are left out: there soak itself was restarting the server, or attaching a
    debugger to it, not keeping to its schedule.
    """
    from soak.store.histograms import merged_percentiles

    rows = store.read_rows(ProcessSample, run_id, role="client")
    lag_rows = [r for r in store.read_rows(LatencyWindowRow, run_id, scenario=ALL_SCENARIOS, metric="lag")
                if r.window_index not in outage_indices]
    requests = [r for r in store.read_rows(RequestWindowRow, run_id, scenario=ALL_SCENARIOS)
                if r.window_index not in outage_indices]
    if not rows and not lag_rows:
        return None
    lag = merged_percentiles(r.hist for r in lag_rows)
    return ClientSeries(t_s=_column(rows, "t_s") if rows else np.array([]),
                        cpu_percent=_column(rows, "cpu_percent"), rss_bytes=_column(rows, "rss_bytes"),
                        sends=sum(r.requests for r in requests) or None,
                        late_sends_1s=sum(r.late_sends_1s for r in requests), lag_p99_ms=lag["p99"],
                        loop_lag_p99_ms=_last_metric(store, run_id, CLIENT_LOOP_LAG_P99_METRIC),
                        loop_lag_max_ms=_last_metric(store, run_id, CLIENT_LOOP_LAG_MAX_METRIC))


def _last_metric(store: Store, run_id: str, name: str) -> float | None:
    """The latest stored value of one of soak's own running figures (None when never stored)."""
    rows = store.read_rows(MetricSample, run_id, name=name)
    return float(max(rows, key=lambda row: row.t_s).value) if rows else None


def load_probes(events: list[Event]) -> tuple[ProbeReading, ...]:
    """Idle-probe readings recorded by telemetry at the end of each hold."""
    readings = []
    for event in events:
        if event.kind != EventKind.PROBE_READING:
            continue
        data = event.data
        processes = tuple(ProcessReading(pid=p["pid"], name=p.get("name") or "", rss_bytes=p.get("rss_bytes") or 0,
                                         fds=p.get("fds"), swap_bytes=p.get("swap_bytes"))
                          for p in data.get("processes", []))
        readings.append(ProbeReading(t_s=event.t_s, kv_usage=data.get("kv_usage"), running=data.get("running"),
                                     waiting=data.get("waiting"), drained=bool(data.get("drained", True)),
                                     processes=processes))
    return tuple(readings)


def outside(probes: tuple[ProbeReading, ...], spans: list[tuple[float, float]]) -> tuple[ProbeReading, ...]:
    """The probe readings taken outside every span: one taken while a forensics tracker held memory of its own in
    the server is not the server's floor."""
    return tuple(p for p in probes if not any(start <= p.t_s <= end for start, end in spans))


def load_run_data(store: Store, run: StoredRun, stopped_early: bool) -> RunData:
    """Everything the checks need about one stored run."""
    run_id = run.id
    events = store.read_events(run_id)
    actual_s = run.duration_s or (events[-1].t_s if events else 0.0)
    latency, lag_p99 = load_latency(store, run_id)
    request_windows = load_request_windows(store, run_id, lag_p99)
    windows = build_windows(run, actual_s, events)
    probes = outside(load_probes(events), _intervals(events, *INTERVAL_KINDS["forensics"], actual_s))
    outage_indices = {w.index for w in windows if w.excluded in ("outage", "network", "forensics")}
    gpus = load_gpus(store, run_id)
    # a GPU NVML saw, or one whose framebuffer a dcgm-exporter page gave (leak.vram can judge it)
    gpu_seen = any(g.source is None or g.mem_used_bytes is not None for g in gpus)
    return RunData(
        planned_duration_s=run.planned_duration_s, actual_duration_s=actual_s, warmup_s=run.warmup_s,
        window_s=run.window_s, windows=windows, stopped_early=stopped_early,
        gpu_seen=gpu_seen, probes_ran=bool(probes),
        server_managed=run.target_kind != "external", processes=load_processes(store, run_id),
        gpu_processes=load_gpu_processes(store, run_id), probes=probes, latency_windows=latency,
        request_windows=request_windows, server=load_server(store, run_id), client=load_client(store, run_id, outage_indices),
        events=tuple(events),
        total_requests=sum(w.requests for w in request_windows),
        scenario_windows=load_scenario_windows(store, run_id), host=load_host(store, run_id),
        gpus=gpus, **stored_horizon(run),
        **stored_slo(run), observe_only=bool(run.config.get("observe_only")),
        network_outages=tuple(_intervals(events, *INTERVAL_KINDS["network"], actual_s)),
    )
