"""A realistic 30-minute run written through the models into a temporary SQLite database, and its report.

Three server processes (one leaking), a GPU, server gauges, two scenarios with per-window HDR histograms, request
windows with an error burst, phases, an idle probe, a crash and restart, and hostile strings in every place a
server, log or config could put them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram
from sqlalchemy import insert

from soak.analysis.baseline import BaselineComparison, ComparisonRow
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

RUN_ID = "20261202T101500Z-3f9a"
HOSTILE = "<script>alert(1)</script>"
DURATION_S, WARMUP_S, WINDOW_S, SAMPLE_S = 1800.0, 120.0, 60.0, 5.0
SCENARIOS = ("chat", "long")
SERVER_PROCS = ((4101, "vllm-api"), (4102, "EngineCore"), (4103, f"worker {HOSTILE}"))
MIB = 2**20


def encode_hist(values_ms: np.ndarray) -> HdrHistogram:
    """An HDR histogram of latencies in microseconds, as telemetry keeps them."""
    hist = HdrHistogram(1, 3_600_000_000, 3)
    for value_us in np.maximum((values_ms * 1000).astype(np.int64), 1):
        hist.record_value(int(value_us))
    return hist


def window_bounds() -> list[tuple[int, float, float]]:
    """(index, start, end): the warm-up window −1, then whole windows after warm-up."""
    count = int((DURATION_S - WARMUP_S) // WINDOW_S)
    return [(-1, 0.0, WARMUP_S)] + [(i, WARMUP_S + i * WINDOW_S, WARMUP_S + (i + 1) * WINDOW_S) for i in range(count)]


def latency_values(rng: np.random.Generator, metric: str, scenario: str, t_s: float, n: int) -> np.ndarray:
    """Lognormal latencies in ms; TTFT of the "long" scenario creeps upward over the run."""
    median_ms = {"ttft": 180.0, "itl": 22.0, "e2e": 2400.0, "lag": 0.8, "queue": 3.0}[metric]
    if scenario == "long":
        median_ms *= 1.6
    if metric == "ttft":
        median_ms *= 1 + 0.5 * t_s / DURATION_S
    return rng.lognormal(np.log(median_ms), 0.35, n)


def latency_rows(rng: np.random.Generator, with_hist: bool) -> tuple[list[dict], dict[str, list[np.ndarray]]]:
    """latency_windows rows for each scenario and "*", and the raw "*" values after warm-up per metric."""
    rows, star_values = [], {metric: [] for metric in ("ttft", "itl", "e2e", "lag", "queue")}
    for index, start_s, end_s in window_bounds():
        for metric in star_values:
            per_scenario = {s: latency_values(rng, metric, s, start_s, 150 + 10 * (index + 1)) for s in SCENARIOS}
            per_scenario["*"] = np.concatenate(list(per_scenario.values()))
            if index >= 0:
                star_values[metric].append(per_scenario["*"])
            for scenario, values in per_scenario.items():
                hist = encode_hist(values)
                rows.append({
                    "run_id": RUN_ID, "window_index": index, "scenario": scenario, "metric": metric,
                    "start_s": start_s, "end_s": end_s, "count": len(values), "mean_ms": float(values.mean()),
                    **{f"p{p}_ms": hist.get_value_at_percentile(p) / 1000 for p in (50, 90, 95, 99)},
                    "max_ms": float(values.max()), "hist": hist.encode().decode() if with_hist else None,
                })
    return rows, star_values


def request_rows() -> list[dict]:
    """request_windows rows per scenario and "*"; window 12 has a burst of HTTP 5xx."""
    rows = []
    for index, start_s, end_s in window_bounds():
        per_scenario = {}
        for k, scenario in enumerate(SCENARIOS):
            requests = int((end_s - start_s) * (2.0 if k == 0 else 0.5))
            err_5xx = 9 if index == 12 and k == 0 else 0
            err_timeout = 1 if index % 7 == 3 else 0
            per_scenario[scenario] = {
                "requests": requests, "ok": requests - err_5xx - err_timeout, "cancelled": 1 if k else 0,
                "expected_errors": 0, "err_connect": 0, "err_timeout": err_timeout, "err_http_4xx": 0,
                "err_http_5xx": err_5xx, "err_bad_stream": 0, "output_tokens": requests * (128 if k == 0 else 900),
                "prompt_tokens": requests * 300, "late_sends_1s": 0,
            }
        per_scenario["*"] = {key: sum(p[key] for p in per_scenario.values()) for key in per_scenario["chat"]}
        rows += [{"run_id": RUN_ID, "window_index": index, "scenario": s, "start_s": start_s, "end_s": end_s, **c}
                 for s, c in per_scenario.items()]
    return rows


def sample_rows(rng: np.random.Generator, gpu: bool) -> dict[type, list[dict]]:
    """Process, GPU and server samples every SAMPLE_S; EngineCore leaks ~40 MiB/h; one RSS spike at 900 s."""
    procs, gpus, gpu_procs, server = [], [], [], []
    for t_s in np.arange(0.0, DURATION_S + SAMPLE_S / 2, SAMPLE_S):
        for k, (pid, name) in enumerate(SERVER_PROCS):
            rss = (900 + 600 * k) * MIB + (40 * MIB * t_s / 3600 if pid == 4102 else 0) + rng.normal(0, 2 * MIB)
            rss += 500 * MIB if (pid == 4101 and t_s == 900.0) else 0
            procs.append({"run_id": RUN_ID, "t_s": t_s, "role": "server", "pid": pid, "ppid": 4100, "name": name,
                          "rss_bytes": int(rss), "pss_bytes": int(rss * 0.8), "uss_bytes": int(rss * 0.7),
                          "fds": 40 + k, "threads": 12, "cpu_percent": 30.0})
        procs.append({"run_id": RUN_ID, "t_s": t_s, "role": "client", "pid": 999, "ppid": 1, "name": "soak",
                      "rss_bytes": 150 * MIB, "pss_bytes": None, "uss_bytes": None, "fds": 20, "threads": 8,
                      "cpu_percent": 4.0 + rng.normal(0, 0.5)})
        if gpu:
            gpus.append({"run_id": RUN_ID, "t_s": t_s, "gpu_index": 0, "name": "NVIDIA H200",
                         "mem_used_bytes": 120_000 * MIB, "mem_total_bytes": 143_771 * MIB, "util_pct": 80.0})
            gpu_procs.append({"run_id": RUN_ID, "t_s": t_s, "gpu_index": 0, "pid": 4102,
                              "used_bytes": 119_000 * MIB})
        server.append({"run_id": RUN_ID, "t_s": t_s, "source": "http://127.0.0.1:8000/metrics", "scrape_ok": True,
                       "health_ok": True, "running": float(rng.integers(0, 8)), "waiting": 0.0,
                       "kv_usage": float(rng.uniform(0.1, 0.4))})
    return {ProcessSample: procs, GpuSample: gpus, GpuProcessSample: gpu_procs, ServerSample: server}


def event_rows() -> list[dict]:
    """Server start, warm-up end, phases, an idle probe, a crash with its log tail, restart, burst, timeout."""
    raw = [
        (0.5, "server_start", "reference server at http://127.0.0.1:8000", {"pid": 4101}),
        (0.0, "phase", "phase warmup at 2.5 req/s", {"name": "warmup", "index": None, "phase_kind": "steady",
                                                      "rate_rps": 2.5, "start_t": 1.8e9, "end_t": 1.8e9 + 120}),
        (120.0, "phase", "phase steady at 2.5 req/s", {"name": "steady", "index": 0, "phase_kind": "steady",
                                                       "rate_rps": 2.5, "ramp_s": 780.0, "factor": 3.0}),
        (120.0, "warmup_end", "warm-up over", {"t": 1.8e9 + 120}),
        (600.0, "probe_start", "idle probe 0: arrivals stopped", {"index": 0, "t": 1.8e9 + 600}),
        (612.0, "probe_drained", "idle probe 0: drained in 12.31s", {"index": 0, "drain_s": 12.3122}),
        (642.0, "probe_reading", "idle probe 0: kv=0.0 running=0", {
            "index": 0, "drained": True, "kv_usage": 0.0, "running": 0.0, "waiting": 0.0,
            "processes": [{"pid": 4101, "rss_bytes": 900 * MIB, "pss_bytes": None, "fds": 40}]}),
        (642.0, "probe_end", "idle probe 0: arrivals resumed", {"index": 0, "drained": True, "duration_s": 42.0}),
        (900.0, "phase", "phase burst at 5 req/s", {"name": "burst", "index": 1, "phase_kind": "burst", "rate_rps": 5.0,
                                                    "factor": 3.0, "burst_s": 30.0, "period_s": 300.0}),
        (840.0, "error_burst", f"9 http_5xx in window 12 {HOSTILE}", {"errors": 9}),
        (1200.0, "crash", "server exited with code -9",
         {"exit_code": -9, "log_tail": "Traceback (most recent call last):\n" + "  line\n" * 200 + HOSTILE}),
        (1200.0, "outage_start", "server down", {}), (1230.0, "outage_end", "server back", {}),
        (1210.0, "restart", "restarting server (1 of 3)", {}),
        (1440.0, "probe_start", "idle probe 1: arrivals stopped", {"index": 1, "t": 1.8e9 + 1440}),
        (1500.0, "probe_drain_timeout", "idle probe 1: drain timed out after 60s", {"index": 1, "drain_s": 60.0,
                                                                                     "in_flight": 3}),
        (1530.0, "probe_reading", "idle probe 1: kv=None running=None", {"index": 1, "drained": False,
                                                                           "kv_usage": None, "running": None}),
        (1530.0, "probe_end", "idle probe 1: arrivals resumed", {"index": 1, "drained": False, "duration_s": 90.0}),
        (1800.0, "run_end", "completed", {}),
    ]
    return [{"run_id": RUN_ID, "t_s": t, "at": f"2026-12-02T10:{15 + int(t // 60):02d}:{int(t % 60):02d}+00:00",
             "kind": kind, "message": message, "data_json": json.dumps(data) if data else None}
            for t, kind, message, data in sorted(raw, key=lambda item: item[0])]


def run_row(gpu: bool) -> dict:
    environment = {
        "host": "gpu-node-7", "cpu": "AMD EPYC 9654 (96 cores)", "driver": "570.86", "cuda": "12.8",
        "python": "3.11.7", "torch": "2.11.0", "vllm": "0.11.0", "soak": "0.1.0", "platform": "Linux-6.8",
        "server_cmd": f"vllm serve facebook/opt-125m {HOSTILE}", "scenarios": ["chat", "long"],
        "kernel_note": HOSTILE,
    }
    if gpu:
        environment["gpus"] = [{"index": 0, "name": "NVIDIA H200", "memory_total_bytes": 143_771 * MIB}]
    return {
        "id": RUN_ID, "status": "completed", "started_at": "2026-12-02T10:15:00+00:00", "t0_epoch_s": 1.8e9,
        "ended_at": "2026-12-02T10:45:00+00:00", "heartbeat_at": "2026-12-02T10:45:00+00:00",
        "planned_duration_s": DURATION_S, "duration_s": DURATION_S, "warmup_s": WARMUP_S, "window_s": WINDOW_S,
        "soak_pid": 999, "server_pgid": 4100, "server_cmd": f"vllm serve facebook/opt-125m --port 8000 {HOSTILE}",
        "out_dir": "/tmp/soak-runs/" + RUN_ID, "target_kind": "vllm", "target_url": "http://127.0.0.1:8000",
        "model": "facebook/opt-125m", "schedule_name": None,
        "config_json": json.dumps({"rate": 2.5, "note": HOSTILE, "scenarios": ["chat", "long"]}),
        "environment_json": json.dumps(environment), "verdict": "FAIL", "verdict_reason": "leak.rss FAIL",
    }


def summary_dict() -> dict[str, Any]:
    """A summary.json as the run writes it: every check, trends in analysis's own shape."""
    def finding(check, verdict, value, unit, ci=None, threshold=None, evidence="", **extra):
        return {"check": check, "verdict": verdict, "value": value, "unit": unit, "ci": ci,
                "threshold": threshold, "evidence": evidence, **extra}

    slope = 40 * MIB / 3600
    return {
        "schema": "soak.run.summary/1", "run_id": RUN_ID, "status": "completed",
        "started_at": "2026-12-02T10:15:00+00:00", "ended_at": "2026-12-02T10:45:00+00:00",
        "duration_s": DURATION_S, "planned_duration_s": DURATION_S,
        "target": {"kind": "vllm", "url": "http://127.0.0.1:8000", "model": "facebook/opt-125m"},
        "verdict": "FAIL", "context": None, "report_html": None,
        "verdict_reason": f"leak.rss FAIL: EngineCore grows 40 MiB/h {HOSTILE}",
        "findings": [
            finding("leak.rss", "FAIL", 40 * MIB, "bytes/h", [35 * MIB, 45 * MIB], 16 * MIB,
                    f"RSS of EngineCore (pid 4102) rises 40 MiB/h {HOSTILE}",
                    per_process=[{"verdict": "FAIL", "value": 40 * MIB, "ci": [35 * MIB, 45 * MIB],
                                  "detection_limit": 45 * MIB, "mk_p": 1e-9, "points": 28, "step": None,
                                  "net_growth": None, "warmup": {"t_s": 150.0, "index": 2, "still_settling": False,
                                                                 "method": "configured", "floor_s": 150.0},
                                  "pid": 4102, "name": "EngineCore", "unit": "bytes/h", "floor": 2100 * MIB,
                                  "trend": {"slope_per_s": slope, "intercept": 4500 * MIB + slope * 150,
                                            "t0_s": 150.0, "space": "linear"}}],
                    per_request={"value": 1843.2, "ci": [1600.0, 2000.0], "unit": "bytes/request"},
                    detection_limit=45 * MIB, exhaustion={"resource": "host memory", "headroom": 1240 * MIB, "hours": 31.0},
                    trend={"slope_per_s": slope, "intercept": 4500 * MIB + slope * 150, "t0_s": 150.0,
                           "space": "linear"},
                    details={"source": "window floors", "points": 28, "mk_p": 1e-9}),
            finding("leak.vram", "PASS", 0.0, "bytes/h", [-1e5, 1e5], 16 * MIB, "VRAM is flat.",
                    exhaustion={"resource": "GPU memory", "headroom": 40 * 2**30, "hours": 9000.0}),
            finding("leak.kv", "PASS", 0.0, "fraction of KV cache", None, 0.01, "KV usage 0 after each drain."),
            finding("leak.fds", "PASS", 0.0, "fds/h", [0, 0], 10, "Open fds flat."),
            finding("creep.ttft_p99", "SUSPECT", 41.0, "% over run", [20.0, 60.0], 50.0,
                    "P99 TTFT rises +41 % over the run", percentile_used="p99",
                    next_step=f"run ≥ 9h00m of judged load at this rate to rule out +50 % {HOSTILE}",
                    trend={"slope_per_s": math.log(1.41) / 1650, "intercept": math.log(700), "t0_s": 150.0,
                           "space": "log"}, details={"span_s": 1650.0, "series_unit": "ms"}),
            finding("creep.itl_p99", "PASS", 1.0, "% over run", [-5.0, 6.0], 50.0, "flat"),
            finding("creep.e2e_p99", "PASS", 2.0, "% over run", [-5.0, 8.0], 50.0, "flat"),
            finding("errors.rise", "PASS", 0.1, "pp over run", [-0.2, 0.4], 1.0, "flat",
                    trend={"slope_per_s": 0.0, "intercept": 0.004, "t0_s": 150.0, "space": "linear"},
                    details={"series_unit": "fraction"}),
            finding("errors.budget", "PASS", 0.42, "%", [0.3, 0.6], 1.0, "0.42 % of requests failed"),
            finding("errors.bursts", "SUSPECT", 1, "windows", None, None, "1 burst window"),
            finding("hang", "FAIL", 60.0, "s", None, 30.0, "A probe drain timed out after 60 s."),
            finding("crashes", "FAIL", 1, "crashes", None, 0, "The server crashed once (exit -9)."),
            finding("throughput.decay", "PASS", 1.0, "% decline over run", [-2.0, 3.0], 20.0, "flat",
                    trend={"slope_per_s": 0.0, "intercept": 950.0, "t0_s": 150.0, "space": "linear"},
                    details={"measure": "tokens/s"}),
            finding("client.saturation", "PASS", 1.9, "ms", None, 10.0, "lag P99 1.9 ms"),
        ],
        "totals": {"requests": 4500, "errors": 19, "error_rate": 0.0042, "output_tokens": 1_000_000, "cancelled": 0,
                   "errors_by_class": {"connect": 0, "timeout": 0, "http_4xx": 0, "http_5xx": 19, "bad_stream": 0}},
        "latency_ms": {"ttft": {"p50": 200, "p95": 400, "p99": 600, "count": 4000},
                       "itl": {"p50": None, "p95": None, "p99": None, "count": 0},
                       "e2e": {"p50": None, "p95": None, "p99": None, "count": 0}},
    }


def baseline_dict() -> BaselineComparison:
    def row(name: str, current: float, baseline: float, delta_pct: float, tolerance: float, status: str):
        return ComparisonRow(name=name, unit="", current=current, baseline=baseline, delta_pct=delta_pct,
                             tolerance=tolerance, tolerance_text=f"{100 * tolerance:g} %", status=status)

    return BaselineComparison("20261125T200000Z-aaaa", (
        row("ttft_p99_ms", 640.0, 520.0, 23.1, 0.10, "regressed"),
        row("e2e_p99_ms", 4100.0, 4080.0, 0.5, 0.10, "within noise"),
        row("tokens_per_s", 990.0, 900.0, 10.0, 0.05, "improved"),
    ))


def build_run(db_path: Path, gpu: bool = True, with_hist: bool = True, seed: int = 7) -> dict[str, Any]:
    """Write the run into a fresh database at `db_path`; returns the store and the values it was built from."""
    store = Store.open(f"sqlite:///{db_path}")
    rng = np.random.default_rng(seed)
    latency, star_values = latency_rows(rng, with_hist)
    with store.engine.begin() as connection:
        connection.execute(insert(Run), [run_row(gpu)])
        connection.execute(insert(EventRow), event_rows())
        for model, rows in sample_rows(rng, gpu).items():
            if rows:
                connection.execute(insert(model), rows)
        connection.execute(insert(LatencyWindowRow), latency)
        connection.execute(insert(RequestWindowRow), request_rows())
    return {"store": store, "run_id": RUN_ID, "star_values": star_values}
