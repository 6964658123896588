"""The load follows a server that moved (a replaced Kubernetes pod): after `retarget` every new request goes to
the new address, open loop unbroken, and none is lost between the two."""

from __future__ import annotations

import time

import gevent
import pytest
from loadtools import make_config, run_load, start_mock


@pytest.fixture
def second_server():
    server = start_mock()
    yield server
    server.process.kill()
    server.process.wait(timeout=10)


@pytest.mark.timeout(60)
def test_after_retarget_every_request_goes_to_the_new_address(mock_server, second_server):
    model = mock_server.model(ttft_ms=10, itl_ms=2, tokens=3)
    marks = {}

    def move(run):
        gevent.sleep(max(run.t0 + 1.5 - time.time(), 0))
        marks["moved"] = time.time()
        run.handle.retarget(second_server.url + "/")

    run = run_load(make_config(duration_s=3, rate_rps=20, seed=4), mock_server.url, model, during=move)
    before = [r for r in run.records if r.intended_t < marks["moved"]]
    after = [r for r in run.records if r.intended_t >= marks["moved"]]
    assert len(before) >= 10 and len(after) >= 10
    assert all(r.error_class is None for r in run.records)
    assert mock_server.stats(model)["requests"] == len(before)
    assert second_server.stats(model)["requests"] == len(after)
    assert len(run.records) == run.counters.sends
