"""`--metrics-bind` with load workers: the requests the worker processes finish reach the page like every other record
(the master hands each to the run), so the page's final count is summary.json's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support.prometheus_api import free_port, scrape_until_exit

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

RUN = ["start", "--duration", "40s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s", "--rate", "6",
       "--scenario", "chat_short", "--no-idle-probes", "--workers", "2", "--json"]


def test_the_workers_requests_are_on_the_page(tmp_path):
    port = free_port()
    soak = subprocess.Popen([sys.executable, "-m", "soak", *RUN, "--out", str(tmp_path),
                             "--metrics-bind", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        last = scrape_until_exit(f"http://127.0.0.1:{port}/metrics", soak, timeout_s=240)
        stdout, stderr = soak.communicate(timeout=60)
    finally:
        if soak.poll() is None:
            soak.kill()
    assert soak.returncode in (0, 1, 3), stderr[-4000:]
    summary = json.loads(stdout)
    seen = last[""]
    assert seen["run_id"] == summary["run_id"] and seen["finished"] == 1.0, seen
    assert seen["requests"] == summary["totals"]["requests"] > 0, (seen, summary["totals"])
