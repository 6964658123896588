"""Output tokens per client CPU-second: soak's real client path against a bare aiohttp client, side by side.

soak runs as `soak start --target URL` (Locust, the SSE client, records, latency windows, the writer thread
and SQLite, telemetry, then analysis and the report; soak's default scenario mix unless `--scenario`); the bare
client is aiohttp streaming open-loop and parsing each chunk with `json`. Both run at the same time and rate,
each against its own copy of one local server (tests/support/sse_server.py: 64 tokens a request, one write per
token at ITL > 0, the whole answer in one write at ITL 0), so that whatever else the machine does falls on both
alike; each client's CPU is its own. The pair is repeated and the median ratio printed: on a shared machine
single runs move by ±20 %.

- steady state: tokens and the CPU of the client's process tree (psutil) read twice while its load runs, at a
  third of the run and near its end, timed from its server's first token, so start-up and, for soak,
  finalising (analysis, report) stay out (a difference of a long and a short run does the same in principle,
  but start-up's CPU varies by more than the difference on a busy box);
- whole run: tokens / CPU of the whole run (rusage), start-up and finalising included.

Then `--workers 2` against one process: the highest token rate each reaches (the server's count between two
readings while the load runs, per second), offered more and more until a run falls behind what it was offered.

Then each optional feature (`--slo`, `--keep-requests`, the structured scenario, a `--trace` replay at the same
rate): soak with it beside soak without it, its CPU per request in steady state against the default run's.

    pip install -e .[bench]
    python bench/client_efficiency.py [--rate 40] [--long 45] [--repeat 3] [--itl-ms 0] [--scenario NAME]
        [--features --slo,--keep-requests,structured,--trace] [--flood-rate 1000] [--flood-for 40]
    python bench/client_efficiency.py --light --fail-below 0.5   # CI: one pair, the ratio in the log
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
FLOOD_CONCURRENCY = 256  # requests in flight per run when flooded; the rest wait their turn


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


def run_together(runs: dict[str, tuple[list[str], str]], steady_between_s: tuple[float, float] | None = None,
                 ) -> dict[str, Measured]:
    """Run clients side by side, each `(command, its server's URL)`, to completion: each one's tokens (its server's
    count) and CPU (user + system, from rusage), and with `steady_between_s` the tokens and CPU between two
    readings taken that many seconds after the client's load began (its server's first token)."""
    before = {name: tokens_sent(url) for name, (_, url) in runs.items()}
    started = time.monotonic()
    processes = {name: subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for name, (command, _) in runs.items()}
    readings = steady_readings(runs, processes, before, steady_between_s) if steady_between_s else {}
    measured = {}
    for name, process in processes.items():
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        measured[name] = Measured(tokens_sent(runs[name][1]) - before[name], usage.ru_utime + usage.ru_stime,
                                  time.monotonic() - started)
        if len(readings.get(name, ())) == 2:
            (tokens_a, cpu_a), (tokens_b, cpu_b) = readings[name]
            measured[name].steady_tokens, measured[name].steady_cpu_s = tokens_b - tokens_a, cpu_b - cpu_a
    return measured


def steady_readings(runs: dict[str, tuple[list[str], str]], processes: dict[str, subprocess.Popen],
                    before: dict[str, int], at_s: tuple[float, float]) -> dict[str, list[tuple[int, float]]]:
    """(tokens, CPU-s of the process tree) of each client at `at_s` seconds after its load began.

    Timed from each client's own first token, not from the start: soak's start-up (imports, the server's
    questions) takes 3 s on a quiet machine and 15 s or more on a busy one, and must stay out of steady state.
    """
    began: dict[str, float] = {}
    readings: dict[str, list[tuple[int, float]]] = {name: [] for name in runs}
    while any(len(taken) < len(at_s) for name, taken in readings.items() if running(processes[name])):
        now = time.monotonic()
        for name, process in processes.items():
            taken = readings[name]
            if len(taken) == len(at_s) or not running(process):
                continue
            if name not in began:
                if tokens_sent(runs[name][1]) > before[name]:
                    began[name] = now
            elif now >= began[name] + at_s[len(taken)]:
                taken.append((tokens_sent(runs[name][1]), tree_cpu_s(process.pid)))
        time.sleep(0.1)
    return readings


def running(process: subprocess.Popen) -> bool:
    """Whether the process has not exited, without reaping it (its rusage is read when it is waited for)."""
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


def tree_cpu_s(pid: int) -> float:
    """User + system CPU of a process and its children alive now (soak runs none in steady state; counted
    anyway, so that a helper process could not hide cost)."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        for process in (root, *root.children(recursive=True)):
            cpu = process.cpu_times()
            total += cpu.user + cpu.system
    except psutil.NoSuchProcess:
        pass
    return total


def soak_command(url: str, rate: float, duration_s: float, out: Path, workers: int = 0, scenario: str | None = None,
                 extra: tuple[str, ...] = ()) -> list[str]:
    """`soak start` at `rate`; `scenario` None is soak's default mix."""
    command = [sys.executable, "-m", "soak", "start", "--target", url, "--duration", f"{duration_s:g}s",
               "--warmup", "5s", "--rate", f"{rate:g}", "--no-idle-probes", "--canary-every", "0",
               "--workers", str(workers), "--out", str(out)]
    if "--trace" in extra:  # a trace brings its own arrivals (written at `rate`): soak refuses --rate beside it
        command[command.index("--rate"):command.index("--rate") + 2] = []
    return command + (["--scenario", scenario] if scenario else []) + list(extra)


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


def efficiency(urls: tuple[str, str], rate: float, long_s: float, out: Path, repeat: int, scenario: str | None,
               ) -> list[dict[str, dict[str, float]]]:
    """`repeat` pairs of runs, soak and the bare client at the same time, each against its own server, so that
    whatever else the machine does falls on both alike; each pair's figures."""
    runs = {"soak": (soak_command(urls[0], rate, long_s, out, scenario=scenario), urls[0]),
            "bare aiohttp": (bare_command(urls[1], rate, long_s), urls[1])}
    return [measure_pair(runs, long_s, index) for index in range(repeat)]


def steady_window(long_s: float) -> tuple[float, float]:
    """Seconds after a client's first token: past soak's 5 s warm-up, and before its load ends."""
    return max(long_s / 3, 10.0), long_s - 2.0


def measure_pair(runs: dict[str, tuple[list[str], str]], long_s: float, index: int) -> dict[str, dict[str, float]]:
    """One side-by-side run of `runs`: per client, tokens per CPU-second (steady and whole run) and CPU µs per
    request in steady state."""
    window = steady_window(long_s)
    figures = {}
    for name, run in run_together(runs, window).items():
        print(f"  pair {index + 1}, {name}: {run.tokens} tokens, {run.cpu_s:.2f} CPU-s in all; {run.steady_tokens} "
              f"tokens, {run.steady_cpu_s:.2f} CPU-s from {window[0]:g} s to {window[1]:g} s", flush=True)
        requests = run.steady_tokens / TOKENS
        figures[name] = {"steady": per_cpu(run.steady_tokens, run.steady_cpu_s),
                         "whole": per_cpu(run.tokens, run.cpu_s),
                         "us_per_request": run.steady_cpu_s * 1e6 / requests if requests else float("nan")}
    return figures


# What each optional feature adds to soak's default run (the one it is measured beside).
FEATURES: dict[str, tuple[str, ...]] = {
    "--slo": ("--slo", "ttft=500ms,itl=50ms,tpot=50ms,e2e=20s"),
    "--keep-requests": ("--keep-requests",),
    "structured": ("--scenario", "structured"),
    "--trace": ("--trace", "{trace}"),
}


def write_trace(path: Path, rate: float, duration_s: float) -> Path:
    """A Mooncake trace of Poisson arrivals at `rate` for `duration_s` (plus room for soak's start-up), each row
    about the size of the default mix's requests."""
    rng = random.Random(7)
    t_ms, rows = 0.0, []
    while t_ms < (duration_s + 30.0) * 1000.0:
        rows.append(json.dumps({"timestamp": round(t_ms), "input_length": rng.randint(16, 600),
                                "output_length": TOKENS, "hash_ids": []}))
        t_ms += rng.expovariate(rate) * 1000.0
    path.write_text("\n".join(rows) + "\n")
    return path


def feature_costs(urls: tuple[str, str], rate: float, long_s: float, out: Path, names: list[str],
                  scenario: str | None) -> dict[str, dict[str, float]]:
    """Each feature: soak with it and soak without it (the default run) side by side, each against its own server;
    its cost per request is the difference of their steady CPU per request, and in % of the default run's."""
    trace = write_trace(out / "bench-trace.jsonl", rate, long_s)
    costs = {}
    for name in names:
        extra = tuple(arg.replace("{trace}", str(trace)) for arg in FEATURES[name])
        with_scenario = None if "--scenario" in extra else scenario
        # Each run its own database: two runs creating one at the same moment can collide.
        runs = {name: (soak_command(urls[0], rate, long_s, out / "feature", scenario=with_scenario, extra=extra), urls[0]),
                "soak": (soak_command(urls[1], rate, long_s, out / "default", scenario=scenario), urls[1])}
        figures = measure_pair(runs, long_s, 0)
        with_us, without_us = figures[name]["us_per_request"], figures["soak"]["us_per_request"]
        costs[name] = {"us": with_us - without_us, "share": with_us / without_us - 1.0}
        print(f"feature {name}: {with_us:,.0f} vs {without_us:,.0f} CPU-µs a request, {with_us - without_us:+,.0f} µs "
              f"({100 * (with_us / without_us - 1.0):+.1f} %; goal <= +5 %)", flush=True)
    return costs


def flood_rate(url: str, rate: float, duration_s: float, out: Path, workers: int) -> float:
    """Tokens/s the server sent while a run offered `rate` req/s, read between a third of the run (start-up, the
    workers' included, is over) and 2 s before its end (the drain has not begun)."""
    window = (max(duration_s / 3, 15.0), duration_s - 2.0)
    command = soak_command(url, rate, duration_s, out, workers, scenario="chat_short") + [
        "--max-concurrency", str(FLOOD_CONCURRENCY)]
    run = run_together({"soak": (command, url)}, window)["soak"]
    return run.steady_tokens / (window[1] - window[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=40.0, help="req/s of the efficiency runs")
    parser.add_argument("--long", type=float, default=45.0, help="seconds of each efficiency run")
    parser.add_argument("--repeat", type=int, default=3, help="pairs of efficiency runs (0: skip them)")
    parser.add_argument("--itl-ms", type=float, default=0.0,
                        help="server's gap between tokens (0: the whole answer in one write)")
    parser.add_argument("--scenario", default=None, help="soak's scenario (default: soak's default mix)")
    parser.add_argument("--features", default=",".join(FEATURES),
                        help=f"optional features to cost, comma-separated, of {', '.join(FEATURES)} ('' for none)")
    parser.add_argument("--flood-rate", type=float, default=1000.0,
                        help="req/s first offered to find the max rate (raised by a quarter per run)")
    parser.add_argument("--flood-for", type=float, default=40.0, help="seconds of each max-rate run (0: skip)")
    parser.add_argument("--light", action="store_true",
                        help="CI's form: one pair of 30 s runs, no features, no max rate (unless given after it)")
    parser.add_argument("--fail-below", type=float, default=None, metavar="RATIO",
                        help="exit 1 when the median steady ratio soak/bare falls below RATIO")
    parser.add_argument("--bare-client", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(light_defaults(sys.argv[1:]))
    if args.bare_client:
        asyncio.run(bare_client(args.bare_client, args.rate, args.long))
        return
    servers = [start_server(20.0, args.itl_ms) for _ in range(2)]
    try:
        with tempfile.TemporaryDirectory(prefix="soak-bench-") as out:
            ratio = report(args, (servers[0][1], servers[1][1]), Path(out))
    finally:
        for server, _ in servers:
            server.kill()
    if args.fail_below is not None and ratio is not None and not ratio >= args.fail_below:
        print(f"FAIL: steady ratio {ratio:.2f}x is below {args.fail_below:g}x")
        sys.exit(1)


def light_defaults(argv: list[str]) -> list[str]:
    """`--light` stands for `--repeat 1 --long 30 --features '' --flood-for 0`, each overridable after it."""
    if "--light" not in argv:
        return argv
    return ["--repeat", "1", "--long", "30", "--features", "", "--flood-for", "0", *argv]


def report(args: argparse.Namespace, urls: tuple[str, str], out: Path) -> float | None:
    """Print every figure asked for; the median steady ratio soak/bare (None when no pair ran)."""
    print(f"server: {TOKENS} tokens/request, TTFT 20 ms, ITL {args.itl_ms:g} ms; {args.rate:g} req/s, runs of "
          f"{args.long:g} s, {args.repeat} pairs; soak's scenario: {args.scenario or 'the default mix'}; "
          f"{os.cpu_count()} CPUs", flush=True)
    ratio = None
    if args.repeat > 0:
        ratio = print_efficiency(efficiency(urls, args.rate, args.long, out, args.repeat, args.scenario))
    names = [name for name in args.features.split(",") if name]
    if names:
        feature_costs(urls, args.rate, args.long, out, names, args.scenario)
    if args.flood_for > 0:
        one, one_at = max_rate(urls[0], args.flood_rate, args.flood_for, out, 0)
        two, two_at = max_rate(urls[0], one_at, args.flood_for, out, 2)
        print(f"max token rate: one process {one:,.0f} tok/s (offered {one_at:,.0f} req/s), --workers 2 {two:,.0f} "
              f"tok/s (offered {two_at:,.0f} req/s), ratio {two / one:.2f}x (goal >= 1.7x; the server shares these "
              f"CPUs)")
    return ratio


def max_rate(url: str, start_rate: float, duration_s: float, out: Path, workers: int) -> tuple[float, float]:
    """(the highest token rate, the offered req/s that gave it): offered rates rise by a quarter from
    `start_rate` until a run falls short of 90 % of what it was offered (beyond that, an overloaded open-loop
    client only piles up waiting arrivals, and its rate drops), then one run between the last rate it kept up
    with and that one."""
    best, best_at, rate, kept_up_at = 0.0, start_rate, start_rate, None
    while True:
        achieved = flood_once(url, rate, duration_s, out, workers)
        if achieved > best:
            best, best_at = achieved, rate
        if achieved < 0.9 * rate * TOKENS:
            break
        kept_up_at, rate = rate, rate * 1.25
    if kept_up_at is not None:  # one more look between the last rate it kept up with and the one it fell short at
        between = (kept_up_at * rate) ** 0.5
        achieved = flood_once(url, between, duration_s, out, workers)
        if achieved > best:
            best, best_at = achieved, between
    return best, best_at


def flood_once(url: str, rate: float, duration_s: float, out: Path, workers: int) -> float:
    achieved = flood_rate(url, rate, duration_s, out, workers)
    print(f"  {'one process' if not workers else f'--workers {workers}'} offered {rate:,.0f} req/s "
          f"({rate * TOKENS:,.0f} tok/s): {achieved:,.0f} tok/s", flush=True)
    return achieved


def print_efficiency(pairs: list[dict[str, dict[str, float]]]) -> float:
    """The table, the ratios of each pair and their medians; returns the median steady ratio."""
    print(f"{'pair':5} {'client':14} {'steady tok/CPU-s':>17} {'whole-run tok/CPU-s':>20} {'steady CPU-µs/req':>18}")
    for index, figures in enumerate(pairs, 1):
        for name, row in figures.items():
            print(f"{index:<5} {name:14} {row['steady']:>17,.0f} {row['whole']:>20,.0f} {row['us_per_request']:>18,.0f}")
    steady = [pair["soak"]["steady"] / pair["bare aiohttp"]["steady"] for pair in pairs]
    whole = [pair["soak"]["whole"] / pair["bare aiohttp"]["whole"] for pair in pairs]
    print(f"ratio soak/bare, steady: {', '.join(f'{r:.2f}x' for r in steady)}; median {statistics.median(steady):.2f}x "
          f"(goal >= 1.0x)")
    print(f"ratio soak/bare, whole run: {', '.join(f'{r:.2f}x' for r in whole)}; median "
          f"{statistics.median(whole):.2f}x")
    return statistics.median(steady)


if __name__ == "__main__":
    main()
