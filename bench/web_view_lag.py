"""Benchmark: does the live view slow the load? The client's schedule lag with the page open and polled, against
the same run with it closed.

Runs `soak start --web` twice against the embedded reference server with the same seed and plan: once with no
one looking ("closed"), once with a browser's worth of polling ("open": plotly.js once, then the run's page every
`--poll-every` seconds, faster than the page's own 5 s reload). Prints, per run, the schedule-lag P99 and the
event-loop lag P99 that `client.saturation` judges, the late sends, and the pages served, then the ratio
open/closed. The live view runs in its own process and reads the database, so the ratio should stay near 1
(within the noise of two short runs on a shared machine).

    python bench/web_view_lag.py [--duration 60s] [--rate 4] [--poll-every 1] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def start_run(out: Path, duration: str, rate: float) -> subprocess.Popen:
    command = [sys.executable, "-m", "soak", "start", "--duration", duration, "--warmup", "5s", "--window", "5s",
               "--sample-every", "1s", "--rate", f"{rate:g}", "--no-idle-probes", "--canary-every", "0",
               "--seed", "1", "--web", "--out", str(out), "--json"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def live_url(process: subprocess.Popen) -> str:
    """The live page's URL from soak's stderr (the line `live view: URL`)."""
    for line in process.stderr:
        if line.startswith("live view: "):
            return line.split(": ", 1)[1].strip()
    raise SystemExit(f"soak printed no live view URL (exit {process.wait()})")


class Poller(threading.Thread):
    """A browser with the page open: plotly.js once, then the page every `every_s` until told to stop."""

    def __init__(self, url: str, every_s: float):
        super().__init__(daemon=True)
        self.url, self.every_s = url, every_s
        self.stop = threading.Event()
        self.fetches: list[float] = []

    def _get(self, url: str) -> None:
        started = time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                response.read()
            self.fetches.append(time.monotonic() - started)
        except (urllib.error.URLError, ConnectionError):
            pass  # the run has ended and its view with it

    def run(self) -> None:
        self._get(self.url.split("/runs/")[0] + "/static/plotly.js")
        while not self.stop.wait(self.every_s):
            self._get(self.url)


def measure(mode: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run with the page `open` (polled) or `closed`; the client's lag figures from its summary."""
    process = start_run(out, args.duration, args.rate)
    url = live_url(process)
    poller = Poller(url, args.poll_every) if mode == "open" else None
    if poller:
        poller.start()
    stdout, _ = process.communicate()
    if poller:
        poller.stop.set()
        poller.join(timeout=30)
    summary = json.loads(stdout)
    details = next(f for f in summary["findings"] if f["check"] == "client.saturation").get("details") or {}
    fetches = poller.fetches if poller else []
    return {"mode": mode, "run": summary["run_id"], "lag_p99_ms": details.get("lag_p99_ms"),
            "loop_lag_p99_ms": details.get("loop_lag_p99_ms"), "late_sends_1s": details.get("late_sends_1s"),
            "sends": details.get("sends"), "pages": len(fetches),
            "page_ms": 1000 * sum(fetches) / len(fetches) if fetches else None}


def _text(value: Any) -> str:
    return "—" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="60s", help="each run's length (default 60s)")
    parser.add_argument("--rate", type=float, default=4.0, help="request rate (default 4)")
    parser.add_argument("--poll-every", type=float, default=1.0, help="seconds between page loads (default 1)")
    parser.add_argument("--repeat", type=int, default=1, help="closed/open pairs to run (default 1)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="soak-bench-web-") as scratch:
        for pair in range(args.repeat):
            for mode in ("closed", "open"):
                print(f"run {pair + 1}/{args.repeat}, page {mode}…", file=sys.stderr, flush=True)
                results.append(measure(mode, Path(scratch) / f"{mode}-{pair}", args))
    columns = ("mode", "run", "lag_p99_ms", "loop_lag_p99_ms", "late_sends_1s", "sends", "pages", "page_ms")
    print(" | ".join(columns))
    for result in results:
        print(" | ".join(_text(result[column]) for column in columns))
    for figure in ("lag_p99_ms", "loop_lag_p99_ms"):
        closed = [r[figure] for r in results if r["mode"] == "closed" and r[figure] is not None]
        opened = [r[figure] for r in results if r["mode"] == "open" and r[figure] is not None]
        if closed and opened and sum(closed) > 0:
            ratio = (sum(opened) / len(opened)) / (sum(closed) / len(closed))
            print(f"{figure}: page open / closed = {ratio:.2f}")


if __name__ == "__main__":
    main()
