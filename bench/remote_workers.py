"""Load from `soak worker` processes (the remote-worker path) vs local `--workers` vs in-process, on one host.

Each row runs the same open-loop plan against the mock server and prints the achieved rate, the schedule-lag
P99, and whether every request the server saw came back to the master as a record. The ratio lines compare
the `soak worker` path with local workers measured in the same run: the protocol is the same, so they should
be ~1 (on a shared machine the figures are noisy; run it twice).

    python bench/remote_workers.py [--rate 60] [--duration 15] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import gevent

from soak.config import LoadSettings, RunConfig
from soak.load import LoadHooks, gather_workers, start_load

MOCK = Path(__file__).resolve().parents[1] / "tests" / "integration" / "load" / "mockserver.py"


def start_mock() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, str(MOCK)], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().split()[1]


def server_count(url: str, tag: str) -> int:
    with urllib.request.urlopen(f"{url}/_mock/stats?tag={tag}") as response:
        return json.loads(response.read())["requests"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config_for(rate: float, duration_s: float, **load: Any) -> RunConfig:
    return RunConfig(duration_s=duration_s, warmup_s=0.0, window_s=5.0, out_dir=Path("/tmp/soak-bench"),
                     db_url="sqlite://", load=LoadSettings(rate_rps=rate, scenarios=["chat_short"],
                                                           idle_probe_every_s=0, canary_every_s=0, **load))


def run_once(label: str, url: str, config: RunConfig, remote: int) -> dict[str, Any]:
    """One run; `remote` soak worker processes are started first and joined before the plan's clock starts."""
    tag = f"{label.replace(' ', '-')}-{time.monotonic_ns()}"
    model = f"mock?ttft_ms=20&itl_ms=5&tokens=10&tag={tag}"
    port = config.load.master_bind.rpartition(":")[2]
    spawned = [subprocess.Popen([sys.executable, "-m", "soak", "worker", "--master", f"127.0.0.1:{port}"],
                                stderr=subprocess.DEVNULL) for _ in range(remote)]
    records: list[Any] = []
    try:
        pool = gather_workers(config, url)
        t0 = time.time()
        handle = start_load(config, base_url=url, model=model, t0=t0,
                            hooks=LoadHooks(on_request=records.append), workers=pool)
        gevent.sleep(config.duration_s + 0.1)
        counters = handle.counters()
        handle.stop(5.0)
    finally:
        for process in spawned:
            process.wait(timeout=30)
    span_s = handle.phase_plan.end_t - handle.phase_plan.begin_t
    return {"label": label, "rate": len(records) / span_s, "lag_p99_ms": counters.lag_p99_ms,
            "records": len(records), "server": server_count(url, tag)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=60.0)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    mock, url = start_mock()
    try:
        rows = [run_once("in-process", url, config_for(args.rate, args.duration), 0),
                run_once(f"{args.workers} local workers", url,
                         config_for(args.rate, args.duration, workers=args.workers), 0),
                run_once(f"{args.workers} soak workers", url,
                         config_for(args.rate, args.duration, expect_workers=args.workers,
                                    master_bind=f"127.0.0.1:{free_port()}"), args.workers)]
    finally:
        mock.kill()
    print(f"target {args.rate:g} req/s for {args.duration:g} s")
    print(f"{'load from':<18} {'req/s':>7} {'lag p99 ms':>11} {'records':>8} {'server saw':>11}")
    for row in rows:
        print(f"{row['label']:<18} {row['rate']:>7.1f} {row['lag_p99_ms'] or 0:>11.2f} {row['records']:>8} "
              f"{row['server']:>11}")
    local, remote = rows[1], rows[2]
    print(f"ratio soak workers / local workers: rate {remote['rate'] / local['rate']:.3f}, lag p99 "
          f"{(remote['lag_p99_ms'] or 0) / max(local['lag_p99_ms'] or 1e-9, 1e-9):.2f}")


if __name__ == "__main__":
    main()
