"""Output tokens per client CPU-second: soak's real client path against a bare aiohttp client, one local server.

soak runs as `soak start --target URL` (Locust, the SSE client, records, latency windows, the writer thread
and SQLite, telemetry, then analysis and the report); the bare client is aiohttp streaming the same requests
open-loop and parsing each chunk with `json`. Both run as child processes at the same rate against the same
server (tests/support/sse_server.py: 64 tokens a request, one write per token at ITL > 0, the whole answer in
one write at ITL 0); each client's CPU is its rusage. The pair of runs is repeated, in alternating order, and
the median ratio printed: on a shared machine single runs move by ±20 %.

- steady state: tokens and the client's CPU (psutil) read twice while the load runs, at a third of the run and
  near its end, so start-up and, for soak, finalising (analysis, report) stay out (a difference of a long and a
  short run does the same in principle, but start-up's CPU varies by more than the difference on a busy box);
- whole run: tokens / CPU of the whole run (rusage), start-up and finalising included.

Then `--workers 2` against one process: the token rate each reaches when offered far more than one process
can take (the server's count over the run, per second of the planned length).

    pip install -e .[bench]
    python bench/client_efficiency.py [--rate 40] [--long 45] [--repeat 3] [--itl-ms 5] [--flood-rate 700] [--flood-for 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

SERVER = Path(__file__).resolve().parents[1] / "tests" / "support" / "sse_server.py"
TOKENS = 64


@dataclass
class Measured:
    tokens: int
    cpu_s: float
    wall_s: float
    steady_tokens: int = 0  # between the two readings taken while the load ran
    steady_cpu_s: float = 0.0


def start_server(ttft_ms: float, itl_ms: float) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, str(SERVER), "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
                                "--tokens", str(TOKENS)], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().split()[1]


def tokens_sent(url: str) -> int:
    with urllib.request.urlopen(url + "/stats", timeout=10) as response:
        return int(json.loads(response.read())["tokens"])


def run_child(command: list[str], url: str, steady_between_s: tuple[float, float] | None = None) -> Measured:
    """Run a client to completion; its tokens (the server's count) and CPU (user + system, from rusage), and with
    `steady_between_s` the tokens and CPU between two readings taken that many seconds after its start."""
    before, started = tokens_sent(url), time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    readings: list[tuple[int, float]] = []
    for at_s in steady_between_s or ():
        time.sleep(max(started + at_s - time.monotonic(), 0.0))
        cpu = psutil.Process(process.pid).cpu_times()
        readings.append((tokens_sent(url), cpu.user + cpu.system))
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    measured = Measured(tokens_sent(url) - before, usage.ru_utime + usage.ru_stime, time.monotonic() - started)
    if len(readings) == 2:
        measured.steady_tokens = readings[1][0] - readings[0][0]
        measured.steady_cpu_s = readings[1][1] - readings[0][1]
    return measured


def soak_command(url: str, rate: float, duration_s: float, out: Path, workers: int = 0) -> list[str]:
    return [sys.executable, "-m", "soak", "start", "--target", url, "--duration", f"{duration_s:g}s",
            "--warmup", "5s", "--rate", f"{rate:g}", "--scenario", "chat_short", "--no-idle-probes",
            "--canary-every", "0", "--workers", str(workers), "--out", str(out)]


def bare_command(url: str, rate: float, duration_s: float) -> list[str]:
    return [sys.executable, __file__, "--bare-client", url, "--rate", f"{rate:g}", "--long", f"{duration_s:g}"]


# -- the bare client ------------------------------------------------------------------------------------------
async def bare_request(session, url: str) -> None:
    body = {"model": "bench", "messages": [{"role": "user", "content": "hello"}], "max_tokens": TOKENS,
            "stream": True}
    stamps = []
    async with session.post(url + "/v1/chat/completions", json=body) as response:
        async for line in response.content:
            if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
                json.loads(line[6:])
                stamps.append(time.time())


async def bare_client(url: str, rate: float, duration_s: float) -> None:
    """Open-loop Poisson arrivals for `duration_s`, then wait for the requests in flight."""
    import aiohttp

    rng, tasks = random.Random(1), []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        next_t, end_t = time.monotonic(), time.monotonic() + duration_s
        while next_t < end_t:
            await asyncio.sleep(max(next_t - time.monotonic(), 0.0))
            tasks.append(asyncio.ensure_future(bare_request(session, url)))
            next_t += rng.expovariate(rate)
        await asyncio.gather(*tasks, return_exceptions=True)


# -- the figures ---------------------------------------------------------------------------------------------
def per_cpu(tokens: float, cpu_s: float) -> float:
    return tokens / cpu_s if cpu_s > 0 else float("nan")


def efficiency(url: str, rate: float, long_s: float, out: Path, repeat: int) -> list[dict[str, dict[str, float]]]:
    """`repeat` pairs of runs, soak and the bare client, their order alternating, so that drift on a shared
    machine falls on both alike; each pair's figures."""
    # soak's clock starts after its start-up (~3 s here): both readings fall inside its load.
    window = (max(long_s / 3, 10.0), long_s - 2.0)
    commands = {"soak": soak_command(url, rate, long_s, out), "bare aiohttp": bare_command(url, rate, long_s)}
    pairs = []
    for index in range(repeat):
        figures = {}
        for name in sorted(commands, reverse=index % 2 == 1):
            run = run_child(commands[name], url, window)
            print(f"  pair {index + 1}, {name}: {run.tokens} tokens, {run.cpu_s:.2f} CPU-s in all; {run.steady_tokens} "
                  f"tokens, {run.steady_cpu_s:.2f} CPU-s from {window[0]:g} s to {window[1]:g} s", flush=True)
            figures[name] = {"steady": per_cpu(run.steady_tokens, run.steady_cpu_s),
                             "whole": per_cpu(run.tokens, run.cpu_s)}
        pairs.append(figures)
    return pairs


def flood_rate(url: str, rate: float, duration_s: float, out: Path, workers: int) -> float:
    """Tokens/s the server sent over a run offered `rate` req/s: all it sent, over the planned length (a client
    that falls behind sends its backlog late, so only the whole run's count says what it managed)."""
    return run_child(soak_command(url, rate, duration_s, out, workers), url).tokens / duration_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=40.0, help="req/s of the efficiency runs")
    parser.add_argument("--long", type=float, default=45.0, help="seconds of each efficiency run")
    parser.add_argument("--repeat", type=int, default=3, help="pairs of efficiency runs (0: skip them)")
    parser.add_argument("--itl-ms", type=float, default=5.0, help="server's gap between tokens")
    parser.add_argument("--flood-rate", type=float, default=700.0, help="req/s offered to find the max rate")
    parser.add_argument("--flood-for", type=float, default=40.0, help="seconds of each max-rate run (0: skip)")
    parser.add_argument("--bare-client", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_client:
        asyncio.run(bare_client(args.bare_client, args.rate, args.long))
        return
    server, url = start_server(20.0, args.itl_ms)
    try:
        with tempfile.TemporaryDirectory(prefix="soak-bench-") as out:
            report(args, url, Path(out))
    finally:
        server.kill()


def report(args: argparse.Namespace, url: str, out: Path) -> None:
    print(f"server: {TOKENS} tokens/request, TTFT 20 ms, ITL {args.itl_ms:g} ms; {args.rate:g} req/s, runs of "
          f"{args.long:g} s, {args.repeat} pairs; {os.cpu_count()} CPUs", flush=True)
    if args.repeat > 0:
        print_efficiency(efficiency(url, args.rate, args.long, out, args.repeat))
    if args.flood_for > 0:
        one = flood_rate(url, args.flood_rate, args.flood_for, out, 0)
        two = flood_rate(url, args.flood_rate, args.flood_for, out, 2)
        print(f"max token rate offered {args.flood_rate:g} req/s: one process {one:,.0f} tok/s, --workers 2 "
              f"{two:,.0f} tok/s, ratio {two / one:.2f}x (goal >= 1.7x; the server shares these CPUs)")


def print_efficiency(pairs: list[dict[str, dict[str, float]]]) -> None:
    print(f"{'pair':5} {'client':14} {'steady tok/CPU-s':>17} {'whole-run tok/CPU-s':>20}")
    for index, figures in enumerate(pairs, 1):
        for name, row in figures.items():
            print(f"{index:<5} {name:14} {row['steady']:>17,.0f} {row['whole']:>20,.0f}")
    steady = [pair["soak"]["steady"] / pair["bare aiohttp"]["steady"] for pair in pairs]
    whole = [pair["soak"]["whole"] / pair["bare aiohttp"]["whole"] for pair in pairs]
    print(f"ratio soak/bare, steady: {', '.join(f'{r:.2f}x' for r in steady)}; median {statistics.median(steady):.2f}x "
          f"(goal >= 1.0x)")
    print(f"ratio soak/bare, whole run: {', '.join(f'{r:.2f}x' for r in whole)}; median "
          f"{statistics.median(whole):.2f}x")


if __name__ == "__main__":
    main()
