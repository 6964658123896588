"""How much memory a storage outage holds per minute, and how well the writer's estimate tracks it.

Drives the real StoreWriter against a SQLite database that refuses every commit (a hook fails each write as a
locked database would), with a run's mix of rows at 100 requests/s on a model clock: every request through the
real latency windows (3 scenarios; windows flushed every 5 s, each flush upserting the open windows' latency and
request rows with their encoded histograms), one KeptRequest row per request (--keep-requests), and telemetry at
1 Hz (4 server processes, one /metrics scrape, 10 other series). After one held minute of warm-up it holds
`--minutes` more, then prints per held minute: the writer's estimate (`held_bytes`), the growth tracemalloc saw,
and the estimate's ratio to it; and, from a first run without tracemalloc (whose own bookkeeping would swell RSS),
the process's RSS growth. Run it also with `--no-keep-requests`.

Usage: python bench/storage_buffer.py [--minutes 10] [--rate 100] [--no-keep-requests]
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import psutil
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from soak.load.records import RequestRecord
from soak.samples import KeptRequest, MetricReading, ProcessReading, ProcessStats, ServerReading
from soak.store import Store
from soak.store.recorder import Recorder
from soak.telemetry.latency import LatencyWindows

T0 = 1_000_000.0
SCENARIOS = ("chat_short", "long_tail", "mixed")
FLUSH_EVERY_S = 5.0


@dataclass
class Reading:
    """What one held stretch cost: the writer's estimate, tracemalloc's growth and RSS growth, in bytes."""

    estimate: int
    traced: int
    rss: int


def refuse_every_write(engine) -> None:
    """Every INSERT/UPDATE fails like a locked database: the writer holds everything queued."""

    def refuse(_connection, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
            raise OperationalError(statement[:20], {}, sqlite3.OperationalError("database is locked"))

    event.listen(engine, "before_cursor_execute", refuse)


def request(rng: random.Random, t_s: float, scenario: str) -> RequestRecord:
    """One streamed request finished at `t_s` seconds into the run, with realistic latencies and gaps."""
    tokens = rng.randint(8, 200)
    ttft_ms = rng.lognormvariate(5.0, 0.4)
    itl = tuple(rng.lognormvariate(2.5, 0.3) for _ in range(tokens - 1))
    e2e_ms = ttft_ms + sum(itl)
    intended = T0 + t_s - e2e_ms / 1000
    return RequestRecord(scenario=scenario, kind="chat", intended_t=intended, sent_t=intended,
                         first_token_t=intended + ttft_ms / 1000, finish_t=T0 + t_s, ttft_ms=ttft_ms, e2e_ms=e2e_ms,
                         itl_ms=itl, queue_ms=0.0, lag_ms=rng.random(), output_tokens=tokens, prompt_tokens=64,
                         status_code=200)


def telemetry(rng: random.Random) -> list:
    """One 1 Hz sample: four server processes, one /metrics scrape, ten other series."""
    processes = [ProcessReading("server", ProcessStats(pid=100 + n, name=f"proc{n}", rss_bytes=2**30 + rng.randint(0, 2**20),
                                                       ppid=1, threads=12, cpu_percent=rng.random() * 100, fds=40))
                 for n in range(4)]
    server = ServerReading(source="http://127.0.0.1:8000/metrics", scrape_ok=True, health_ok=True, running=3.0,
                           waiting=0.0, kv_usage=rng.random())
    metrics = [MetricReading(f"series_{n}", rng.random(), {"engine": "0"}) for n in range(10)]
    return [*processes, server, *metrics]


def one_second(recorder: Recorder, windows: LatencyWindows, rng: random.Random, t_s: float, rate: int,
               keep: bool) -> None:
    """Queue what a run queues in one second at `rate` requests/s."""
    for n in range(rate):
        record = request(rng, t_s + n / rate, SCENARIOS[n % len(SCENARIOS)])
        windows.add(record)
        if keep:
            recorder.request(KeptRequest(scenario=record.scenario, intended_s=record.intended_t - T0, lag_ms=record.lag_ms,
                                         queue_ms=record.queue_ms, ttft_ms=record.ttft_ms, e2e_ms=record.e2e_ms,
                                         output_tokens=record.output_tokens, status_code=200, error_class=None))
    recorder.samples(telemetry(rng), t_s=t_s)
    windows.progress()  # the conductor reads it every tick, which settles the live figures' pending values
    if (t_s + 1) % FLUSH_EVERY_S == 0:
        latency, requests = windows.flush_windows(t_s + 1)
        recorder.windows(latency)
        recorder.windows(requests)


def reading(writer) -> Reading:
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
    return Reading(writer.held_bytes, traced, psutil.Process().memory_info().rss)


def run(minutes: int, rate: int, keep: bool, traced: bool) -> tuple[Reading, int, float]:
    """(growth over `minutes` held minutes, rows held, seconds taken) after one warm-up minute; with `traced`,
    tracemalloc follows every allocation."""
    folder = Path(tempfile.mkdtemp(prefix="soak-bench-buffer-"))
    store = Store.open(f"sqlite:///{folder / 'soak.db'}")
    refuse_every_write(store.engine)
    writer = store.writer()
    recorder = Recorder(writer, "bench", T0)
    windows = LatencyWindows(T0, warmup_s=60.0, window_s=60.0, keep_open_s=20.0)
    rng = random.Random(7)
    if traced:
        tracemalloc.start()
    started = time.perf_counter()
    for t in range(60):
        one_second(recorder, windows, rng, float(t), rate, keep)
    before, rows_before = reading(writer), writer.held_rows
    for t in range(60, 60 * (minutes + 1)):
        one_second(recorder, windows, rng, float(t), rate, keep)
    after = reading(writer)
    growth = Reading(after.estimate - before.estimate, after.traced - before.traced, after.rss - before.rss)
    rows = writer.held_rows - rows_before
    tracemalloc.stop()
    writer.discard()
    store.close()
    return growth, rows, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--no-keep-requests", action="store_true")
    args = parser.parse_args()
    # The untraced run first: the traced one's rows, freed at its end, would be reused by a later run, hiding RSS growth.
    untraced, _, _ = run(args.minutes, args.rate, keep=not args.no_keep_requests, traced=False)
    growth, rows, took_s = run(args.minutes, args.rate, keep=not args.no_keep_requests, traced=True)
    growth.rss = untraced.rss
    per_minute = {name: getattr(growth, name) / args.minutes / 2**20 for name in ("estimate", "traced", "rss")}
    print(f"{args.rate} requests/s, --keep-requests {'off' if args.no_keep_requests else 'on'}, "
          f"{args.minutes} held minutes ({rows / args.minutes:,.0f} rows a minute; {took_s:.0f} s to run traced)")
    print(f"  writer's estimate  {per_minute['estimate']:6.2f} MiB per held minute")
    print(f"  tracemalloc        {per_minute['traced']:6.2f} MiB per held minute   "
          f"estimate / traced = {growth.estimate / growth.traced:.2f}")
    print(f"  RSS (untraced run) {per_minute['rss']:6.2f} MiB per held minute   "
          f"estimate / RSS    = {growth.estimate / growth.rss:.2f}")
    budget_min = 256 / per_minute["estimate"]
    print(f"  the default --storage-buffer 256MiB holds {budget_min:.0f} minutes of it")


if __name__ == "__main__":
    main()
