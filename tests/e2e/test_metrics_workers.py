"""`--metrics-bind` with load workers: the requests the worker processes finish reach the page like every other record
(the master hands each to the run), so the page's final count is summary.json's."""

from __future__ import annotations

import json

import pytest

from support.prometheus_api import run_scraped

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

RUN = ["start", "--duration", "40s", "--warmup", "10s", "--window", "5s", "--sample-every", "1s", "--rate", "6",
       "--scenario", "chat_short", "--no-idle-probes", "--workers", "2", "--json"]


def test_the_workers_requests_are_on_the_page(tmp_path):
    run = run_scraped([*RUN, "--out", str(tmp_path)])
    assert run.returncode in (0, 1, 3), run.stderr[-4000:]
    stdout, last = run.stdout, run.last
    summary = json.loads(stdout)
    seen = last[""]
    assert seen["run_id"] == summary["run_id"] and seen["finished"] == 1.0, seen
    assert seen["requests"] == summary["totals"]["requests"] > 0, (seen, summary["totals"])
