"""How far soak's TTFT, ITL and E2E sit from a raw-socket reference client's, measured in the same run.

One local server with fixed timing (tests/support/sse_server.py: TTFT 200 ms, ITL 20 ms) serves both at once:
`soak start --target URL` as a child process, and in this process a reference client — a thread per
request, a blocking socket, the time taken right after each `recv` returns, nothing else — sending the same
open-loop rate. soak's figures are what its summary.json reports (TTFT and E2E from the intended send time,
as soak always measures); its per-request rows (`--keep-requests`) split TTFT into schedule lag and the
time from the actual send. Prints p50/p99 of each, and soak − reference.

    python bench/timing_fidelity.py [--rate 5] [--duration 40] [--ttft-ms 200] [--itl-ms 20] [--tokens 32]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

SERVER = Path(__file__).resolve().parents[1] / "tests" / "support" / "sse_server.py"
WARMUP_S = 5.0


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, str(SERVER), "--ttft-ms", str(args.ttft_ms), "--itl-ms",
                                str(args.itl_ms), "--tokens", str(args.tokens)], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().split()[1]


class ReferenceClient:
    """Open-loop requests, each on its own thread and connection; times straight from the socket reads."""

    def __init__(self, port: int) -> None:
        self.port = port
        body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True})
        self.request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                        f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}").encode()
        self.ttft_ms: list[float] = []
        self.itl_ms: list[float] = []
        self.e2e_ms: list[float] = []
        self._lock = threading.Lock()

    def one(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent_t = time.time()
        sock.sendall(self.request)
        stamps, done_t = [], None
        while done_t is None:
            data = sock.recv(65536)
            now = time.time()
            if not data:
                break
            stamps.extend([now] * data.count(b'"content"'))
            if b"[DONE]" in data:
                done_t = now
        sock.close()
        with self._lock:
            self.ttft_ms.append((stamps[0] - sent_t) * 1000.0)
            self.itl_ms.extend((b - a) * 1000.0 for a, b in zip(stamps, stamps[1:]))
            self.e2e_ms.append(((done_t or stamps[-1]) - sent_t) * 1000.0)

    def run(self, rate: float, start_t: float, end_t: float) -> None:
        rng, threads = random.Random(2), []
        next_t = start_t
        while next_t < end_t:
            time.sleep(max(next_t - time.time(), 0.0))
            thread = threading.Thread(target=self.one)
            thread.start()
            threads.append(thread)
            next_t += rng.expovariate(rate)
        for thread in threads:
            thread.join()


def soak_command(url: str, args: argparse.Namespace, out: Path) -> list[str]:
    return [sys.executable, "-m", "soak", "start", "--target", url, "--duration", f"{args.duration:g}s",
            "--warmup", f"{WARMUP_S:g}s", "--rate", f"{args.rate:g}", "--scenario", "chat_short",
            "--no-idle-probes", "--canary-every", "0", "--keep-requests", "--out", str(out)]


def soak_figures(out: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """summary.json's latency and the per-request lag and TTFT rows of soak's run."""
    summary_path = next(out.glob("*/summary.json"))
    summary = json.loads(summary_path.read_text())
    with sqlite3.connect(out / "soak.db") as db:
        rows = np.array(db.execute("SELECT lag_ms, ttft_ms, e2e_ms FROM requests WHERE ttft_ms IS NOT NULL "
                                   "AND intended_s >= ?", (WARMUP_S,)).fetchall(), dtype=float)
    return summary["latency_ms"], {"lag": rows[:, 0], "ttft_from_send": rows[:, 1] - rows[:, 0], "e2e": rows[:, 2]}


def pct(values, p: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), p))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--ttft-ms", type=float, default=200.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    server, url = start_server(args)
    try:
        with tempfile.TemporaryDirectory(prefix="soak-fidelity-") as out:
            measure(args, url, Path(out))
    finally:
        server.kill()


def measure(args: argparse.Namespace, url: str, out: Path) -> None:
    soak = subprocess.Popen(soak_command(url, args, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    reference = ReferenceClient(int(url.rsplit(":", 1)[1]))
    start_t = time.time() + 3.0 + WARMUP_S  # soak's start-up, then its warm-up, before either is counted
    reference.run(args.rate, start_t, start_t + args.duration - WARMUP_S - 3.0)
    if soak.wait() not in (0, 1, 3):
        raise SystemExit(f"soak failed: {soak.stderr.read()[-2000:]}")
    latency, rows = soak_figures(out)
    print(f"server TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, {args.tokens} tokens; {args.rate:g} req/s for "
          f"{args.duration:g} s; reference: {len(reference.ttft_ms)} requests, soak: {latency['ttft']['count']}")
    print(f"{'metric':8} {'soak p50':>9} {'ref p50':>9} {'Δ p50':>8} {'soak p99':>9} {'ref p99':>9} {'Δ p99':>8}  ms")
    for metric, ref in (("ttft", reference.ttft_ms), ("itl", reference.itl_ms), ("e2e", reference.e2e_ms)):
        s50, s99, r50, r99 = latency[metric]["p50"], latency[metric]["p99"], pct(ref, 50), pct(ref, 99)
        print(f"{metric:8} {s50:>9.2f} {r50:>9.2f} {s50 - r50:>+8.2f} {s99:>9.2f} {r99:>9.2f} {s99 - r99:>+8.2f}")
    print(f"soak's TTFT split: schedule lag p50 {pct(rows['lag'], 50):.2f} / p99 {pct(rows['lag'], 99):.2f} ms; "
          f"from the actual send p50 {pct(rows['ttft_from_send'], 50):.2f} / p99 {pct(rows['ttft_from_send'], 99):.2f}"
          f" ms (reference Δ {pct(rows['ttft_from_send'], 50) - pct(reference.ttft_ms, 50):+.2f} / "
          f"{pct(rows['ttft_from_send'], 99) - pct(reference.ttft_ms, 99):+.2f} ms)")
    print(f"soak's E2E from its per-request rows (exact, not histogram buckets): p50 {pct(rows['e2e'], 50):.2f} / "
          f"p99 {pct(rows['e2e'], 99):.2f} ms (reference Δ {pct(rows['e2e'], 50) - pct(reference.e2e_ms, 50):+.2f} / "
          f"{pct(rows['e2e'], 99) - pct(reference.e2e_ms, 99):+.2f} ms); summary percentiles are HDR buckets' upper "
          "edges (3 significant digits: up to 0.5 ms high at 800 ms)")
    print("goal: |Δ p50| <= 0.5 ms and |Δ p99| <= 1 ms")


if __name__ == "__main__":
    main()
