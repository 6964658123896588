"""Open-loop dispatcher vs Locust's closed-loop `constant_throughput`, against a 2 s mock server.

Prints, for 10 and 50 req/s: achieved rate, CV of the send gaps (Poisson → 1), schedule lag p99, sends
more than 1 s late, client CPU, and how many requests the server saw. A last pair of rows injects a 1 s
client stall (a blocking sleep) at 10 req/s: open loop reports it as lag, closed loop hides it.

    python bench/load_open_loop.py [--duration 20] [--rates 10 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import gevent
from gevent import monkey
from locust import constant_throughput, task
from locust.env import Environment

from soak.config import LoadSettings, RunConfig
from soak.load import LoadHooks, OpenAIUser, start_load
from soak.load.settings import ClientSettings

MOCK = Path(__file__).resolve().parents[1] / "tests" / "integration" / "load" / "mockserver.py"
SERVER_DELAY = {"ttft_ms": 200, "itl_ms": 20, "tokens": 91}  # 0.2 s + 90 × 20 ms = 2 s per request
_real_sleep = monkey.get_original("time", "sleep")


def start_mock() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, str(MOCK)], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().split()[1]


def model_for(tag: str) -> str:
    return "mock?" + "&".join(f"{k}={v}" for k, v in {**SERVER_DELAY, "tag": tag}.items())


def server_count(url: str, tag: str) -> int:
    with urllib.request.urlopen(f"{url}/_mock/stats?tag={tag}") as response:
        return json.loads(response.read())["requests"]


def stall_client_once(at_t: float) -> None:
    """Block the whole process for 1 s (as a GC pause or a blocking call would)."""
    gevent.sleep(max(at_t - time.time(), 0))
    _real_sleep(1.0)


def cv(times: list[float]) -> float:
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.pstdev(gaps) / statistics.mean(gaps) if len(gaps) > 1 else float("nan")


def open_loop(url: str, rate: float, duration_s: float, stall: bool) -> dict:
    tag = f"open-{rate}-{stall}-{time.time_ns()}"
    config = RunConfig(duration_s=duration_s, warmup_s=0, window_s=5, out_dir=Path("/tmp/soak-bench"),
                       db_url="sqlite://", load=LoadSettings(rate_rps=rate, scenarios=["chat_short"],
                                                             no_idle_probes=True, seed=1))
    records: list = []
    t0 = time.time()
    handle = start_load(config, base_url=url, model=model_for(tag), t0=t0, hooks=LoadHooks(on_request=records.append))
    if stall:
        gevent.spawn(stall_client_once, t0 + duration_s / 2)
    cpu0 = time.process_time()
    gevent.sleep(t0 + duration_s + 0.1 - time.time())
    cpu_s = time.process_time() - cpu0
    counters = handle.counters()
    handle.stop(drain_timeout_s=5.0)
    span_s = handle.phase_plan.end_t - handle.phase_plan.begin_t
    return {"mode": "open loop", "rate": rate, "stall": stall, "achieved": counters.sends / span_s,
            "cv": cv(sorted(r.sent_t for r in records)), "lag_p99_ms": counters.lag_p99_ms,
            "late_1s": counters.late_sends_1s, "cpu": cpu_s / duration_s, "server": server_count(url, tag)}


class ClosedLoop(OpenAIUser):
    """What a plain Locust user does: the next request only after the previous one, at most 1 req/s each."""

    wait_time = constant_throughput(1.0)
    records: list = []

    def on_start(self) -> None:
        self.record_sink = ClosedLoop.records.append

    @task
    def ask(self) -> None:
        self.client.chat([{"role": "user", "content": "hello"}], max_tokens=16)


def closed_loop(url: str, rate: float, duration_s: float, stall: bool) -> dict:
    tag = f"closed-{rate}-{stall}-{time.time_ns()}"
    ClosedLoop.records = []
    environment = Environment(user_classes=[ClosedLoop], host=url)
    ClosedLoop.settings = ClientSettings(model=model_for(tag))  # plain Locust builds users from the class
    runner = environment.create_local_runner()
    t0 = time.time()
    runner.start(int(rate), spawn_rate=int(rate))
    if stall:
        gevent.spawn(stall_client_once, t0 + duration_s / 2)
    cpu0 = time.process_time()
    gevent.sleep(duration_s)
    cpu_s = time.process_time() - cpu0
    runner.quit()
    sent = sorted(r.sent_t for r in ClosedLoop.records if r.sent_t < t0 + duration_s)
    lags = sorted(r.lag_ms for r in ClosedLoop.records)
    return {"mode": "constant_throughput", "rate": rate, "stall": stall, "achieved": len(sent) / duration_s,
            "cv": cv(sent), "lag_p99_ms": lags[int(0.99 * (len(lags) - 1))] if lags else None,
            "late_1s": sum(1 for lag in lags if lag > 1000), "cpu": cpu_s / duration_s,
            "server": server_count(url, tag)}


def print_rows(rows: list[dict]) -> None:
    print(f"{'mode':20} {'target':>6} {'stall':>5} {'achieved/s':>10} {'CV':>5} {'lag p99 ms':>10} {'late>1s':>7} "
          f"{'client CPU':>10} {'server saw':>10}")
    for row in rows:
        lag = f"{row['lag_p99_ms']:.1f}" if row["lag_p99_ms"] is not None else "-"
        print(f"{row['mode']:20} {row['rate']:>6g} {'yes' if row['stall'] else 'no':>5} {row['achieved']:>10.2f} "
              f"{row['cv']:>5.2f} {lag:>10} {row['late_1s']:>7} {row['cpu'] * 100:>9.1f}% {row['server']:>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per measurement")
    parser.add_argument("--rates", type=float, nargs="+", default=[10.0, 50.0])
    args = parser.parse_args()
    process, url = start_mock()
    try:
        rows = []
        for rate in args.rates:
            rows += [open_loop(url, rate, args.duration, False), closed_loop(url, rate, args.duration, False)]
        rate = args.rates[0]
        rows += [open_loop(url, rate, args.duration, True), closed_loop(url, rate, args.duration, True)]
        print(f"server: {SERVER_DELAY['ttft_ms']} ms to the first token, 2 s per request; {args.duration:g} s per row")
        print_rows(rows)
    finally:
        process.kill()


if __name__ == "__main__":
    main()
