"""Benchmark: what exporting the run's series costs the client. Tokens per client CPU-second and schedule-lag P99
with `/metrics` scraped and OTLP pushing, against the same run without either.

Runs `soak start` on the embedded reference server in pairs with the same seed, rate and plan: `off` (no export)
and `on` (`--metrics-bind 127.0.0.1:0`, scraped every `--scrape-every` seconds by a thread of this process doing
HTTP GETs, and `--otlp-endpoint` pushing every `--push-every` to a local sink, tests/support/otlp_receiver.py
with `--no-decode`). The order alternates from pair to pair (off/on, on/off, …) so a machine getting busier or
quieter does not land on one side. Per run:

- steady tokens per CPU-second: the server's own count of generated tokens (`vllm:generation_tokens_total` on the
  reference server's /metrics) over the soak process's own CPU (user + system, psutil: the reference server and
  early-stop looks are child processes, left out), both read at a third of the run and 3 s before its planned
  end, so start-up and finalising stay out;
- the schedule-lag P99 and event-loop-lag P99 that `client.saturation` judges (from the summary).

Then the parts in this process (unless `--no-parts`): CPU per finished request into LiveMetrics (records shaped
like the runs', their mean output tokens), per inter-token gap alone, a tick, a snapshot, a /metrics page built (one
scenario, and ten with errors), an OTLP export encoded; a scrape served over HTTP (the scraper a process of its
own) and a push sent to the sink; how late a gevent loop wakes while the page is scraped (soak's page is served by
a greenlet of the loop that drives the load); and what requests, ticks, scrapes and pushes add up to at the runs'
rate and intervals, as a share of the `off` runs' client CPU per second. Single runs on a shared 2-core machine
move by ±20 %; the parts are the precise figure (docs/benchmarks.md, "Metrics export").

    python bench/metrics_cost.py [--duration 60] [--rate 8] [--pairs 2] [--scrape-every 5] [--push-every 5] [--no-parts]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

# The receiver is test support (tests/support/), not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.otlp_receiver import RunningReceiver, otlp_receiver  # noqa: E402

METRICS_URL = re.compile(r"metrics for Prometheus: (\S+?)(?:;|$)")
TOKENS_COUNTER = "vllm:generation_tokens_total"


# -- one run ----------------------------------------------------------------------------------------------------
def soak_command(out: Path, args: argparse.Namespace, sink: RunningReceiver | None) -> list[str]:
    """`soak start` on the embedded reference server; with `sink`, the page bound and the push going."""
    command = [sys.executable, "-m", "soak", "start", "--duration", f"{args.duration:g}s", "--warmup", "10s",
               "--window", "5s", "--sample-every", "1s", "--rate", f"{args.rate:g}", "--scenario", "chat_short",
               "--no-idle-probes", "--canary-every", "0", "--seed", "1", "--out", str(out), "--json"]
    if sink is not None:
        command += ["--metrics-bind", "127.0.0.1:0", "--otlp-endpoint", sink.endpoint,
                    "--otlp-every", f"{args.push_every:g}s"]
    return command


class StderrReader(threading.Thread):
    """Drains soak's stderr (so it never blocks on a full pipe) and notes the /metrics URL it prints at start."""

    def __init__(self, process: subprocess.Popen) -> None:
        super().__init__(daemon=True)
        self.process, self.lines = process, []
        self.metrics_url: str | None = None
        self.said_url = threading.Event()

    def run(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line)
            match = METRICS_URL.search(line)
            if match and self.metrics_url is None:
                self.metrics_url = match.group(1)
                self.said_url.set()
        self.said_url.set()  # the run ended without saying one: nobody waits for ever


class Scraper(threading.Thread):
    """Prometheus: GET the page every `every_s` until told to stop; keeps each scrape's time and size."""

    def __init__(self, url: str, every_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.every_s = url, every_s
        self.stop = threading.Event()
        self.scrapes: list[tuple[float, int]] = []

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=10) as response:
                    size = len(response.read())
            except (urllib.error.URLError, ConnectionError):
                continue  # the run has ended and its page with it
            self.scrapes.append((time.monotonic() - started, size))


def run_row(db: Path, deadline_s: float) -> tuple[float, str]:
    """(t0 epoch seconds, the server's base URL) of the one run in `db`, once its row exists."""
    while time.monotonic() < deadline_s:
        try:
            connection = sqlite3.connect(db)
            row = connection.execute("select t0_epoch_s, target_url from runs").fetchone()
            connection.close()
            if row and row[1]:
                return float(row[0]), str(row[1])
        except sqlite3.OperationalError:
            pass  # the schema is not there yet
        time.sleep(0.2)
    raise SystemExit(f"no run appeared in {db}")


def generation_tokens(base_url: str) -> float:
    """The server's count of generated tokens so far, from its /metrics page."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        page = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.startswith(TOKENS_COUNTER))


@dataclass
class Reading:
    """One instant of a run: the server's tokens so far, soak's own CPU and its reaped children's."""

    tokens: float
    cpu_s: float  # the soak process's own
    children_cpu_s: float  # its reaped children's (early-stop looks)


def reading(process: psutil.Process, base_url: str) -> Reading:
    """The server's token count and the soak process's CPU, now."""
    cpu = process.cpu_times()
    return Reading(generation_tokens(base_url), cpu.user + cpu.system, cpu.children_user + cpu.children_system)


@dataclass
class Measured:
    """One run's figures: between its two readings, and from its summary."""

    mode: str
    tokens: float = 0.0
    cpu_s: float = 0.0
    children_cpu_s: float = 0.0
    span_s: float = 0.0
    lag_p99_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    requests: int = 0
    output_tokens: int = 0
    verdict: str = ""
    scrapes: list[tuple[float, int]] = field(default_factory=list)
    pushes: int = 0

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.tokens / self.cpu_s if self.cpu_s > 0 else float("nan")


def measure(mode: str, out: Path, args: argparse.Namespace, sink: RunningReceiver | None) -> Measured:
    """One run, `off` or `on`: its steady tokens and CPU, and its lag figures."""
    pushes_before = len(sink.pushes()) if sink else 0
    process = subprocess.Popen(soak_command(out, args, sink), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    stderr = StderrReader(process)
    stderr.start()
    scraper = None
    try:
        t0, base_url = run_row(out / "soak.db", time.monotonic() + 180)
        if sink is not None:
            stderr.said_url.wait(60)
            scraper = Scraper(stderr.metrics_url or "", args.scrape_every) if stderr.metrics_url else None
            if scraper is None:
                raise SystemExit("soak printed no /metrics URL")
            scraper.start()
        me = psutil.Process(process.pid)
        first = wait_and_read(me, base_url, t0 + max(args.duration / 3, 12.0))
        second = wait_and_read(me, base_url, t0 + args.duration - 3.0)
        stdout, _ = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if scraper is not None:
            scraper.stop.set()
            scraper.join(timeout=15)
    stderr.join(timeout=10)
    if process.returncode not in (0, 1, 3):
        raise SystemExit(f"soak start exited {process.returncode}: {''.join(stderr.lines)[-2000:]}")
    return figures(mode, json.loads(stdout), first, second, scraper,
                   (len(sink.pushes()) - pushes_before) if sink else 0)


def wait_and_read(me: psutil.Process, base_url: str, at_epoch_s: float) -> tuple[float, Reading]:
    """The reading taken at `at_epoch_s` (a fixed instant of the run, the same in every run)."""
    time.sleep(max(at_epoch_s - time.time(), 0.0))
    return time.time(), reading(me, base_url)


def figures(mode: str, summary: dict[str, Any], first: tuple[float, Reading], second: tuple[float, Reading],
            scraper: Scraper | None, pushes: int) -> Measured:
    """The run's figures from its two readings and its summary."""
    (at_a, a), (at_b, b) = first, second
    details = next(f for f in summary["findings"] if f["check"] == "client.saturation").get("details") or {}
    return Measured(mode=mode, tokens=b.tokens - a.tokens, cpu_s=b.cpu_s - a.cpu_s,
                    children_cpu_s=b.children_cpu_s - a.children_cpu_s, span_s=at_b - at_a,
                    lag_p99_ms=details.get("lag_p99_ms"), loop_lag_p99_ms=details.get("loop_lag_p99_ms"),
                    requests=summary["totals"]["requests"], output_tokens=summary["totals"]["output_tokens"],
                    verdict=summary["verdict"], scrapes=scraper.scrapes if scraper else [], pushes=pushes)


# -- the parts, in-process --------------------------------------------------------------------------------------
def cpu_per_call(job: Callable[[], Any], calls: int) -> float:
    """CPU seconds per call of `job` (this process's CPU clock, best of three rounds)."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(calls):
            job()
        best = min(best, (time.process_time() - started) / calls)
    return best


def shaped_records(count: int, tokens: float, scenarios: list[str], seed: int = 1) -> list[Any]:
    """Finished requests like a run's: `tokens` output tokens on average (16–64 for chat_short), a gap per token
    after the first, a few failures when there are several scenarios."""
    from soak.load.records import RequestRecord

    rng, records = random.Random(seed), []
    for index in range(count):
        output = max(2, round(rng.uniform(0.4, 1.6) * tokens))
        error = "http_5xx" if len(scenarios) > 1 and index % 20 == 0 else None
        records.append(RequestRecord(
            scenario=scenarios[index % len(scenarios)], kind="chat", intended_t=0.0, sent_t=0.0, first_token_t=0.0,
            finish_t=0.0, ttft_ms=None if error else rng.uniform(15, 40), e2e_ms=rng.uniform(200, 600),
            itl_ms=() if error else tuple(rng.uniform(3, 12) for _ in range(output - 1)), queue_ms=0.0,
            lag_ms=rng.uniform(0, 2), output_tokens=0 if error else output, prompt_tokens=rng.randint(20, 40),
            error_class=error, status_code=500 if error else 200))
    return records


def bench_identity() -> Any:
    """The RunIdentity of the parts' synthetic run."""
    from soak.metrics.live import RunIdentity

    return RunIdentity("R", "127.0.0.1:8000", "", "0", "soak-reference", "reference", time.time(), 60.0, 10.0)


def fed_metrics(scenarios: list[str], tokens_per_request: float) -> Any:
    """LiveMetrics after 2,000 requests spread over `scenarios`, and a tick."""
    from soak.metrics.live import LiveMetrics

    metrics = LiveMetrics(bench_identity())
    for record in shaped_records(2000, tokens_per_request, scenarios):
        metrics.request(record)
    metrics.tick()
    return metrics


def loop_stall(scenarios: int, tokens_per_request: float) -> dict[str, float]:
    """How late a gevent loop wakes while its /metrics page is scraped, as in `soak start` (Locust's gevent patch
    makes the page's server thread a greenlet): in a child process, a greenlet sleeping 1 ms at a time for 3 s
    unscraped, then 6 s while a scraper process GETs the page every 0.5 s. The child's JSON: lateness P99 and max (ms)
    of each span."""
    command = [sys.executable, __file__, "--stall-child", str(scenarios), "--stall-tokens", f"{tokens_per_request:g}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def stall_child(scenarios: int, tokens_per_request: float) -> None:
    """The child of `loop_stall`: print its figures as one line of JSON."""
    import soak.load.runner  # noqa: F401 - imports Locust, which gevent-patches the process as soak start's is
    from soak.metrics.prometheus import MetricsEndpoint, families

    metrics = fed_metrics([f"scenario_{index}" for index in range(scenarios)], tokens_per_request)
    endpoint = MetricsEndpoint("127.0.0.1", 0)
    endpoint.serve(lambda: families(metrics.snapshot(), metrics.identity.labels))
    quiet = lateness_ms(3.0)
    scraper = ("import sys, time, urllib.request\nend = time.monotonic() + float(sys.argv[2])\n"
               "while time.monotonic() < end:\n    urllib.request.urlopen(sys.argv[1], timeout=30).read()\n"
               "    time.sleep(0.5)\n")
    process = subprocess.Popen([sys.executable, "-c", scraper, endpoint.url, "6"])
    scraped = lateness_ms(6.0)
    process.wait(timeout=60)
    endpoint.close()
    print(json.dumps({"quiet_p99_ms": _p99(quiet), "quiet_max_ms": max(quiet), "scraped_p99_ms": _p99(scraped),
                      "scraped_max_ms": max(scraped), "scrapes": endpoint.scrapes}))


def lateness_ms(for_s: float) -> list[float]:
    """How late each 1 ms sleep of this greenlet woke, for `for_s` seconds."""
    import gevent

    late, end = [], time.monotonic() + for_s
    while time.monotonic() < end:
        started = time.perf_counter()
        gevent.sleep(0.001)
        late.append((time.perf_counter() - started) * 1000 - 1.0)
    return late


def _p99(values: list[float]) -> float:
    return sorted(values)[int(0.99 * (len(values) - 1))]


def served_scrape_s(metrics: Any, identity: Any, scrapes: int = 40) -> float:
    """CPU seconds this process spends serving one scrape of the page over HTTP (MetricsEndpoint, its thread),
    the scraper being a process of its own so that only the serving side is counted."""
    from soak.metrics.prometheus import MetricsEndpoint, families

    endpoint = MetricsEndpoint("127.0.0.1", 0)
    try:
        endpoint.serve(lambda: families(metrics.snapshot(), identity.labels))
        scraper = ("import sys, urllib.request\nfor _ in range(int(sys.argv[2])):\n"
                   "    urllib.request.urlopen(sys.argv[1], timeout=30).read()\n")
        started = time.process_time()
        subprocess.run([sys.executable, "-c", scraper, endpoint.url, str(scrapes)], check=True, timeout=300)
        return (time.process_time() - started) / scrapes
    finally:
        endpoint.close()


def sent_push_s(metrics: Any, identity: Any, sink: RunningReceiver, pushes: int = 30) -> float:
    """CPU seconds of one OTLP push sent to the sink: snapshot, SDK points, encoding, the HTTP POST."""
    from soak.metrics.otlp import OtlpPush

    push = OtlpPush(sink.endpoint, identity, metrics.snapshot, every_s=3600.0)
    try:
        push.push()  # the first opens the connection
        started = time.process_time()
        for _ in range(pushes):
            push.push()
        return (time.process_time() - started) / pushes
    finally:
        push.exporter.shutdown()


def parts(tokens_per_request: float, sink: RunningReceiver) -> dict[str, float]:
    """CPU seconds of each part of the export, in this process."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from prometheus_client import CollectorRegistry, generate_latest

    from soak.metrics import catalog
    from soak.metrics.live import Histogram, LiveMetrics
    from soak.metrics.otlp import metrics_data
    from soak.metrics.prometheus import families

    identity = bench_identity()

    def fed(scenarios: list[str]) -> LiveMetrics:
        return fed_metrics(scenarios, tokens_per_request)

    def page_s(metrics: LiveMetrics) -> float:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(type("Collector", (), {"collect": lambda self: families(metrics.snapshot(), identity.labels)})())
        return cpu_per_call(lambda: generate_latest(registry), 30)

    records = shaped_records(2000, tokens_per_request, ["chat_short"])
    metrics = LiveMetrics(identity)
    request_s = cpu_per_call(lambda: [metrics.request(record) for record in records], 1) / len(records)
    gaps = [gap / 1000.0 for record in records for gap in record.itl_ms]
    histogram = Histogram(catalog.GAP_BUCKETS_S)
    gap_s = cpu_per_call(lambda: [histogram.observe(gap) for gap in gaps], 1) / len(gaps)
    one, ten = fed(["chat_short"]), fed([f"scenario_{index}" for index in range(10)])
    return {
        "request_s": request_s, "gaps_per_request": len(gaps) / len(records), "gap_s": gap_s,
        "tick_s": cpu_per_call(one.tick, 200), "snapshot_s": cpu_per_call(one.snapshot, 200),
        "page_s": page_s(one), "page_10_s": page_s(ten),
        "otlp_s": cpu_per_call(lambda: encode_metrics(metrics_data(one.snapshot(), identity)).SerializeToString(), 50),
        "otlp_10_s": cpu_per_call(lambda: encode_metrics(metrics_data(ten.snapshot(), identity)).SerializeToString(), 20),
        "served_s": served_scrape_s(one, identity), "served_10_s": served_scrape_s(ten, identity, 10),
        "pushed_s": sent_push_s(one, identity, sink),
        "stall": loop_stall(1, tokens_per_request), "stall_10": loop_stall(10, tokens_per_request),
    }


def print_parts(costs: dict[str, float], offs: list[Measured], args: argparse.Namespace) -> None:
    """Each part's CPU, and what they add up to against the `off` runs' client CPU per second."""
    print(f"parts (CPU, this process): a request {costs['request_s'] * 1e6:.1f} µs ({costs['gaps_per_request']:.1f} "
          f"gaps; one Histogram.observe {costs['gap_s'] * 1e6:.2f} µs), a tick {costs['tick_s'] * 1e6:.0f} µs, a "
          f"snapshot {costs['snapshot_s'] * 1e3:.2f} ms, a /metrics page {costs['page_s'] * 1e3:.1f} ms (10 scenarios "
          f"{costs['page_10_s'] * 1e3:.1f} ms), an OTLP export encoded {costs['otlp_s'] * 1e3:.1f} ms (10 scenarios "
          f"{costs['otlp_10_s'] * 1e3:.1f} ms); over HTTP: a scrape served {costs['served_s'] * 1e3:.1f} ms (10 "
          f"scenarios {costs['served_10_s'] * 1e3:.1f} ms), a push sent {costs['pushed_s'] * 1e3:.1f} ms")
    for label, stall in (("1 scenario", costs["stall"]), ("10 scenarios", costs["stall_10"])):
        print(f"gevent loop lateness, page of {label}: P99 {stall['quiet_p99_ms']:.2f} ms / max "
              f"{stall['quiet_max_ms']:.1f} ms unscraped; P99 {stall['scraped_p99_ms']:.2f} ms / max "
              f"{stall['scraped_max_ms']:.1f} ms scraped every 0.5 s ({stall['scrapes']} scrapes)")
    if not offs:
        return
    rate = statistics.median(m.requests for m in offs) / args.duration
    per_s = {"requests": rate * costs["request_s"], "ticks (2/s)": 2 * costs["tick_s"],
             "scrapes": costs["served_s"] / args.scrape_every, "pushes": costs["pushed_s"] / args.push_every}
    client_s = statistics.median(m.cpu_s / m.span_s for m in offs)
    added = sum(per_s.values())
    print(f"at {rate:.1f} req/s, a scrape every {args.scrape_every:g} s and a push every {args.push_every:g} s: "
          + ", ".join(f"{name} {value * 1e3:.2f} ms" for name, value in per_s.items())
          + f" of CPU a second = {added * 1e3:.2f} ms/s against the client's {client_s * 1e3:.0f} ms/s without "
          f"export: {100 * added / client_s:.2f} % (goal <= 3 %)")


# -- the report -------------------------------------------------------------------------------------------------
def print_runs(results: list[Measured]) -> None:
    """Each run's figures, then the on/off ratios pair by pair."""
    print(f"{'pair':5} {'export':6} {'tokens':>8} {'CPU-s':>6} {'tok/CPU-s':>10} {'looks CPU-s':>11} {'lag P99':>8} "
          f"{'loop P99':>9} {'requests':>8} {'scrapes':>8} {'page ms':>8} {'pushes':>6} verdict")
    for index, m in enumerate(results):
        page_ms = statistics.mean(s for s, _ in m.scrapes) * 1000 if m.scrapes else float("nan")
        print(f"{index // 2 + 1:<5} {m.mode:6} {m.tokens:>8,.0f} {m.cpu_s:>6.2f} {m.tokens_per_cpu_s:>10,.0f} "
              f"{m.children_cpu_s:>11.2f} {_ms(m.lag_p99_ms):>8} {_ms(m.loop_lag_p99_ms):>9} {m.requests:>8} "
              f"{len(m.scrapes):>8} {page_ms:>8.1f} {m.pushes:>6} {m.verdict}")
    pairs = [(results[i], results[i + 1]) for i in range(0, len(results) - 1, 2)]
    ratios = [(on.tokens_per_cpu_s / off.tokens_per_cpu_s) for off, on in (_off_on(pair) for pair in pairs)]
    print(f"tokens per CPU-second, on/off by pair: {', '.join(f'{r:.3f}' for r in ratios)}; median "
          f"{statistics.median(ratios):.3f} (cost {100 * (1 - statistics.median(ratios)):+.1f} %; goal <= 3 %)")
    for figure in ("lag_p99_ms", "loop_lag_p99_ms"):
        values = [(getattr(on, figure), getattr(off, figure)) for off, on in (_off_on(pair) for pair in pairs)]
        kept = [on / off for on, off in values if on is not None and off]
        if kept:
            print(f"{figure} on/off by pair: {', '.join(f'{r:.2f}' for r in kept)}; median {statistics.median(kept):.2f}")


def _off_on(pair: tuple[Measured, Measured]) -> tuple[Measured, Measured]:
    """A pair as (off, on), whichever ran first."""
    return (pair[0], pair[1]) if pair[0].mode == "off" else (pair[1], pair[0])


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def main() -> None:
    """The pairs (alternating their order), then the parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of each run (default 60)")
    parser.add_argument("--rate", type=float, default=8.0, help="requests/s (default 8)")
    parser.add_argument("--pairs", type=int, default=2, help="off/on pairs, order alternating (default 2; 0: the parts only)")
    parser.add_argument("--scrape-every", type=float, default=5.0, help="seconds between scrapes (default 5)")
    parser.add_argument("--push-every", type=float, default=5.0, help="seconds between OTLP pushes (default 5)")
    parser.add_argument("--no-parts", action="store_true", help="leave the in-process parts out")
    parser.add_argument("--stall-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--stall-tokens", type=float, default=40.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stall_child:
        stall_child(args.stall_child, args.stall_tokens)
        return
    print(f"soak start on the embedded reference server, chat_short at {args.rate:g} req/s, runs of "
          f"{args.duration:g} s, {args.pairs} pairs; on: scraped every {args.scrape_every:g} s, pushed every "
          f"{args.push_every:g} s; {psutil.cpu_count()} CPUs", flush=True)
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="soak-bench-metrics-") as scratch:
        with otlp_receiver(Path(scratch) / "sink.jsonl", decode=False) as sink:
            for pair in range(args.pairs):
                for mode in ("off", "on") if pair % 2 == 0 else ("on", "off"):
                    print(f"pair {pair + 1}/{args.pairs}, export {mode}…", file=sys.stderr, flush=True)
                    out = Path(scratch) / f"{mode}-{pair}"
                    results.append(measure(mode, out, args, sink if mode == "on" else None))
            if results:
                print_runs(results)
            if not args.no_parts:
                offs = [m for m in results if m.mode == "off"]
                tokens = statistics.median(m.output_tokens / m.requests for m in offs) if offs else 40.0
                print_parts(parts(tokens, sink), offs, args)


if __name__ == "__main__":
    main()
