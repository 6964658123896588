"""Is soak's own memory flat, and is its sampler cheap?

1. Pushes 1 M requests through the client → window → store pipeline (the client's SSE parsing of a streamed
   reply into a RequestRecord, Locust's request event and statistics, the per-window HDR histograms, upserts
   through the single writer into SQLite),
   time-compressed onto a 24 h run by a model clock, and prints RSS growth after warm-up. Goal: ≤ 5 MB.
   Baseline in the same run: the client alone, its records dropped.
2. Runs the telemetry sampler at 1 Hz against a live reference server and prints its CPU cost. Goal: ≤ 1 % of
   one core. Baseline in the same run: an idle 1 Hz loop.

Usage: python bench/harness_memory.py [--requests 1000000] [--sample-seconds 60]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import locust.stats
import psutil
from locust import User
from locust.env import Environment

from soak.load import client
from soak.load.locust_stats import trim_per_second_counts
from soak.load.records import RequestRecord
from soak.store import Store
from soak.store.models import Run
from soak.store.recorder import Recorder
from soak.telemetry.latency import LatencyWindows
from soak.telemetry.sampler import Telemetry, TelemetrySources

RUN_S = 24 * 3600.0
WARMUP_REQUESTS = 100_000
FLUSH_EVERY_REQUESTS = 5_000  # ≈ 5 s of traffic at ~1 k req/s


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


class ModelClock:
    """Stands in for the `time` module inside the client, so a 24 h run's timings come out of a few minutes of bench."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def time(self) -> float:
        return self.now_s


class CannedStream:
    """A streamed response already in memory: the client reads it line by line, and each SSE event "arrives"
    (the model clock moves on) as its line is read."""

    def __init__(self, lines: list[bytes], arrivals_s: list[float], clock: ModelClock) -> None:
        self.lines, self.arrivals_s, self.clock, self.at = lines, arrivals_s, clock, 0

    def readline(self, _delimiter: bytes = b"\n") -> bytes:
        if self.at == len(self.lines):
            return b""
        self.clock.now_s = self.arrivals_s[self.at]
        self.at += 1
        return self.lines[self.at - 1]

    def read(self) -> bytes:
        return b""


CLOCK = ModelClock()
client.time = CLOCK  # the client's only use of `time` is time.time(), read as each chunk arrives
locust.stats.time = CLOCK  # Locust's statistics count requests per second of this clock too


def sse_lines(tokens: int) -> list[bytes]:
    """The body of a streamed chat completion as vLLM sends it: one event per token, usage, [DONE]."""
    lines = []
    for i in range(tokens):
        chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": f"t{i}"},
                                                                            "finish_reason": None}]}
        lines += [b"data: " + json.dumps(chunk).encode() + b"\n", b"\n"]
    usage = {"id": "c", "choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": tokens}}
    return lines + [b"data: " + json.dumps(usage).encode() + b"\n", b"\n", b"data: [DONE]\n", b"\n"]


SSE_LINES = sse_lines(9)
# The client's own stream reading, without a Locust user behind it (reading a stream needs none).
STREAM_READER = object.__new__(client.OpenAIClient)


def make_record(rng: random.Random, i: int, total: int) -> RequestRecord:
    """One request of a 24 h run through the client's own stream parsing, timed by the model clock."""
    intended_t = 1_000_000.0 + RUN_S * i / total
    exchange = client._Exchange(scenario=("chat_short", "long_tail")[i % 2], kind="chat", intended_t=intended_t,
                                queue_ms=0.0, sent_t=intended_t + rng.random() / 1000, status_code=200,
                                headers_seen=True)
    arrivals, t = [], intended_t + rng.lognormvariate(4.0, 0.5) / 1000
    for line in SSE_LINES:
        arrivals.append(t)
        if line == b"\n":
            t += rng.lognormvariate(2.0, 0.3) / 1000  # the next event comes one inter-token gap later
    STREAM_READER._read_stream(exchange, CannedStream(SSE_LINES, arrivals, CLOCK), "text/event-stream", None)
    return exchange.record()


def baseline_growth_mib(total: int) -> float:
    """RSS growth of the client alone: the same requests parsed into records and dropped (same measure)."""
    rng = random.Random(1)
    readings = []
    for i in range(total):
        make_record(rng, i, total)
        if i >= WARMUP_REQUESTS and i % FLUSH_EVERY_REQUESTS == FLUSH_EVERY_REQUESTS - 1:
            readings.append(rss_mib())
    tenth = max(len(readings) // 10, 1)
    return statistics.median(readings[-tenth:]) - statistics.median(readings[:tenth])


def pipeline_growth_mib(total: int, db_path: Path) -> tuple[float, float, int]:
    """(RSS growth after warm-up, seconds, rows committed) of the full pipeline.

    RSS swings by tens of MiB between flushes (the allocator keeping or trimming freed histogram buffers), so a
    single reading proves nothing: growth is the median RSS over the last tenth of the run minus the median
    over the tenth right after warm-up, with RSS read after every flush.
    """
    store = Store.open(f"sqlite:///{db_path}")
    writer = store.writer()
    writer.insert(Run, {"id": "bench", "status": "running", "started_at": "2026-01-01T00:00:00+00:00",
                        "t0_epoch_s": 1_000_000.0, "planned_duration_s": RUN_S, "warmup_s": 3600.0,
                        "window_s": 1725.0, "out_dir": str(db_path.parent), "target_kind": "reference",
                        "config_json": "{}", "environment_json": "{}"})
    windows = LatencyWindows(1_000_000.0, warmup_s=3600.0, window_s=1725.0, keep_open_s=60.0)
    environment = locust_environment()
    rng = random.Random(1)
    started, readings = time.perf_counter(), []
    for i in range(total):
        record = make_record(rng, i, total)
        client.fire_request_event(environment.events, record, 1200, None)
        windows.add(record)
        if i % FLUSH_EVERY_REQUESTS == FLUSH_EVERY_REQUESTS - 1:
            trim_per_second_counts(environment.stats, CLOCK.now_s)  # soak's trimmer runs every 30 s
            latency, requests = windows.flush_windows(now_s=RUN_S * i / total)
            for window in [*latency, *requests]:
                writer.upsert_window("bench", window)
            writer.flush(60)
            if i >= WARMUP_REQUESTS:
                readings.append(rss_mib())
    writer.close(60)
    environment.runner.quit()
    tenth = max(len(readings) // 10, 1)
    growth = statistics.median(readings[-tenth:]) - statistics.median(readings[:tenth])
    print(f"RSS after warm-up: min {min(readings):.1f} MiB, max {max(readings):.1f} MiB over {len(readings)} flushes")
    return growth, time.perf_counter() - started, writer.stats.committed


class _Idle(User):
    """The user class a Locust runner needs; the bench fires request events itself."""


def locust_environment() -> Environment:
    """A Locust environment with a local runner, so request events feed Locust's statistics as in a run."""
    environment = Environment(user_classes=[_Idle])
    environment.create_local_runner()
    return environment


def start_reference() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "soak.refserver", "--port", "0"], stdout=subprocess.PIPE,
                               text=True)
    line = process.stdout.readline()
    match = re.search(r"(http://\S+)", line)
    if not match:
        process.kill()
        raise SystemExit(f"reference server did not start: {line!r}")
    return process, match.group(1)


def sampler_cost(seconds: int, db_path: Path) -> tuple[float, float]:
    """(% of one core spent sampling at 1 Hz, % of an idle 1 Hz loop)."""
    process, url = start_reference()
    try:
        store = Store.open(f"sqlite:///{db_path}")
        writer = store.writer()
        writer.insert(Run, {"id": "s", "status": "running", "started_at": "2026-01-01T00:00:00+00:00",
                            "t0_epoch_s": time.time(), "planned_duration_s": seconds, "warmup_s": 0.0,
                            "window_s": 5.0, "out_dir": str(db_path.parent), "target_kind": "reference",
                            "config_json": "{}", "environment_json": "{}"})
        recorder = Recorder(writer, "s", time.time())
        telemetry = Telemetry(recorder, TelemetrySources(lambda: [process.pid], [url + "/metrics"], url),
                              LatencyWindows(time.time(), 0.0, 5.0), sample_every_s=1.0, flush_every_s=5.0)
        sampling = _cpu_share(seconds, telemetry.sample)
        idle = _cpu_share(seconds, lambda: None)
        writer.close(10)
        return sampling, idle
    finally:
        process.terminate()
        process.wait(10)


def _cpu_share(seconds: int, job) -> float:
    me = psutil.Process()
    cpu_before, wall_before = sum(me.cpu_times()[:2]), time.monotonic()
    for _ in range(seconds):
        job()
        time.sleep(1.0)
    return 100.0 * (sum(me.cpu_times()[:2]) - cpu_before) / (time.monotonic() - wall_before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--sample-seconds", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        baseline = baseline_growth_mib(args.requests)
        growth, elapsed, rows = pipeline_growth_mib(args.requests, Path(folder) / "pipeline.db")
        print(f"pipeline: {args.requests:,} requests in {elapsed:.0f}s ({args.requests / elapsed:,.0f} req/s), "
              f"{rows:,} rows committed")
        print(f"RSS growth after warm-up: pipeline {growth:+.1f} MiB, baseline (records only) {baseline:+.1f} MiB; "
              f"pipeline − baseline {growth - baseline:+.1f} MiB (goal ≤ 5 MB)")
        sampling, idle = sampler_cost(args.sample_seconds, Path(folder) / "sampler.db")
        print(f"sampler at 1 Hz: {sampling:.2f} % of one core; idle 1 Hz loop {idle:.2f} %; "
              f"sampling alone {sampling - idle:.2f} % (goal ≤ 1 %)")


if __name__ == "__main__":
    main()
