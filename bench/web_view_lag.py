"""Benchmark: does the live view slow the load? The client's schedule lag with the page open and polled, against
the same run with it closed.

Runs `soak start --web` twice against the embedded reference server with the same seed and plan: once with no
one looking ("closed"), once with a browser's worth of polling ("open": plotly.js once, then the run's page every
`--poll-every` seconds, faster than the page's own 5 s reload). Prints, per run, the schedule-lag P99 and the
event-loop lag P99 that `client.saturation` judges, the late sends, and the pages served, then the ratio
open/closed. The live view runs in its own process and reads the database, so the ratio should stay near 1
(within the noise of two short runs on a shared machine).

    python bench/web_view_lag.py [--duration 60s] [--rate 4] [--poll-every 1] [--repeat 1]

With `--page-hours H` it also times the live page of a synthetic run of H hours at 1 Hz that reads as running
(bench/report_render.py's run): the first build (analysis plus report) and a cached one. A running run's page is
rebuilt at most once per five build times, so this says how fresh the page of a long run can be.
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


def time_long_page(hours: float) -> None:
    """Build the live page of a synthetic running run of `hours`: first (analysis and report) and cached."""
    import os
    import socket
    import sqlite3

    from report_render import build_run  # bench/report_render.py, beside this script

    from soak.store import Store
    from soak.web.pages import BUILD_DUTY_FACTOR, LivePages

    with tempfile.TemporaryDirectory(prefix="soak-bench-page-") as scratch:
        store = Store.open(f"sqlite:///{Path(scratch) / 'soak.db'}")
        build_run(store, "RUN", hours)
        db = sqlite3.connect(Path(scratch) / "soak.db")  # this process stands in for the run's live soak
        environment = {**json.loads(db.execute("select environment_json from runs").fetchone()[0] or "{}"),
                       "host": socket.gethostname()}
        db.execute("update runs set status='running', soak_pid=?, ended_at=NULL, duration_s=NULL, "
                   "summary_json=NULL, environment_json=?", (os.getpid(), json.dumps(environment)))
        db.commit()
        pages = LivePages(store)
        times = []
        for _ in range(2):
            started = time.monotonic()
            pages.run_page("RUN")
            times.append(time.monotonic() - started)
        store.close()
    print(f"live page of a {hours:g} h running run: first build {times[0]:.2f} s, cached {times[1] * 1000:.1f} ms; "
          f"rebuilt at most every {max(2.5, BUILD_DUTY_FACTOR * times[0]):.0f} s")


def _text(value: Any) -> str:
    return "—" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="60s", help="each run's length (default 60s)")
    parser.add_argument("--rate", type=float, default=4.0, help="request rate (default 4)")
    parser.add_argument("--poll-every", type=float, default=1.0, help="seconds between page loads (default 1)")
    parser.add_argument("--repeat", type=int, default=1, help="closed/open pairs to run (default 1)")
    parser.add_argument("--page-hours", type=float, help="also time the live page of a synthetic run this long")
    args = parser.parse_args()
    if args.page_hours:
        time_long_page(args.page_hours)
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
