"""Talking to a Prometheus or Alertmanager a test started: a free loopback port for it, waiting until it is ready,
and instant queries of its HTTP API."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

READY_S = 60.0


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_ready(url: str, process: subprocess.Popen, log: Path, ready_s: float = READY_S) -> None:
    """Poll `url` until it answers 200; fail with the log's tail if the process exits or the deadline passes."""
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{process.args[0]} exited: {log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"{url} not ready in {ready_s:.0f} s: {log.read_text()[-3000:]}")


def query(url: str, promql: str, at_epoch_s: float | None = None) -> list[dict[str, Any]]:
    """An instant query's result (a vector, or a matrix for a range selector), at a time or now."""
    params = {"query": promql} | ({} if at_epoch_s is None else {"time": f"{at_epoch_s:.3f}"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]["result"]


def one_value(url: str, promql: str, at_epoch_s: float) -> float:
    """The single value an instant query answers."""
    result = query(url, promql, at_epoch_s)
    assert len(result) == 1, (promql, result)
    return float(result[0]["value"][1])


@dataclass
class ScrapedRun:
    """A `soak start --metrics-bind` the test ran and scraped to its end."""

    returncode: int
    stdout: str
    stderr: str
    last: dict[str, dict]  # what each run last showed on the page, by replica ("" outside a fleet)


def run_scraped(soak_args: list[str], timeout_s: float = 240) -> ScrapedRun:
    """Run `soak *soak_args --metrics-bind 127.0.0.1:<free port>` and scrape its page until it exits."""
    port = free_port()
    soak = subprocess.Popen([sys.executable, "-m", "soak", *soak_args, "--metrics-bind", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        last = scrape_until_exit(f"http://127.0.0.1:{port}/metrics", soak, timeout_s=timeout_s)
        stdout, stderr = soak.communicate(timeout=60)
    finally:
        if soak.poll() is None:
            soak.kill()
    return ScrapedRun(soak.returncode, stdout, stderr, last)


def scrape_until_exit(url: str, process: subprocess.Popen, timeout_s: float) -> dict[str, dict]:
    """Scrape a soak page every half second until `process` (the soak that serves it) exits; what each run last
    showed, by its replica ("" outside a fleet)."""
    deadline, last = time.monotonic() + timeout_s, {}
    while process.poll() is None and time.monotonic() < deadline:
        for replica, seen in runs_on_page(url).items():
            last[replica] = seen
        time.sleep(0.5)
    return last


def runs_on_page(url: str) -> dict[str, dict]:
    """replica → its run id, finished requests, soak_run_finished and check verdicts, as the page shows them now."""
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return {}
    seen: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            replica = seen.setdefault(sample.labels["replica"], {"run_id": sample.labels["run_id"], "requests": 0.0,
                                                                  "finished": None, "verdicts": {}})
            if family.name == "soak_requests":
                replica["requests"] += sample.value
            elif family.name == "soak_run_finished":
                replica["finished"] = sample.value
            elif family.name == "soak_check_verdict":
                replica["verdicts"][sample.labels["check"]] = sample.value
    return seen
