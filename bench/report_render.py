"""Benchmark: render the HTML report of a synthetic 72 h run sampled at 1 Hz, against a 1 h run.

Fills a temporary SQLite database through the models (server tree of 3 processes plus soak itself, one GPU,
server gauges, 30-minute latency and request windows with HDR histograms, hourly idle probes), then times
`render_report` and prints time and file size of both runs and their ratios. The goal: ≤ 15 s.

    python bench/report_render.py [--hours 72] [--short-hours 1]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram
from sqlalchemy import insert

from soak.contracts import Summary, SummaryFinding, Verdict
from soak.report import render_report
from soak.report.context import build_context
from soak.report.render import render_html
from soak.run.summary import build_summary
from soak.store import Store
from soak.store.models import (
    EventRow,
    GpuProcessSample,
    GpuSample,
    LatencyWindowRow,
    ProcessSample,
    RequestWindowRow,
    Run,
    ServerSample,
)

MIB = 2**20
SERVER_TREE = ((5001, "vllm-api"), (5002, "EngineCore"), (5003, "tokenizer"))
CLIENT_PID = 777
INSERT_BATCH = 50_000


def run_row(run_id: str, duration_s: float, warmup_s: float, window_s: float) -> dict:
    return {
        "id": run_id, "status": "completed", "started_at": "2026-12-04T20:00:00+00:00", "t0_epoch_s": 1.8e9,
        "ended_at": "2026-12-07T20:00:00+00:00", "heartbeat_at": None, "planned_duration_s": duration_s,
        "duration_s": duration_s, "warmup_s": warmup_s, "window_s": window_s, "soak_pid": CLIENT_PID,
        "server_pgid": 5000, "server_cmd": "vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000",
        "out_dir": "/tmp/soak-runs/" + run_id, "target_kind": "vllm", "target_url": "http://127.0.0.1:8000",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "schedule_name": "weekend", "config_json": json.dumps({}),
        "environment_json": json.dumps({"host": "bench", "python": "3.11", "gpus": [{"name": "H200"}]}),
        "verdict": "PASS", "verdict_reason": "all required checks passed", "summary_json": None,
    }


def insert_batched(store: Store, model: type, rows: list[dict]) -> None:
    """Insert in batches through the model's table (one transaction per batch, as the writer does)."""
    for start in range(0, len(rows), INSERT_BATCH):
        with store.engine.begin() as connection:
            connection.execute(insert(model), rows[start:start + INSERT_BATCH])


def process_rows(run_id: str, t_s: np.ndarray, rng: np.random.Generator) -> list[dict]:
    """RSS/PSS/fds of the 3 server processes (EngineCore leaks 20 MiB/h, GC sawtooth, rare spikes) and soak."""
    rows = []
    for k, (pid, name) in enumerate(SERVER_TREE):
        rss = (1500 + 2000 * k) * MIB + 80 * MIB * ((t_s % 600) / 600) + rng.normal(0, 4 * MIB, len(t_s))
        rss += (20 * MIB / 3600) * t_s if name == "EngineCore" else 0
        rss[rng.random(len(t_s)) < 1e-4] += 900 * MIB
        rows += [{"run_id": run_id, "t_s": t, "role": "server", "pid": pid, "ppid": 5000, "name": name,
                  "rss_bytes": int(r), "pss_bytes": int(r * 0.85), "uss_bytes": int(r * 0.8), "fds": 60 + k,
                  "threads": 20, "cpu_percent": 50.0} for t, r in zip(t_s.tolist(), rss.tolist())]
    cpu = rng.normal(6, 1, len(t_s))
    rows += [{"run_id": run_id, "t_s": t, "role": "client", "pid": CLIENT_PID, "ppid": 1, "name": "soak",
              "rss_bytes": 180 * MIB, "pss_bytes": None, "uss_bytes": None, "fds": 30, "threads": 6,
              "cpu_percent": c} for t, c in zip(t_s.tolist(), cpu.tolist())]
    return rows


def gpu_and_server_rows(run_id: str, t_s: np.ndarray, rng: np.random.Generator) -> dict[type, list[dict]]:
    """One GPU, the EngineCore's VRAM, and the server's gauges at every sample."""
    times = t_s.tolist()
    kv = rng.uniform(0.2, 0.7, len(t_s)).tolist()
    running = rng.integers(0, 32, len(t_s)).tolist()
    return {
        GpuSample: [{"run_id": run_id, "t_s": t, "gpu_index": 0, "name": "NVIDIA H200",
                     "mem_used_bytes": 125_000 * MIB, "mem_total_bytes": 143_771 * MIB, "util_pct": 90.0,
                     "temp_c": 60.0, "power_w": 500.0} for t in times],
        GpuProcessSample: [{"run_id": run_id, "t_s": t, "gpu_index": 0, "pid": 5002, "used_bytes": 124_000 * MIB}
                           for t in times],
        ServerSample: [{"run_id": run_id, "t_s": t, "source": "http://127.0.0.1:8000/metrics", "scrape_ok": True,
                        "health_ok": True, "running": float(r), "waiting": 0.0, "kv_usage": u}
                       for t, r, u in zip(times, running, kv)],
    }


def window_bounds(duration_s: float, warmup_s: float, window_s: float) -> list[tuple[int, float, float]]:
    count = int((duration_s - warmup_s) // window_s)
    return [(-1, 0.0, warmup_s)] + [(i, warmup_s + i * window_s, warmup_s + (i + 1) * window_s) for i in range(count)]


def hist_of(values_ms: np.ndarray) -> HdrHistogram:
    hist = HdrHistogram(1, 3_600_000_000, 3)
    for value_us in np.maximum((values_ms * 1000).astype(np.int64), 1).tolist():
        hist.record_value(value_us)
    return hist


def window_rows(run_id: str, bounds: list, rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
    """Latency windows (2 scenarios and "*", 5 metrics, HDR histograms) and request windows."""
    latency, requests = [], []
    medians_ms = {"ttft": 250.0, "itl": 25.0, "e2e": 3000.0, "lag": 1.0, "queue": 5.0}
    for index, start_s, end_s in bounds:
        for scenario in ("chat", "long", "*"):
            n = 2000 if scenario == "*" else 1000
            for metric, median_ms in medians_ms.items():
                hist = hist_of(rng.lognormal(np.log(median_ms), 0.4, n))
                latency.append({"run_id": run_id, "window_index": index, "scenario": scenario, "metric": metric,
                                "start_s": start_s, "end_s": end_s, "count": n, "mean_ms": median_ms,
                                **{f"p{p}_ms": hist.get_value_at_percentile(p) / 1000 for p in (50, 90, 95, 99)},
                                "max_ms": hist.get_max_value() / 1000, "hist": hist.encode().decode()})
            count = int((end_s - start_s) * (10 if scenario == "*" else 5))
            requests.append({"run_id": run_id, "window_index": index, "scenario": scenario, "start_s": start_s,
                             "end_s": end_s, "requests": count, "ok": count - 2, "err_http_5xx": 1,
                             "err_timeout": 1, "output_tokens": count * 200, "prompt_tokens": count * 500})
    return latency, requests


def event_rows(run_id: str, duration_s: float, warmup_s: float) -> list[dict]:
    """Server start, warm-up end, and an idle probe every hour."""
    raw = [(0.0, "server_start", "vllm server at http://127.0.0.1:8000"), (warmup_s, "warmup_end", "")]
    for start_s in np.arange(3600.0, duration_s, 3600.0).tolist():
        raw += [(start_s, "probe_start", "idle probe"), (start_s + 20, "probe_drained", ""),
                (start_s + 50, "probe_end", "")]
    raw.append((duration_s, "run_end", "completed"))
    return [{"run_id": run_id, "t_s": t, "at": "2026-12-04T20:00:00+00:00", "kind": kind, "message": message}
            for t, kind, message in raw]


def summary(store: Store, run_id: str, warmup_s: float) -> Summary:
    """The stored run's summary with one leak finding and its fitted line, and the rest of the checks passing."""
    checks = ("leak.vram", "leak.kv", "leak.fds", "creep.ttft_p99", "creep.itl_p99", "creep.e2e_p99",
              "errors.rise", "errors.budget", "hang", "crashes", "throughput.decay", "client.saturation")
    findings = [{"check": "leak.rss", "verdict": "FAIL", "value": 20 * MIB, "unit": "bytes/h",
                 "ci": [18 * MIB, 22 * MIB], "threshold": 16 * MIB, "evidence": "RSS of EngineCore rises 20 MiB/h",
                 "trend": {"slope_per_s": 20 * MIB / 3600, "intercept": 10500 * MIB, "t0_s": warmup_s,
                           "space": "linear"}}]
    findings += [{"check": c, "verdict": "PASS", "value": 0.0, "unit": "", "ci": None, "threshold": None,
                  "evidence": "flat"} for c in checks]
    return build_summary(store.get_run(run_id), store, [SummaryFinding.model_validate(f) for f in findings],
                         Verdict.FAIL, "leak.rss FAIL", report_html=None)


def run_lengths(hours: float) -> tuple[float, float, float]:
    """Duration, warm-up and window of a run of `hours`, in seconds: the defaults of `soak.analysis.windows`."""
    duration_s = hours * 3600
    warmup_s = min(max(0.05 * duration_s, 30.0), 3600.0)
    return duration_s, warmup_s, min(max((duration_s - warmup_s) / 48, 5.0), 1800.0)


def build_run(store: Store, run_id: str, hours: float, seed: int = 1, **row_fields: object) -> None:
    """A synthetic run of `hours` at 1 Hz, with the default warm-up and window lengths; `row_fields` replace
    those of its `runs` row (a fleet's replica sets `fleet_id` and `replica`)."""
    duration_s, warmup_s, window_s = run_lengths(hours)
    rng = np.random.default_rng(seed)
    t_s = np.arange(0.0, duration_s, 1.0)
    insert_batched(store, Run, [run_row(run_id, duration_s, warmup_s, window_s) | row_fields])
    insert_batched(store, EventRow, event_rows(run_id, duration_s, warmup_s))
    insert_batched(store, ProcessSample, process_rows(run_id, t_s, rng))
    for model, rows in gpu_and_server_rows(run_id, t_s, rng).items():
        insert_batched(store, model, rows)
    latency, requests = window_rows(run_id, window_bounds(duration_s, warmup_s, window_s), rng)
    insert_batched(store, LatencyWindowRow, latency)
    insert_batched(store, RequestWindowRow, requests)


def time_report(store: Store, run_id: str, out: Path, run_summary: Summary) -> dict[str, float]:
    """Seconds to build the context, to render the HTML, and for the whole `render_report` (wall and CPU, which
    tells a busy machine from a slow report); bytes written."""
    start = time.perf_counter()
    context = build_context(store, run_id, run_summary)
    context_s = time.perf_counter() - start
    start = time.perf_counter()
    render_html(context)
    html_s = time.perf_counter() - start
    start, cpu_start = time.perf_counter(), time.process_time()
    path = render_report(store, run_id, run_summary, out)
    return {"context_s": context_s, "html_s": html_s, "total_s": time.perf_counter() - start,
            "cpu_s": time.process_time() - cpu_start, "bytes": path.stat().st_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=72.0)
    parser.add_argument("--short-hours", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = {}
        for label, hours in (("short", args.short_hours), ("long", args.hours)):
            store = Store.open(f"sqlite:///{folder}/{label}.db")
            run_id = f"20261204T200000Z-{label}"
            start = time.perf_counter()
            build_run(store, run_id, hours)
            build_s = time.perf_counter() - start
            db_bytes = sum(p.stat().st_size for p in Path(folder).glob(f"{label}.db*"))
            run_summary = summary(store, run_id, run_lengths(hours)[1])
            results[label] = time_report(store, run_id, Path(folder) / label / "report.html", run_summary)
            result = results[label]
            print(f"{hours:g} h run: database built in {build_s:.1f} s ({db_bytes / MIB:.0f} MiB); "
                  f"context {result['context_s']:.2f} s, HTML {result['html_s']:.2f} s, render_report "
                  f"{result['total_s']:.2f} s (CPU {result['cpu_s']:.2f} s), report {result['bytes'] / MIB:.2f} MiB")
            store.close()
        short, long = results["short"], results["long"]
        print(f"ratio {args.hours:g} h / {args.short_hours:g} h: time ×{long['total_s'] / short['total_s']:.1f}, "
              f"size ×{long['bytes'] / short['bytes']:.2f}; goal ≤ 15 s: "
              f"{'met' if long['total_s'] <= 15 else 'NOT met'} ({long['total_s']:.1f} s)")


if __name__ == "__main__":
    main()
