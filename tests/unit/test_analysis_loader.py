"""The loader fills the analysis's newer inputs from a stored run: horizon, headroom series, per-scenario windows."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy.orm import Session

from soak.analysis.loader import load_run_data
from soak.config import DEFAULT_HORIZON_S
from soak.store import Store
from soak.store.models import (
    ALL_SCENARIOS,
    HOST_AVAILABLE_METRIC,
    GpuProcessSample,
    GpuSample,
    LatencyWindowRow,
    MetricSample,
    RequestWindowRow,
    Run,
)

GIB = 2**30


def _run_row(config: dict | None) -> Run:
    return Run(id="r1", status="finished", started_at="2026-01-01T00:00:00Z", t0_epoch_s=0.0, planned_duration_s=120.0,
               duration_s=120.0, warmup_s=30.0, window_s=30.0, out_dir="/tmp", target_kind="reference",
               config_json=json.dumps(config if config is not None else {}), environment_json="{}")


def _window(index: int, scenario: str, requests: int, cancelled: int = 0) -> RequestWindowRow:
    return RequestWindowRow(run_id="r1", window_index=index, scenario=scenario, start_s=30.0 + 30 * index,
                            end_s=60.0 + 30 * index, requests=requests, cancelled=cancelled, err_http_5xx=index,
                            output_tokens=10 * requests, late_sends_1s=0)


@pytest.fixture
def stored(tmp_path):
    """A migrated database and a function that stores rows under run r1 and loads its RunData."""
    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")

    def store_and_load(config: dict | None, rows: list) -> object:
        with Session(store.engine) as session:
            session.add(_run_row(config))
            session.flush()
            session.add_all(rows)
            session.commit()
        return load_run_data(store, store.get_run("r1"), stopped_early=False)

    return store_and_load


def test_the_horizon_comes_from_the_stored_config(stored):
    assert stored({"horizon_s": 259200.0}, []).horizon_s == 259200.0


def test_a_run_stored_before_the_horizon_gets_the_default(stored):
    data = stored({"duration_s": 120.0}, [])
    assert data.horizon_s == DEFAULT_HORIZON_S == 7 * 86400.0
    assert data.host is None and dict(data.scenario_windows) == {}


def test_the_headroom_series_sums_the_free_memory_of_the_serving_gpus(stored):
    rows = [MetricSample(run_id="r1", t_s=t, name=HOST_AVAILABLE_METRIC, value=(8 - t / 10) * GIB) for t in (0.0, 5.0)]
    for t in (0.0, 5.0):
        rows += [GpuSample(run_id="r1", t_s=t, gpu_index=i, mem_total_bytes=80 * GIB, mem_used_bytes=(10 + i) * GIB)
                 for i in range(3)]
    # GPU 2 serves nothing of the tree, so its free memory is not the server's headroom.
    rows += [GpuProcessSample(run_id="r1", t_s=0.0, gpu_index=i, pid=100 + i, used_bytes=GIB) for i in (0, 1)]
    host = stored({}, rows).host
    assert host is not None
    np.testing.assert_allclose(host.t_s, [0.0, 5.0])
    np.testing.assert_allclose(host.available_bytes, [8 * GIB, 7.5 * GIB])
    np.testing.assert_allclose(host.gpu_free_bytes, [(70 + 69) * GIB] * 2)


def test_without_a_gpu_the_headroom_is_host_memory_alone(stored):
    rows = [MetricSample(run_id="r1", t_s=0.0, name=HOST_AVAILABLE_METRIC, value=4 * GIB),
            MetricSample(run_id="r1", t_s=0.0, name="vllm:other_series", value=1.0)]
    host = stored({}, rows).host
    assert host is not None and host.gpu_free_bytes is None
    np.testing.assert_allclose(host.available_bytes, [4 * GIB])


def test_each_scenario_has_its_own_windows_and_the_mix_stays_in_request_windows(stored):
    rows = [_window(i, ALL_SCENARIOS, 20, cancelled=5) for i in range(2)]
    rows += [_window(i, "cancel", 8, cancelled=5) for i in range(2)] + [_window(i, "chat_short", 12) for i in range(2)]
    rows += [LatencyWindowRow(run_id="r1", window_index=1, scenario="cancel", metric="lag", start_s=60.0, end_s=90.0,
                              count=8, p50_ms=1.0, p90_ms=2.0, p95_ms=3.0, p99_ms=40.0)]
    data = stored({}, rows)
    assert set(data.scenario_windows) == {"cancel", "chat_short"}
    cancel = data.scenario_windows["cancel"]
    assert [w.index for w in cancel] == [0, 1]
    assert cancel[1].requests == 3 and cancel[1].cancelled == 5 and cancel[1].sends == 8
    assert cancel[1].errors["http_5xx"] == 1 and cancel[1].output_tokens == 80
    assert cancel[0].lag_p99_ms is None and cancel[1].lag_p99_ms == 40.0
    assert [w.requests for w in data.request_windows] == [15, 15]


def _goodput_window(index: int, requests: int, cancelled: int, slo_met: int | None) -> RequestWindowRow:
    return RequestWindowRow(run_id="r1", window_index=index, scenario=ALL_SCENARIOS, start_s=30.0 + 30 * index,
                            end_s=60.0 + 30 * index, requests=requests, cancelled=cancelled, slo_met=slo_met)


def test_the_slo_and_each_windows_good_requests_come_from_the_store_and_reach_the_summary(stored, tmp_path):
    from soak.run.summary import goodput_of

    config = {"slo": {"ttft_ms": 500.0, "itl_ms": None, "tpot_ms": None, "e2e_ms": 20000.0}}
    run = stored(config, [_goodput_window(-1, 10, 0, 10), _goodput_window(0, 12, 2, 9),
                          _goodput_window(1, 20, 0, 15)])
    assert run.slo == {"ttft": 500.0, "e2e": 20000.0}
    assert [(w.index, w.requests, w.slo_met) for w in run.request_windows] == [(-1, 10, 10), (0, 10, 9), (1, 20, 15)]
    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    goodput = goodput_of(store, store.get_run("r1"))
    assert goodput.slo_ms == {"ttft": 500.0, "e2e": 20000.0}
    assert (goodput.requests, goodput.good) == (30, 24) and goodput.share == pytest.approx(0.8)  # warm-up left out
    assert [w.share for w in goodput.windows] == [pytest.approx(0.9), pytest.approx(0.75)]


def test_a_run_without_an_slo_has_no_goodput(stored, tmp_path):
    from soak.run.summary import goodput_of

    run = stored({}, [_goodput_window(0, 12, 0, None)])
    assert run.slo is None and run.request_windows[0].slo_met is None
    store = Store.open(f"sqlite:///{tmp_path / 'soak.db'}")
    assert goodput_of(store, store.get_run("r1")) is None
